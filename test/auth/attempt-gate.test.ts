import { expect } from 'chai';
import type { Knex } from 'knex';
import { migratedSqlite } from '../support/service.js';
import { AttemptGate, Refused, type Attempt } from '../../src/auth/attempt-gate.js';
import { LoginLockout } from '../../src/auth/lockout.js';
import { DomainError, isRecorded } from '../../src/errors.js';
import type { AuditInput } from '../../src/iam/audit.js';

/**
 * The attempt gate on its own (an embedded database for the lockout, a fake trail and log): its
 * budgets, its lockouts, the account's count of wrong factors, and the one failure line and
 * event of each refusal. No service.
 */
describe('attempt gate (no service)', function () {
  let drop: () => Promise<void>;
  let db: Knex;
  let events: AuditInput[];
  let lines: Array<Record<string, unknown>>;
  const gate = (perMinute = 1000) =>
    new AttemptGate({
      perMinute,
      lockout: new LoginLockout(db),
      secretKey: 'gate-test-secret-key-0123456789abcdef',
      prioritized: (fn) => fn(),
      log: { warn: (obj) => void lines.push(obj as Record<string, unknown>) },
      audit: { record: (e) => void events.push(e) },
    });
  const password = (username: string, ip = '203.0.113.1'): Attempt => ({ secret: 'password', username, ip, via: 'login', provider: 'local' });
  const factor = (username: string, ip: string): Attempt => ({ secret: 'second_factor', username, ip, via: 'step_up', provider: 'second_factor' });
  const wrong = async () => null;
  const right = async () => 'ok';

  before(async () => {
    ({ db, drop } = await migratedSqlite());
  });
  beforeEach(async () => {
    events = [];
    lines = [];
    await db('login_failures').delete();
  });
  after(async () => {
    await drop?.();
  });

  it('five wrong passwords from an address lock that pair, not another address; each refusal is a line and an event', async () => {
    const g = gate();
    for (let i = 0; i < 5; i++) expect((await g.check(password('bob'), wrong)).ok).to.equal(false);
    const locked = await g.check(password('bob'), right);
    expect(locked).to.include({ ok: false, reason: 'locked_out' });
    expect(locked.ok === false && locked.retryAfter).to.be.greaterThan(0);
    // another address, the same name: its own five guesses (no account-wide limit for passwords)
    expect((await g.check(password('bob', '203.0.113.2'), right)).ok).to.equal(true);
    expect(events.map((e) => [e.action, e.outcome])).to.deep.equal([...Array(5).fill(['auth.login_failed', 'failure']), ['auth.locked', 'denied']]);
    expect(lines.map((l) => l.reason)).to.deep.equal([...Array(5).fill('invalid_credentials'), 'locked_out']);
    expect(lines.every((l) => l.event === 'login_failed' && l.via === 'login' && !('password' in l))).to.equal(true);
  });

  it('a success clears its own pair; names in disguise share one count', async () => {
    const g = gate();
    for (let i = 0; i < 4; i++) await g.check(password(i % 2 ? ' Carol' : 'carol\u200b'), wrong);
    expect((await g.check(password('CAROL'), right)).ok).to.equal(true);
    // cleared: five more guesses before the next lockout
    for (let i = 0; i < 5; i++) await g.check(password('carol'), wrong);
    expect(await g.check(password('carol'), right)).to.include({ reason: 'locked_out' });
  });

  it('the address budget refuses before any check runs', async () => {
    const g = gate(3);
    let checks = 0;
    const counted = async () => (checks++, null);
    for (let i = 0; i < 3; i++) await g.check(password(`n${i}`), counted);
    expect(await g.check(password('n3'), counted)).to.include({ ok: false, reason: 'rate_limited' });
    expect(checks).to.equal(3);
    expect(events.at(-1)).to.include({ action: 'auth.login_failed', outcome: 'denied' });
  });

  it('wrong second factors from many addresses lock the account: ten in an hour', async () => {
    const g = gate();
    for (let i = 0; i < 10; i++) expect((await g.check(factor('dave', `198.51.100.${i + 1}`), wrong)).ok).to.equal(false);
    expect(await g.check(factor('dave', '198.51.100.200'), right)).to.include({ reason: 'locked_out' });
  });

  it('a right secret for an account that may not go on is a failure the caller can explain; the lockout answer is recorded once', async () => {
    const g = gate();
    const refused = await g.check(password('erin'), async () => new Refused('ldap', 'account_expired'));
    expect(refused).to.deep.include({ ok: false, reason: 'account_disabled' });
    expect(refused.ok === false && refused.reason === 'account_disabled' && refused.refused.cause).to.equal('account_expired');
    expect(lines[0]).to.include({ reason: 'account_disabled', provider: 'ldap' });
    for (let i = 0; i < 4; i++) await g.check(password('erin'), wrong);
    const thrown = await g.guard(password('erin'), right).catch((err: unknown) => err);
    expect(thrown).to.be.instanceOf(DomainError).and.include({ code: 'rate_limited' });
    // the gate recorded it: a transport answering it records nothing more
    expect(isRecorded(thrown)).to.equal(true);
  });
});
