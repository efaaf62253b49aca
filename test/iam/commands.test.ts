import { expect } from 'chai';
import type { Knex } from 'knex';
import { migratedSqlite } from '../support/service.js';
import { EventBus } from '../../src/bus/bus.js';
import { createLogger } from '../../src/log.js';
import { AuditTrail } from '../../src/iam/audit.js';
import { CommandPath } from '../../src/iam/commands.js';
import { DomainError, isRecorded } from '../../src/errors.js';
import { IamStore } from '../../src/iam/store.js';
import { Passwords } from '../../src/iam/passwords.js';
import { LOGIN_MAPPING_ACTOR, UserAdmin } from '../../src/iam/users.js';
import { GroupAdmin } from '../../src/iam/groups.js';
import { KeyAdmin } from '../../src/iam/keys.js';
import { ApiKeyStore, type ApiKey } from '../../src/auth/api-keys.js';
import { CLI_ACTOR } from '../../src/iam/policy.js';
import { DEFAULT_GROUPS, grantsInclude, isKnownPermission, CORE_CATALOG } from '../../src/iam/permissions.js';
import type { Actor } from '../../src/iam/policy.js';

/** A plain administrator as a rule sees one: INT_ADMIN's permissions, no credential, no service. */
const PLAIN: Actor & { ip: string; allows(permission: string): boolean } = {
  username: 'plain',
  userId: '00000000-0000-4000-8000-00000000000a',
  isSystem: false,
  isSuperadmin: false,
  ip: '203.0.113.5',
  allows: (permission) => grantsInclude(['feature:*', 'api:read', 'api:write'], permission),
};

/**
 * The command path and the user writer on their own: an embedded database, a fake actor, no
 * service boot. The rules and the events a change or a refusal leaves.
 */
