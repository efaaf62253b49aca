import net from 'node:net';
import { expect } from 'chai';
import request from 'supertest';
import type { CredentialsProvider, ExternalProfile } from '../../src/auth/providers/types.js';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { createUser, patchAuthSettings, userNamed } from './helpers.js';

const ENV_OIDC_SECRET = 'env-oidc-client-secret-0123456789';
const STORED_BIND_PASSWORD = 'stored-bind-password-0123456789';

/** A small plugin provider: one PIN per user, and it tries to speak for "ldap" (the chain must not let it). */
function pinProvider(): CredentialsProvider & { calls: number } {
  return {
    id: 'pin',
    kind: 'credentials',
    label: 'PIN',
    calls: 0,
    async authenticate(username: string, password: string): Promise<ExternalProfile | null> {
      this.calls++;
      if (password !== `${username}-1234`) return null;
      return { provider: 'ldap', provider_user_id: `pin:${username}`, username, email: `${username}@pin.test`, email_verified: true };
    },
  };
}

describe('auth settings API and plugin providers', function () {
  let svc: TestService;

  before(async function () {
    svc = await startService({ env: { SERVICE_OIDC_CLIENT_SECRET: ENV_OIDC_SECRET } });
    await createUser(svc.url, { username: 'viewer', password: 'viewer-password-1', groups: ['INT_USER'] });
  });

  after(async function () {
    await svc?.destroy();
  });

  it('needs feature:admin.settings', async function () {
    await request(svc.url).get('/api/settings/auth').expect(401);
    const viewer = 'Basic ' + Buffer.from('viewer:viewer-password-1').toString('base64');
    const res = await request(svc.url).patch('/api/settings/auth').set('Authorization', viewer).send({ oidc_label: 'x' }).expect(403);
    expect(res.body.error.message).to.include('feature:admin.settings');
  });

  it('shows every field with its source and lock, secrets masked', async function () {
    const res = await request(svc.url).get('/api/settings/auth').set('Authorization', adminAuth()).expect(200);
    const s = res.body.settings;
    expect(s.oidc_client_secret).to.deep.equal({
      label: 'OIDC client secret',
      kind: 'secret',
      value: '********',
      source: 'env',
      locked: true,
      secret: true,
      configured: true,
    });
    expect(s.ldap_bind_password).to.deep.equal({
      label: 'LDAP bind password',
      kind: 'secret',
      value: null,
      source: 'default',
      locked: false,
      secret: true,
      configured: false,
    });
    // label and kind for the settings page, from the one settings table
    expect(s.ldap_group_mapping).to.deep.include({ label: 'LDAP group mapping', kind: 'mapping', value: {} });
    expect(s.sso_default_groups).to.deep.include({ kind: 'list', value: ['INT_VIEWER'] });
    expect(s.auth_providers).to.deep.include({ value: ['local'], source: 'default', locked: false });
    expect(s.ldap_user_filter.value).to.equal('(uid={username})');
    expect(res.text).not.to.include(ENV_OIDC_SECRET);
  });

  it('stores secrets encrypted, never returns them, keeps them when the mask is sent back, clears them with null', async function () {
    await patchAuthSettings(svc.url, { ldap_bind_password: STORED_BIND_PASSWORD, ldap_bind_dn: 'cn=reader,dc=example,dc=org' }).expect(200);
    const view = await request(svc.url).get('/api/settings/auth').set('Authorization', adminAuth()).expect(200);
    expect(view.body.settings.ldap_bind_password).to.deep.include({ value: '********', source: 'store', configured: true });
    expect(view.body.settings.ldap_bind_dn).to.deep.include({ value: 'cn=reader,dc=example,dc=org', source: 'store' });
    expect(view.text).not.to.include(STORED_BIND_PASSWORD);
    const rows = await svc.service.db('secrets').where({ namespace: 'core/auth' });
    expect(rows.map((r: any) => r.key)).to.include.members(['ldap_bind_password', 'ldap_bind_dn']);
    expect(JSON.stringify(rows)).not.to.include(STORED_BIND_PASSWORD);

    const patched = await patchAuthSettings(svc.url, { ldap_bind_password: '********' }).expect(200);
    expect(patched.body.settings.ldap_bind_password.configured).to.equal(true);
    expect(await svc.service.iam.secrets.get('core/auth', 'ldap_bind_password')).to.equal(JSON.stringify(STORED_BIND_PASSWORD));

    const cleared = await patchAuthSettings(svc.url, { ldap_bind_password: null, ldap_bind_dn: null }).expect(200);
    expect(cleared.body.settings.ldap_bind_password).to.deep.include({ value: null, configured: false, source: 'default' });
  });

  it('a masked secret is never sent to a new endpoint: changing where it goes needs it entered again', async function () {
    // an LDAP "server" the attacker controls: it records whoever connects
    const connections: string[] = [];
    const trap = net.createServer((sock) => {
      sock.on('data', (d) => connections.push(d.toString('latin1')));
      sock.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => trap.listen(0, '127.0.0.1', () => resolve()));
    const trapUrl = `ldap://127.0.0.1:${(trap.address() as net.AddressInfo).port}`;
    try {
      await patchAuthSettings(svc.url, {
        ldap_url: 'ldap://ldap.example.test',
        ldap_base_dn: 'dc=example,dc=org',
        ldap_bind_dn: 'cn=reader,dc=example,dc=org',
        ldap_bind_password: STORED_BIND_PASSWORD,
      }).expect(200);
      for (const patch of [
        { ldap_url: trapUrl, ldap_bind_password: '********', auth_providers: 'ldap,local' },
        { ldap_url: trapUrl, auth_providers: 'ldap,local' },
        { ldap_bind_dn: 'cn=attacker,dc=evil,dc=test', ldap_bind_password: '********' },
        // turning certificate checks off would hand the password to whoever sits on the network
        { ldap_tls_verify: false },
        { ldap_tls_verify: false, ldap_bind_password: '********' },
      ]) {
        const res = await patchAuthSettings(svc.url, patch).expect(400);
        const moved = Object.keys(patch).find((f) => ['ldap_url', 'ldap_bind_dn', 'ldap_tls_verify'].includes(f));
        expect(res.body.error.details, JSON.stringify(patch)).to.deep.equal([
          { field: 'ldap_bind_password', message: `must be entered again when ${moved} changes` },
        ]);
      }
      // nothing changed: a login does not reach the trap
      await request(svc.url).post('/api/auth/login').send({ username: 'someone', password: 'whatever-it-is' }).expect(401);
      expect(connections).to.deep.equal([]);
      const view = (await request(svc.url).get('/api/settings/auth').set('Authorization', adminAuth()).expect(200)).body.settings;
      expect(view.ldap_url.value).to.equal('ldap://ldap.example.test');
      // unchanged endpoint: the mask keeps the secret; a new endpoint with the secret typed again is fine
      await patchAuthSettings(svc.url, { ldap_url: 'ldap://ldap.example.test', ldap_bind_password: '********', ldap_group_attr: 'memberOf' }).expect(200);
      await patchAuthSettings(svc.url, { ldap_url: 'ldap://ldap2.example.test', ldap_bind_password: 'typed-again-0123456789' }).expect(200);
      // the OIDC client secret is set in the environment here: its issuer and client id cannot move away from it
      const oidc = await patchAuthSettings(svc.url, { oidc_issuer: 'https://idp.evil.test' }).expect(400);
      expect(oidc.body.error.details[0].field).to.equal('oidc_client_secret');
      expect(oidc.body.error.details[0].message).to.match(/SERVICE_OIDC_CLIENT_SECRET/);
    } finally {
      trap.close();
      await patchAuthSettings(svc.url, { ldap_url: null, ldap_base_dn: null, ldap_bind_dn: null, ldap_bind_password: null, ldap_group_attr: null }).expect(200);
    }
  });

  it('unsetting the LDAP URL unsets the stored bind password in the same change', async function () {
    await patchAuthSettings(svc.url, {
      ldap_url: 'ldap://ldap.example.test',
      ldap_base_dn: 'dc=example,dc=org',
      ldap_bind_dn: 'cn=reader,dc=example,dc=org',
      ldap_bind_password: STORED_BIND_PASSWORD,
    }).expect(200);
    try {
      const res = await patchAuthSettings(svc.url, { ldap_url: null }).expect(200);
      expect(res.body.settings.ldap_url).to.include({ source: 'default' });
      expect(res.body.settings.ldap_bind_password).to.deep.include({ value: null, configured: false, source: 'default' });
      expect(await svc.service.iam.secrets.get('core/auth', 'ldap_bind_password')).to.equal(null);
      // one event names both fields (never a value)
      await svc.service.iam.audit.flush();
      const events = (await request(svc.url).get('/api/audit').query({ limit: 50, action: 'settings.changed' }).set('Authorization', adminAuth()).expect(200))
        .body.events as { details: unknown }[];
      expect(events[0]!.details).to.deep.equal({ fields: ['ldap_url', 'ldap_bind_password'] });
    } finally {
      await patchAuthSettings(svc.url, { ldap_url: null, ldap_base_dn: null, ldap_bind_dn: null, ldap_bind_password: null }).expect(200);
    }
  });

  it('answers 409 for an env-set field, even with other fields, and changes nothing', async function () {
    const res = await patchAuthSettings(svc.url, { oidc_client_secret: 'another-secret', oidc_label: 'Changed' }).expect(409);
    expect(res.body.error.details.locked).to.deep.equal([{ field: 'oidc_client_secret', env: 'SERVICE_OIDC_CLIENT_SECRET' }]);
    expect(JSON.stringify(res.body)).not.to.include(ENV_OIDC_SECRET);
    const view = await request(svc.url).get('/api/settings/auth').set('Authorization', adminAuth()).expect(200);
    expect(view.body.settings.oidc_label.value).to.equal('SSO');
  });

  it('validates: unknown fields and providers, bad values, an empty patch, unknown default groups', async function () {
    for (const [patch, field, says] of [
      [{ nope: 1 }, 'nope', /not allowed/],
      [{ auth_providers: 'local,kerberos' }, 'auth_providers', /unknown provider "kerberos"/],
      [{ auth_providers: [] }, 'auth_providers', /at least one provider/],
      // a brace in a value is text, not a message template (it was a 500)
      [{ auth_providers: 'local,x{username}' }, 'auth_providers', /unknown provider "x\{username\}"/],
      [{ ldap_url: 'http://not-ldap' }, 'ldap_url', /must be ldap:\/\/ or ldaps:\/\/ URLs separated by spaces, not "http:\/\/not-ldap"/],
      [{ ldap_user_filter: '(uid=*)' }, 'ldap_user_filter', /parenthesised LDAP filter containing \{username\}$/],
      [{ oidc_scopes: 'profile email' }, 'oidc_scopes', /must contain openid/],
      [{ sso_default_groups: 'NO_SUCH_GROUP' }, 'sso_default_groups', /NO_SUCH_GROUP/],
      [{}, 'body', /at least one setting/],
    ] as const) {
      const res = await patchAuthSettings(svc.url, patch).expect(400);
      expect(res.body.error.code).to.equal('validation_failed');
      const detail = res.body.error.details.find((d: any) => d.field === field);
      expect(detail, JSON.stringify(patch)).to.not.equal(undefined);
      expect(detail.message, JSON.stringify(patch)).to.match(says);
    }
  });

  it('refuses a chain it cannot build (400) and keeps the old one', async function () {
    const res = await patchAuthSettings(svc.url, { auth_providers: 'ldap,local' }).expect(400);
    expect(res.body.error.details).to.deep.equal([{ field: 'ldap', message: 'LDAP needs ldap_url and ldap_base_dn' }]);
    const providers = await request(svc.url).get('/api/auth/providers').expect(200);
    expect(providers.body.providers.map((p: any) => p.id)).to.deep.equal(['local']);
  });

  it('keeps a plugin-registered provider through a settings rebuild; the plugin cannot speak for another provider', async function () {
    const pin = pinProvider();
    svc.service.bus.emit('auth:register_provider', { provider: pin, plugin_name: 'pin-plugin' });
    // malformed or reserved ones are refused, the chain stays usable
    svc.service.bus.emit('auth:register_provider', {
      provider: { id: 'ldap', kind: 'credentials', label: 'fake', authenticate: async () => null },
      plugin_name: 'evil',
    });
    svc.service.bus.emit('auth:register_provider', { provider: { id: 'broken', kind: 'credentials', label: 'x' }, plugin_name: 'evil' });
    let providers = await request(svc.url).get('/api/auth/providers').expect(200);
    expect(providers.body.providers.map((p: any) => p.id)).to.deep.equal(['local', 'pin']);

    const first = await request(svc.url).post('/api/auth/login').send({ username: 'petra', password: 'petra-1234' }).expect(200);
    expect(first.body.user).to.include({ username: 'petra', email: 'petra@pin.test' });
    expect(first.body.user.groups).to.deep.equal(['INT_VIEWER']);
    const petra = await userNamed(svc.url, 'petra');
    expect(petra.identities).to.deep.equal([{ provider: 'pin', provider_user_id: 'pin:petra' }]);

    // a settings change rebuilds the chain: the plugin provider is still there, after the configured ones
    await request(svc.url)
      .post('/api/groups')
      .set('Authorization', adminAuth())
      .send({ name: 'PIN_USERS', permissions: ['api:read'] })
      .expect(201);
    const patched = await patchAuthSettings(svc.url, { sso_default_groups: 'PIN_USERS', oidc_label: 'Company SSO' }).expect(200);
    expect(patched.body.chain).to.deep.equal([
      { id: 'local', kind: 'credentials', label: 'Local account', source: 'config', plugin: null },
      { id: 'pin', kind: 'credentials', label: 'PIN', source: 'plugin', plugin: 'pin-plugin' },
    ]);
    providers = await request(svc.url).get('/api/auth/providers').expect(200);
    expect(providers.body.providers.map((p: any) => p.id)).to.deep.equal(['local', 'pin']);
    const calls = pin.calls;
    const second = await request(svc.url).post('/api/auth/login').send({ username: 'paul', password: 'paul-1234' }).expect(200);
    expect(pin.calls).to.equal(calls + 1);
    expect(second.body.user.groups, 'new SSO users get the changed default groups').to.deep.equal(['PIN_USERS']);
    // the admin still logs in locally first
    await request(svc.url).post('/api/auth/login').send({ username: 'admin', password: 'admin-test-password' }).expect(200);
    expect(pin.calls).to.equal(calls + 1);
  });

  it('a plugin provider that throws is skipped like a server that is down', async function () {
    svc.service.bus.emit('auth:register_provider', {
      provider: {
        id: 'flaky',
        kind: 'credentials',
        label: 'Flaky',
        authenticate: async () => {
          throw new Error('backend down');
        },
      },
      plugin_name: 'flaky-plugin',
    });
    await request(svc.url).post('/api/auth/login').send({ username: 'paul', password: 'paul-1234' }).expect(200);
    await request(svc.url).post('/api/auth/login').send({ username: 'nobody', password: 'nothing-at-all' }).expect(401);
  });
});
