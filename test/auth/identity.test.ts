import { expect } from 'chai';
import { ApiIdentity } from '../../src/auth/identity.js';
import { grantsInclude, expandGrants, CORE_CATALOG } from '../../src/iam/permissions.js';

const user = (perms: string[], scopes: string[] | null = null, superadmin = false) =>
  new ApiIdentity('u', 'id', 'api_key', false, new Set(perms), scopes, superadmin);

describe('ApiIdentity.allows', () => {
  it('the system key allows everything', () => {
    expect(ApiIdentity.system('stamp').allows('feature:admin.users')).to.equal(true);
    expect(ApiIdentity.system('stamp').allows('socket:container:cleanup')).to.equal(true);
  });

  it('superadmin bypasses permission checks', () => {
    expect(user([], null, true).allows('feature:admin.users')).to.equal(true);
  });

  it('allows what the effective set holds, and nothing else', () => {
    const id = user(['feature:dashboard.view', 'api:read']);
    expect(id.allows('feature:dashboard.view')).to.equal(true);
    expect(id.allows('feature:admin.users')).to.equal(false);
    expect(id.allows('api:write')).to.equal(false);
  });

  it('api:read / api:write satisfy per-plugin API permissions (the permanent fallback)', () => {
    const reader = user(['api:read']);
    expect(reader.allows('plugin:forwarder:api:read')).to.equal(true);
    expect(reader.allows('plugin:forwarder:api:write')).to.equal(false);
    expect(reader.allows('plugin:forwarder')).to.equal(false);
    expect(reader.allows('plugin:forwarder:route:/x')).to.equal(false);
    const writer = user(['api:write']);
    expect(writer.allows('plugin:a.b-c:api:write')).to.equal(true);
    expect(writer.allows('plugin:a.b-c:api:read')).to.equal(false);
  });

  it('a wildcard grant covers its namespace only', () => {
    const admin = user(['feature:*']);
    expect(admin.allows('feature:admin.users')).to.equal(true);
    expect(admin.allows('api:read')).to.equal(false);
    expect(admin.allows('socket:container:cleanup')).to.equal(false);
  });

  it('key_scopes narrow the owner permissions, with the same fallback', () => {
    const scoped = user(['feature:*', 'api:read', 'api:write'], ['api:read']);
    expect(scoped.allows('api:read')).to.equal(true);
    expect(scoped.allows('plugin:x:api:read')).to.equal(true);
    expect(scoped.allows('api:write')).to.equal(false);
    expect(scoped.allows('feature:admin.users')).to.equal(false);
    // a scope never grants what the owner lacks
    expect(user(['api:read'], ['api:write']).allows('api:write')).to.equal(false);
    // scopes bind a superadmin's key too
    expect(user([], ['api:read'], true).allows('feature:admin.users')).to.equal(false);
    expect(user([], ['api:read'], true).allows('api:read')).to.equal(true);
  });

  it('grantsInclude and expandGrants agree on wildcards', () => {
    expect(grantsInclude(['feature:*'], 'feature:x')).to.equal(true);
    const expanded = expandGrants(['feature:*', 'api:read'], CORE_CATALOG);
    expect(expanded).to.include('feature:admin.users').and.include('api:read');
    expect(expanded).not.to.include('feature:*');
    expect(expanded).to.deep.equal([...expanded].sort());
  });
});
