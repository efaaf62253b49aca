import { expect } from 'chai';
import type { Knex } from 'knex';
import { Secret, TOTP } from 'otpauth';
import { migratedSqlite } from '../support/service.js';
import { EventBus } from '../../src/bus/bus.js';
import { createLogger } from '../../src/log.js';
import { AuditTrail } from '../../src/iam/audit.js';
import { CommandPath } from '../../src/iam/commands.js';
import { IamStore, type User } from '../../src/iam/store.js';
import { Passwords } from '../../src/iam/passwords.js';
import { SecretsStore } from '../../src/iam/secrets.js';
import { UserAdmin } from '../../src/iam/users.js';
import { CLI_ACTOR, type Actor } from '../../src/iam/policy.js';
import { CORE_CATALOG, DEFAULT_GROUPS, isKnownPermission } from '../../src/iam/permissions.js';
import { OneTimeStore } from '../../src/auth/one-time.js';
import { MfaService } from '../../src/auth/mfa/service.js';
import { DomainError } from '../../src/errors.js';

/**
 * The second-factor registry and its three kinds on their own: an embedded database, a fake
 * actor, no service boot. What each kind shows, how a proof finds its kind, and what a change
 * leaves (users.mfa_enabled, the event, the sessions ended).
 */
describe('second-factor registry (no service)', function () {
  let drop: () => Promise<void>;
  let db: Knex;
  let trail: AuditTrail;
  let store: IamStore;
  let mfa: MfaService;
  let ended: Array<{ userId: string; keep: string | null | undefined }>;
  let groupsRequired: string[];

  before(async () => {
    ({ db, drop } = await migratedSqlite());
    store = new IamStore(db);
    for (const g of DEFAULT_GROUPS) await store.createGroupIfMissing(g);
    const log = createLogger('silent');
    const bus = new EventBus(log);
    trail = new AuditTrail({ db, bus, log, coalesceMs: 60_000 });
    const commands = new CommandPath(trail);
    const users = new UserAdmin({
      store,
      passwords: new Passwords({ threads: 0, cost: 4 }),
      bus,
      commands,
      isKnownPermission: (p) => isKnownPermission(CORE_CATALOG, p),
      passwordChanged: async () => undefined,
      accountDisabled: async () => undefined,
      endEveryCredential: async (userId, trx) => ({ credentials_revoked: 0, factors_removed: await mfa.removeAll(userId, trx) }),
    });
    mfa = new MfaService({
      db,
      store,
      users,
      secrets: new SecretsStore(db, 'unit-test-master-key-0123456789abcdef'),
      bus,
      log,
      oneTime: new OneTimeStore(db),
      publicUrl: 'https://id.example.test:8443',
      requiredGroups: () => groupsRequired,
      endSessions: async (userId, keep) => void ended.push({ userId, keep }),
      commands,
    });
  });
  after(async () => {
    await drop?.();
  });
  beforeEach(() => {
    ended = [];
    groupsRequired = [];
  });

  let n = 0;
  const newUser = async (): Promise<{ user: User; self: Actor }> => {
    const user = await store.createUser({ username: `factor-user-${++n}`, groups: ['INT_VIEWER'] });
    return { user, self: { username: user.username, userId: user.id, isSystem: false, isSuperadmin: false } };
  };
  const fresh = async (user: User) => (await store.userById(user.id))!;
  const events = async (userId: string) => {
    await trail.flush();
    return (await db('audit_events').where({ target_id: userId }).orderBy('seq')).map((r) => ({
      action: r.action as string,
      actor: r.actor_username as string,
      outcome: r.outcome as string,
      details: JSON.parse(r.details) as Record<string, unknown>,
    }));
  };
  const codeOf = (secret: string, at = Date.now()) =>
    new TOTP({ algorithm: 'SHA1', digits: 6, period: 30, secret: Secret.fromBase32(secret) }).generate({ timestamp: at });

  /** An account with a confirmed app: its secret and its recovery codes. */
  const withApp = async (user: User, self: Actor) => {
    const started = await mfa.totp.enrol(self, user, 'session-1');
    const codes = await mfa.totp.confirm(self, user, 'session-1', codeOf(started.secret));
    return { secret: started.secret, codes };
  };

  it('shows nothing and offers no method to an account without factors; requirement follows the groups', async () => {
    const { user } = await newUser();
    expect(await mfa.status(user)).to.deep.equal({
      totp: false,
      totp_created_at: null,
      totp_last_used_at: null,
      webauthn: [],
      recovery_codes_left: 0,
      required: false,
    });
    expect(await mfa.methods(user.id)).to.deep.equal([]);
    groupsRequired = ['INT_VIEWER'];
    expect((await mfa.status(user)).required).to.equal(true);
    expect(await mfa.verify(CLI_ACTOR, user, { code: '123456' })).to.equal(null);
  });

  it('an app: enrolled with an otpauth URI of the public host, active once a code confirms it, with ten recovery codes', async () => {
    const { user, self } = await newUser();
    const started = await mfa.totp.enrol(self, user, 'session-1');
    expect(started.otpauth_uri).to.match(/^otpauth:\/\/totp\/id\.example\.test%3A8443:factor-user-\d+\?/);
    expect(started.qr_svg).to.match(/^<svg/);
    // a pending enrolment is not a factor yet
    expect(await mfa.methods(user.id)).to.deep.equal([]);
    const wrong = await mfa.totp.confirm(self, user, 'session-1', '000000').catch((e: unknown) => e);
    expect(wrong).to.be.instanceOf(DomainError).with.property('code', 'validation_failed');
    const codes = await mfa.totp.confirm(self, user, 'session-1', codeOf(started.secret));
    expect(codes).to.have.length(10);
    expect((await fresh(user)).mfaEnabled).to.equal(true);
    expect(await mfa.methods(user.id)).to.deep.equal(['totp', 'recovery_code']);
    const status = await mfa.status(user);
    expect(status).to.include({ totp: true, recovery_codes_left: 10 });
    expect(status.totp_created_at).to.be.a('string');
    // a first factor ends the other sessions, this one kept
    expect(ended).to.deep.equal([{ userId: user.id, keep: 'session-1' }]);
    expect(await events(user.id)).to.deep.equal([
      { action: 'auth.mfa_enrolled', actor: user.username, outcome: 'success', details: { factor: 'totp', other_sessions_ended: true } },
    ]);
    const again = await mfa.totp.enrol(self, user, 'session-1').catch((e: unknown) => e);
    expect(again).to.be.instanceOf(DomainError).with.property('code', 'conflict');
  });

  it('a proof finds its kind: an app code once, a recovery code once (an event with what is left), nothing else', async () => {
    const { user, self } = await newUser();
    const { secret, codes } = await withApp(user, self);
    // the confirming code's time step is taken: the next step's code passes, once
    const next = codeOf(secret, Date.now() + 30_000);
    expect(await mfa.verify(self, user, { code: next })).to.equal('totp');
    expect(await mfa.verify(self, user, { code: next })).to.equal(null);
    // case, spaces and dashes do not matter
    const typed = codes[0].toUpperCase().replace('-', ' ');
    expect(await mfa.verify(self, user, { code: typed })).to.equal('recovery_code');
    expect(await mfa.verify(self, user, { code: codes[0] })).to.equal(null);
    expect(await mfa.verify(self, user, { code: 'x'.repeat(65) })).to.equal(null);
    // an assertion of no passkey of this account
    expect(await mfa.verify(self, user, { webauthn: { type: 'public-key' } })).to.equal(null);
    expect((await mfa.status(user)).recovery_codes_left).to.equal(9);
    const used = (await events(user.id)).filter((e) => e.action === 'auth.recovery_code_used');
    expect(used).to.deep.equal([{ action: 'auth.recovery_code_used', actor: user.username, outcome: 'success', details: { left: 9 } }]);
  });

  it('recovery codes: regenerated only with a factor; they go with the last factor', async () => {
    const { user, self } = await newUser();
    const none = await mfa.recoveryCodes.regenerate(self, user).catch((e: unknown) => e);
    expect(none).to.be.instanceOf(DomainError).with.property('code', 'conflict');
    const { codes } = await withApp(user, self);
    const renewed = await mfa.recoveryCodes.regenerate(self, user);
    expect(await mfa.verify(self, user, { code: codes[1] })).to.equal(null);
    expect(await mfa.verify(self, user, { code: renewed[1] })).to.equal('recovery_code');
    expect(await mfa.totp.remove(self, user)).to.equal(true);
    expect(await mfa.totp.remove(self, user)).to.equal(false);
    expect((await fresh(user)).mfaEnabled).to.equal(false);
    expect(await mfa.status(user)).to.include({ totp: false, recovery_codes_left: 0 });
    // a recovery code's use is written by the trail's batch, after the changes written in their transactions
    expect((await events(user.id)).map((e) => e.action)).to.have.members([
      'auth.mfa_enrolled',
      'auth.recovery_codes_regenerated',
      'auth.recovery_code_used',
      'auth.mfa_removed',
    ]);
  });

  it('a passkey that is not the account’s is removed from nobody: false, no event', async () => {
    const { user, self } = await newUser();
    await withApp(user, self);
    expect(await mfa.passkeys.remove(self, user, '00000000-0000-4000-8000-000000000001')).to.equal(false);
    expect((await events(user.id)).map((e) => e.action)).to.deep.equal(['auth.mfa_enrolled']);
    // the registration options name the public URL's host as relying party
    const options = await mfa.passkeys.enrol(self, user, 'session-1');
    expect(options.rp).to.deep.equal({ name: 'service-core', id: 'id.example.test' });
    expect(options.user.name).to.equal(user.username);
  });

  it("one's own factors are never reset through the administrators' reset, by any credential of the account (an API key proves no factor)", async () => {
    const { user, self } = await newUser();
    await withApp(user, self);
    for (const actor of [self, { ...self, keyScopes: ['feature:admin.users'] }, { ...self, isSuperadmin: true }]) {
      const refused = (await mfa.reset(actor, user).catch((e: unknown) => e)) as DomainError;
      expect(refused).to.be.instanceOf(DomainError);
      expect(refused.code).to.equal('forbidden');
      expect(refused.message).to.match(/^your own second factors are removed on the account page/);
    }
    expect((await fresh(user)).mfaEnabled).to.equal(true);
    // in the trail as refusals (repeats of one actor's are grouped)
    const refusals = (await events(user.id)).filter((e) => e.action === 'auth.mfa_reset');
    expect(refusals).to.not.be.empty;
    expect(new Set(refusals.map((e) => e.outcome))).to.deep.equal(new Set(['denied']));
  });

  it('a reset clears every kind, ends every session and is recorded as its actor', async () => {
    const { user, self } = await newUser();
    await withApp(user, self);
    ended = [];
    await mfa.reset(CLI_ACTOR, user);
    expect((await fresh(user)).mfaEnabled).to.equal(false);
    expect(await mfa.methods(user.id)).to.deep.equal([]);
    expect(await db('mfa_factors').where({ user_id: user.id })).to.deep.equal([]);
    expect(ended).to.deep.equal([{ userId: user.id, keep: undefined }]);
    const reset = (await events(user.id)).filter((e) => e.action === 'auth.mfa_reset');
    expect(reset.map((e) => [e.actor, e.outcome])).to.deep.equal([['cli', 'success']]);
  });
});
