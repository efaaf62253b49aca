import { expect } from 'chai';
import { DBError } from 'objection';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createDb, isDbUnavailable, isUniqueViolation, knexConfig, type Knex } from '../../src/db/knex.js';
import { IamStore } from '../../src/iam/store.js';
import { ApiKeyStore } from '../../src/auth/api-keys.js';
import { freshDatabase, type TestDb } from '../support/service.js';

/** The model layer (objection over knex) on the database the suite runs on. */
describe('IAM store and API keys (objection models)', () => {
  let tdb: TestDb;
  let db: Knex;
  let dataDir: string;
  let store: IamStore;
  let keys: ApiKeyStore;

  before(async () => {
    tdb = await freshDatabase();
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-store-'));
    db = createDb({ databaseUrl: tdb.url, dataDir });
    await db.migrate.latest(knexConfig({ databaseUrl: tdb.url, dataDir }).migrations);
    store = new IamStore(db);
    keys = new ApiKeyStore(db);
  });
  after(async () => {
    await db.destroy();
    await tdb.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('maps users between camelCase fields and snake_case columns, lists as JSON text', async () => {
    const created = await store.createUser({ username: 'ann', displayName: 'Ann', groups: ['INT_VIEWER'], extraPermissions: ['x:read'], email: undefined });
    expect(created).to.include({ username: 'ann', displayName: 'Ann', email: null, hashedPassword: null, disabled: false });
    const row = await db('users').where({ id: created.id }).first();
    expect(row).to.include({ display_name: 'Ann', groups: '["INT_VIEWER"]', extra_permissions: '["x:read"]', roles: '[]' });

    // undefined means "not given": the display name stays
    await store.updateUser(created.id, { disabled: true, roles: ['r1'], displayName: undefined });
    const read = (await store.userById(created.id))!;
    expect(read).to.include({ displayName: 'Ann', disabled: true });
    expect(read.disabled).to.be.a('boolean');
    expect(read.roles).to.deep.equal(['r1']);
    expect(read.createdAt).to.be.a('number');
    expect((await store.userByUsername('ann'))!.id).to.equal(created.id);
    expect(await store.userById('00000000-0000-0000-0000-000000000000')).to.equal(null);
  });

  it('reads a list column that holds no JSON list as an empty list', async () => {
    const eve = await store.createUser({ username: 'eve' });
    await db('users').where({ id: eve.id }).update({ groups: '', roles: 'null', extra_permissions: 'INT_ADMIN' });
    expect(await store.userById(eve.id)).to.deep.include({ groups: [], roles: [], extraPermissions: [] });
    await db('users').where({ id: eve.id }).update({ groups: '["INT_USER", 7]' });
    expect((await store.userById(eve.id))!.groups).to.deep.equal(['INT_USER', '7']);
  });

  it('writes only the fields a row has', async () => {
    const body = { name: 'qa', description: 'testers', permissions: [], members: ['x'] } as { name: string };
    expect(await store.createGroup(body)).to.not.have.property('members');
    await store.updateGroup('qa', { name: 'renamed', description: 'QA' } as { description: string });
    expect(await store.group('qa')).to.include({ description: 'QA' });
  });

  it('links identities through the relation and finds a user by one', async () => {
    const bob = await store.createUser({ username: 'bob' });
    await store.linkIdentity(bob.id, 'oidc', 'sub-1');
    await store.linkIdentity(bob.id, 'ldap', 'uid=bob');
    await store.linkIdentity(bob.id, 'oidc', 'sub-1'); // again: ignored
    expect((await store.identitiesOf([bob.id])).get(bob.id)).to.deep.equal([
      { provider: 'oidc', providerUserId: 'sub-1' },
      { provider: 'ldap', providerUserId: 'uid=bob' },
    ]);
    expect((await store.userByIdentity('ldap', 'uid=bob'))?.username).to.equal('bob');
    expect(await store.userByIdentity('ldap', 'uid=nobody')).to.equal(null);
  });

  it('recognises a unique violation raised through a model', async () => {
    const err = await store.createUser({ username: 'bob' }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(String((err as Error)?.message)).to.match(/unique|duplicate/i);
    expect(isUniqueViolation(err)).to.equal(true);
    expect(isDbUnavailable(err)).to.equal(false);
    // a server that went away, as objection hands it over on PostgreSQL
    // (objection's types give DBError the constructor of Error; at run time it takes its arguments as an object)
    const Wrapped = DBError as unknown as new (args: { nativeError: Error }) => Error;
    const terminated = new Wrapped({ nativeError: Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }) });
    expect(isDbUnavailable(terminated)).to.equal(true);
    expect(isUniqueViolation(terminated)).to.equal(false);
  });

  it('renames a group and rewrites its members in one transaction', async () => {
    await store.createGroup({ name: 'ops', permissions: ['a:read'] });
    const carl = await store.createUser({ username: 'carl', groups: ['ops', 'INT_VIEWER'] });
    expect((await store.membersOf('ops')).map((u) => u.username)).to.deep.equal(['carl']);
    expect(await store.renameOrDeleteGroup('ops', 'operators')).to.deep.equal([carl.id]);
    expect(await store.group('ops')).to.equal(null);
    expect(await store.group('operators'))
      .to.include({ description: '' })
      .and.have.property('permissions')
      .that.deep.equals(['a:read']);
    expect((await store.userById(carl.id))!.groups).to.have.members(['INT_VIEWER', 'operators']);
  });

  it('keeps keys camelCase, scopes as a list, and a disabled owner makes them dead', async () => {
    const dana = await store.createUser({ username: 'dana' });
    const { token, key } = await keys.create(dana.id, 'key', { label: 'ci', scopes: ['a:read'] });
    expect(key).to.include({ userId: dana.id, kind: 'key', label: 'ci', revokedAt: null, expiresAt: null });
    expect(key).to.not.have.property('tokenHash');
    expect((await keys.get(key.id))!.scopes).to.deep.equal(['a:read']);
    // null: not narrowed; text that is not a list narrows to nothing rather than to everything
    const { key: wide } = await keys.create(dana.id, 'key', { label: 'all' });
    expect((await keys.get(wide.id))!.scopes).to.equal(null);
    await db('api_keys').where({ id: wide.id }).update({ scopes: 'a:read' });
    expect((await keys.get(wide.id))!.scopes).to.deep.equal([]);
    await keys.revoke(dana.id, wide.id);
    expect((await keys.listFor(dana.id)).map((k) => k.id)).to.deep.equal([key.id]);
    expect(token).to.be.a('string');

    expect([...(await keys.liveIds([key.id]))]).to.deep.equal([key.id]);
    await store.updateUser(dana.id, { disabled: true });
    expect((await keys.liveIds([key.id])).size).to.equal(0);
    await store.updateUser(dana.id, { disabled: false });

    expect(await keys.revokeAllOf(dana.id)).to.equal(1);
    expect((await keys.get(key.id))!.revokedAt).to.be.a('number');
    expect(await keys.listFor(dana.id)).to.deep.equal([]);
  });
});
