import { expect } from 'chai';
import request from 'supertest';
import { startService, testEnv, SYSTEM_KEY, type TestService } from '../support/service.js';
import { cli } from '../cli/helpers.js';
import { sleep } from '../gateway/helpers.js';

/**
 * The audit trail's start (docs/security.md, "Audit trail"): a pruning is an `audit.pruned`
 * event in the chain, and `audit verify` holds the chain's recorded start to the latest one, so
 * a start moved in the database (events deleted with it) does not verify.
 */
describe('audit trail: the start of the chain', function () {
  this.timeout(60_000);
  let svc: TestService;
  let env: Record<string, string>;
  const db = () => svc.service.db;
  const trail = () => svc.service.iam.audit;

  before(async () => {
    svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY } });
    env = testEnv(svc.dataDir, svc.databaseUrl);
  });
  after(async () => svc?.destroy());

  let made = 0;
  /** `n` events (groups created), appended. */
  async function events(n: number): Promise<void> {
    for (let i = 0; i < n; i++)
      await request(svc.url)
        .post('/api/groups')
        .set('X-API-Key', SYSTEM_KEY)
        .send({ name: `start-${made++}` })
        .expect(201);
    await trail().flush();
  }
  /** Prunes what is older than now (a few ms on), as the hourly pruning would with that retention. */
  async function pruneAll(): Promise<number> {
    await sleep(5);
    const newest = Number((await db()('audit_events').max({ at: 'at' }).first())!.at);
    return trail().prune(Date.now() - newest - 1);
  }
  async function chain() {
    return db()('audit_chain').where({ id: 1 }).first();
  }
  async function seqs(): Promise<number[]> {
    return (await db()('audit_events').orderBy('seq').select('seq')).map((r: { seq: number | string }) => Number(r.seq));
  }
  async function verifies(): Promise<void> {
    const run = await cli(env, ['--json', 'audit', 'verify']);
    expect(run.code, run.stderr).to.equal(0);
    expect(run.json().ok).to.equal(true);
  }
  /** `tamper` makes `audit verify` exit 1 naming `expected`; the database is put back as it was, and verifies again. */
  async function refused(tamper: () => Promise<unknown>, expected: RegExp): Promise<void> {
    const rows = await db()('audit_events').orderBy('seq');
    const head = await chain();
    await tamper();
    const run = await cli(env, ['audit', 'verify']);
    expect(run.code, run.stdout).to.equal(1);
    expect(run.stderr).to.match(expected);
    expect((await trail().verify()).ok).to.equal(false);
    await db()('audit_events').delete();
    for (let i = 0; i < rows.length; i += 100) await db()('audit_events').insert(rows.slice(i, i + 100));
    await db()('audit_chain').where({ id: 1 }).update(head);
    await verifies();
  }
  /** Deletes the events before `seq` and moves the chain's start there, as a hand in the database would. */
  async function moveStart(seq: number): Promise<void> {
    const prev = await db()('audit_events')
      .where({ seq: seq - 1 })
      .first('hash');
    await db()('audit_events').where('seq', '<', seq).delete();
    await db()('audit_chain')
      .where({ id: 1 })
      .update({ start_seq: seq, start_prev_hash: prev?.hash ?? (await chain()).head_hash });
  }

  it('never pruned: moving the start past the head with every event deleted, or past the oldest events, does not verify', async () => {
    await events(4);
    await verifies();
    const head = Number((await chain()).head_seq);
    expect((await chain()).start_seq).to.satisfy((s: number | string) => Number(s) === 1);
    await refused(() => moveStart(head + 1), new RegExp(`at event ${head + 1}: the chain starts at event ${head + 1} .*no pruning`));
    await refused(() => moveStart(3), /at event 3: the chain starts at event 3 .*no pruning/);
  });

  it('a pruning is an event in the chain recording what it removed and where the chain starts; pruned once, twice, or down to itself, the chain verifies', async () => {
    const first = (await seqs())[0]!;
    await events(3);
    const headBefore = Number((await chain()).head_seq);
    const since = Date.now();
    await sleep(5);
    await events(3);
    const removed = await trail().prune(Date.now() - since);
    const after = await seqs();
    const pruning = await db()('audit_events').orderBy('seq', 'desc').first();
    expect(pruning.action).to.equal('audit.pruned');
    expect(Number(pruning.seq)).to.equal(headBefore + 4);
    const details = JSON.parse(pruning.details);
    const kept = await db()('audit_events').where({ seq: details.start_seq }).first();
    expect(details).to.deep.include({ from_seq: first, through_seq: details.start_seq - 1, removed, start_hash: kept.hash });
    expect(removed)
      .to.equal(details.start_seq - first)
      .and.be.greaterThan(0);
    expect(details.before + details.retention_ms).to.equal(Number(pruning.at));
    expect(after[0]).to.equal(details.start_seq);
    const head = await chain();
    expect({ start_seq: Number(head.start_seq), start_prev_hash: head.start_prev_hash }).to.deep.equal({
      start_seq: details.start_seq,
      start_prev_hash: details.start_prev_hash,
    });
    expect(pruning).to.deep.include({ actor_username: 'service', target_type: 'audit', outcome: 'success' });
    await verifies();
    const run = await cli(env, ['--json', 'audit', 'verify']);
    expect(run.json().pruned).to.deep.include({ seq: Number(pruning.seq), through_seq: details.through_seq, removed });

    // nothing old enough: no pruning, no event
    expect(await trail().prune(86_400_000)).to.equal(0);
    expect(Number((await chain()).head_seq)).to.equal(Number(pruning.seq));

    // twice
    await events(2);
    expect(await pruneAll()).to.be.greaterThan(0);
    await verifies();
    // down to the pruning itself: the previous pruning goes too, and the chain starts at the new one
    expect(await pruneAll()).to.equal(1);
    const only = await seqs();
    expect(only).to.have.length(1);
    const last = await db()('audit_events').where({ seq: only[0] }).first();
    expect(last.action).to.equal('audit.pruned');
    expect(JSON.parse(last.details)).to.deep.include({ start_seq: only[0], start_hash: null });
    await verifies();
    await events(2);
    await verifies();
  });

  it('pruned: moving the start past the head with every event deleted does not verify', async () => {
    const head = Number((await chain()).head_seq);
    await refused(() => moveStart(head + 1), new RegExp(`at event ${head + 1}: the chain starts at event ${head + 1} .*no pruning`));
  });

  it('pruned: dropping the oldest events the last pruning kept and moving the start does not verify, whether its event stays or goes', async () => {
    await events(3);
    const since = Date.now();
    await sleep(5);
    await events(4);
    await trail().prune(Date.now() - since);
    const pruning = await db()('audit_events').orderBy('seq', 'desc').first();
    const start = Number(JSON.parse(pruning.details).start_seq);
    expect(start).to.be.below(Number(pruning.seq) - 2);
    await verifies();
    // the pruning's event stays in the chain
    await refused(
      () => moveStart(start + 2),
      new RegExp(`at event ${start}: events ${start}\\.\\.${start + 1} are missing at the start: the last pruning \\(event ${pruning.seq}\\)`),
    );
    // the pruning's event goes too
    await events(2);
    await refused(
      () => moveStart(Number(pruning.seq) + 1),
      new RegExp(`at event ${Number(pruning.seq) + 1}: the chain starts at event ${Number(pruning.seq) + 1} .*no pruning`),
    );
  });

  it('a pruning whose record does not match its window does not verify', async () => {
    const append = (details: Record<string, unknown>) =>
      db().transaction((trx) =>
        trail().append(trx, [
          { action: 'audit.pruned', actor: { user_id: null, username: 'service', method: 'system', ip: null }, target: { type: 'audit' }, details },
        ]),
      );
    const c = await chain();
    const start = {
      from_seq: Number(c.start_seq),
      through_seq: Number(c.start_seq) - 1,
      removed: 0,
      start_seq: Number(c.start_seq),
      start_prev_hash: c.start_prev_hash,
    };
    const first = await db()('audit_events').where({ seq: c.start_seq }).first();
    // a cutoff inside its own retention window
    await refused(
      () => append({ ...start, start_hash: first.hash, retention_ms: 86_400_000, before: Date.now() }),
      /removed events inside its own retention window/,
    );
    // kept an event older than its cutoff
    await sleep(5);
    const before = Number(first.at) + 1;
    await refused(
      () => append({ ...start, start_hash: first.hash, retention_ms: Date.now() - before, before }),
      /at event (\d+): event \1 is older than the cutoff of the last pruning \(event \d+\), which kept it/,
    );
  });
});