describe('command path and user writer (no service)', function () {
  let drop: () => Promise<void>;
  let db: Knex;
  let trail: AuditTrail;
  let commands: CommandPath;
  let users: UserAdmin;
  let store: IamStore;
  let groups: GroupAdmin;
  let keys: KeyAdmin<ApiKey>;
  let failRevocation = false;

  before(async () => {
    ({ db, drop } = await migratedSqlite());
    store = new IamStore(db);
    for (const g of DEFAULT_GROUPS) await store.createGroupIfMissing(g);
    const log = createLogger('silent');
    trail = new AuditTrail({ db, bus: new EventBus(log), log, coalesceMs: 60_000 });
    commands = new CommandPath(trail);
    const afreshDeps = {
      endEveryCredential: async (userId: string, trx: Knex) => ({
        credentials_revoked: await new ApiKeyStore(db).revokeAllOf(userId, { trx }),
        factors_removed: 0,
      }),
      passwordChanged: async () => undefined,
    };
    users = new UserAdmin({
      store,
      passwords: new Passwords({ threads: 0, cost: 4 }),
      bus: new EventBus(log),
      commands,
      isKnownPermission: (p) => isKnownPermission(CORE_CATALOG, p),
      accountDisabled: async (userId, trx) => {
        await new ApiKeyStore(db).revokeAllOf(userId, { trx });
        if (failRevocation) throw new Error('the database went away');
      },
      ...afreshDeps,
    });
    const known = (p: string) => isKnownPermission(CORE_CATALOG, p);
    groups = new GroupAdmin({ store, bus: new EventBus(log), commands, isKnownPermission: known, ...afreshDeps });
    keys = new KeyAdmin({
      users,
      vault: new ApiKeyStore(db),
      commands,
      isKnownPermission: known,
      permissionsOf: (scope) => [scope],
      ownerAllows: () => Promise.reject(new Error('no key issued here has scopes')),
    });
  });
  after(async () => {
    await drop?.();
  });

  const events = async (action: string) => {
    await trail.flush();
    return (await db('audit_events').where({ action }).orderBy('seq')).map((r) => ({
      actor: r.actor_username,
      ip: r.actor_ip,
      outcome: r.outcome,
      target: r.target_name,
      details: JSON.parse(r.details),
    }));
  };

  it('records a refusal once, marks it, and passes it on; other errors are not refusals', async () => {
    const refusal = new DomainError('forbidden', 'not for you');
    const command = { action: 'group.deleted' as const, actor: PLAIN, target: { type: 'group', id: 'g', name: 'g' } };
    let thrown: unknown;
    await commands.run(command, async () => Promise.reject(refusal)).catch((err) => (thrown = err));
    expect(thrown).to.equal(refusal);
    expect(isRecorded(refusal)).to.equal(true);
    // the transport that answers it finds it recorded and records nothing more
    commands.refused(command, refusal);
    await commands.run(command, async () => Promise.reject(new DomainError('conflict', 'in use'))).catch(() => undefined);
    await commands.run(command, async () => Promise.reject(new Error('a bug'))).catch(() => undefined);
    expect(await events('group.deleted')).to.deep.equal([
      { actor: 'plain', ip: '203.0.113.5', outcome: 'denied', target: 'g', details: { reason: 'not for you', code: 'forbidden' } },
    ]);
  });

  it('a plain administrator is refused a role, with a denied event naming the action and target', async () => {
    const err = await users.create(PLAIN, { username: 'wannabe', roles: ['superadmin'] }).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(DomainError).and.to.include({ code: 'forbidden' });
    const denied = (await events('user.created')).filter((e) => e.outcome === 'denied');
    expect(denied).to.have.length(1);
    expect(denied[0]).to.include({ actor: 'plain', target: 'wannabe' });
  });

  it('a sign-in whose mapping first brings an account to the host starts it afresh: a password a plain administrator set goes', async () => {
    await groups.create(CLI_ACTOR, { name: 'mapped-runners', permissions: ['socket:container:spawn'] });
    const staged = await users.create(PLAIN, { username: 'staged', password: 'staged-password-1', groups: ['INT_USER'] });
    const key = await keys.issue(PLAIN, staged, { label: 'by plain' });
    await users.logins.setGroups(LOGIN_MAPPING_ACTOR, staged, ['INT_USER', 'mapped-runners'], 'oidc');
    const now = (await store.userById(staged.id))!;
    expect(now).to.include({ hashedPassword: null, passwordTrusted: false });
    expect((await db('api_keys').where({ id: key.key.id }).first()).revoked_at).to.be.a('number');
    const [event] = (await events('user.updated')).filter((e) => e.target === 'staged');
    expect(event.details.started_afresh).to.deep.equal({ credentials_revoked: 1, factors_removed: 0, password_cleared: true });
    // one a trusted actor set stays, and so does an account that reached the host before
    const vouched = await users.create(CLI_ACTOR, { username: 'vouched', password: 'vouched-password-1', groups: ['INT_USER'] });
    await users.logins.setGroups(LOGIN_MAPPING_ACTOR, vouched, ['INT_USER', 'mapped-runners'], 'oidc');
    expect((await store.userById(vouched.id))!.hashedPassword).to.be.a('string');
    expect((await events('user.updated')).find((e) => e.target === 'vouched')!.details).not.to.have.property('started_afresh');
  });

  it('a credential written for an account that came to reach the host after it was read is refused at the write', async () => {
    await groups.create(CLI_ACTOR, { name: 'late-runners', permissions: ['socket:container:spawn'] });
    const stale = await users.create(PLAIN, { username: 'stale', password: 'stale-password-1', groups: ['INT_USER'] });
    // a trusted actor's grant lands after the administrator's request read the account...
    await users.update(CLI_ACTOR, stale, { groups: ['INT_USER', 'late-runners'] });
    // ...which its checks before the hash judged by what it read: the write judges the account as it is
    const refusedPassword = await users.setPassword(PLAIN, stale, 'stale-password-2').catch((e: unknown) => e);
    expect(refusedPassword).to.be.instanceOf(DomainError).and.to.include({ code: 'forbidden' });
    expect((refusedPassword as Error).message).to.match(/take over stale, whose access reaches the host/);
    const refusedKey = await keys.issue(PLAIN, stale, { label: 'late' }).catch((e: unknown) => e);
    expect(refusedKey).to.be.instanceOf(DomainError).and.to.include({ code: 'forbidden' });
    expect(await db('api_keys').where({ user_id: stale.id })).to.deep.equal([]);
    // a trusted actor's are written
    await users.setPassword(CLI_ACTOR, stale, 'stale-password-3');
    expect((await store.userById(stale.id))!.passwordTrusted).to.equal(true);
  });

  it('a login mapping that would take INT_ADMIN from its last enabled member keeps it, and says so', async () => {
    const only = await users.create(PLAIN, { username: 'only-admin', groups: ['INT_ADMIN'] });
    await users.logins.setGroups(LOGIN_MAPPING_ACTOR, only, ['INT_USER'], 'ldap');
    expect((await store.userById(only.id))!.groups).to.have.members(['INT_USER', 'INT_ADMIN']);
    const kept = (await events('user.updated')).filter((e) => e.target === 'only-admin');
    expect(kept.map((e) => e.details)).to.deep.equal([
      {
        fields: ['groups'],
        groups: ['INT_USER', 'INT_ADMIN'],
        previous_groups: ['INT_ADMIN'],
        groups_added: ['INT_USER'],
        groups_removed: [],
        provider: 'ldap',
        kept: ['INT_ADMIN'],
        because: 'last enabled member',
      },
    ]);
    // the same mapping again changes nothing and writes nothing
    await users.logins.setGroups(LOGIN_MAPPING_ACTOR, (await store.userById(only.id))!, ['INT_USER'], 'ldap');
    expect((await events('user.updated')).filter((e) => e.target === 'only-admin')).to.have.length(1);
    // with another enabled administrator, the mapping is followed
    await users.create(PLAIN, { username: 'second-admin', groups: ['INT_ADMIN'] });
    await users.logins.setGroups(LOGIN_MAPPING_ACTOR, (await store.userById(only.id))!, ['INT_USER'], 'ldap');
    expect((await store.userById(only.id))!.groups).to.deep.equal(['INT_USER']);
  });

  it('the group writer: a plain administrator may not hand out the host, a trusted actor may; each outcome an event', async () => {
    const refused = await groups.create(PLAIN, { name: 'host-ops', permissions: ['socket:container:spawn'] }).catch((e: unknown) => e);
    expect(refused).to.be.instanceOf(DomainError).and.to.include({ code: 'forbidden' });
    await groups.create(CLI_ACTOR, { name: 'host-ops', permissions: ['socket:container:spawn'] });
    const created = (await events('group.created')).filter((e) => e.target === 'host-ops');
    // (a refusal is batched, a change is written in its transaction: compared without order)
    expect(created.map((e) => [e.actor, e.outcome])).to.have.deep.members([
      ['plain', 'denied'],
      ['cli', 'success'],
    ]);
  });

  it('disabling revokes the keys in the same transaction: a revocation that fails leaves the account enabled and its keys as they were', async () => {
    const owner = await users.create(CLI_ACTOR, { username: 'keyholder', groups: ['INT_USER'] });
    const { key } = await keys.issue(CLI_ACTOR, owner, { label: 'job' });
    const live = async () => (await db('api_keys').where({ id: key.id }).first()).revoked_at === null;
    failRevocation = true;
    const failed = await users.update(CLI_ACTOR, owner, { disabled: true }).catch((e: unknown) => e);
    failRevocation = false;
    expect(String(failed)).to.include('the database went away');
    expect((await store.userById(owner.id))!.disabled).to.equal(false);
    expect(await live()).to.equal(true);
    await users.update(CLI_ACTOR, owner, { disabled: true });
    expect((await store.userById(owner.id))!.disabled).to.equal(true);
    expect(await live()).to.equal(false);
  });

  it("the key writer: only a trusted actor revokes a protected account's key; the refusal names the key as the revocation would", async () => {
    const bot = await users.create(CLI_ACTOR, { username: 'keybot', roles: ['bot'] });
    const { key } = await keys.issue(CLI_ACTOR, bot, { label: 'automation' });
    const id = key.id;
    const refused = await keys.revoke(PLAIN, bot, id).catch((e: unknown) => e);
    expect(refused).to.be.instanceOf(DomainError).and.to.include({ code: 'forbidden' });
    expect(await keys.revoke(CLI_ACTOR, bot, id)).to.equal(true);
    await trail.flush();
    const rows = await db('audit_events').where({ action: 'key.revoked', target_id: id }).orderBy('seq');
    expect(rows.map((r) => [r.actor_username, r.outcome, r.target_type])).to.have.deep.members([
      ['plain', 'denied', 'key'],
      ['cli', 'success', 'key'],
    ]);
  });
});
