import { expect } from 'chai';
import { execFile } from 'node:child_process';
import path from 'node:path';
import request from 'supertest';
import type { ClientPush } from '../../src/bus/channels.js';
import { OrderedFanout } from '../../src/notifications/fanout.js';
import { adminAuth, ADMIN, startPeer, startService, testEnv, type TestService } from '../support/service.js';
import { READY_TIMEOUT_MS, serviceCommand } from '../support/process.js';
import { createUser, WsClient, type Frame } from '../gateway/helpers.js';
import { capturingLogger } from '../sockets/helpers.js';
import { eventually } from '../plugins/helpers.js';
import { cli } from '../cli/helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** `service-core …` as a process of its own, with the service's environment. */
function cliProcess(env: Record<string, string>, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const [node, ...cli] = serviceCommand('cli');
    execFile(node!, [...cli, ...args], { cwd: ROOT, env: { ...process.env, ...env }, timeout: READY_TIMEOUT_MS }, (err, stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

const seqsOf = (frames: Frame[]) => frames.filter((f) => f.event === 'system:notify' || f.event === 'user:notify').map((f) => f.payload.seq as number);

/**
 * One instance without Redis: nothing carries another process's notification to it, so it
 * looks at the database's counter every second and sends what is new to its clients.
 */
describe('notifications another process writes, without Redis', function () {
  this.timeout(READY_TIMEOUT_MS + 30_000);
  let svc: TestService;
  let env: Record<string, string>;

  before(async () => {
    svc = await startService();
    env = testEnv(svc.dataDir, svc.databaseUrl);
  });
  after(async () => svc?.destroy());

  it('`service-core notify` (a process of its own) reaches connected clients within 2 s, each its own', async () => {
    const bob = await createUser(svc, 'bob');
    const admin = await WsClient.basic(svc, ADMIN.username, ADMIN.password);
    const other = await WsClient.basic(svc, bob.username, bob.password);
    try {
      const toAdmin = await cliProcess(env, ['--json', 'notify', '--user', 'admin', '--title', 'From the console', '--message', 'hello', '--level', 'success']);
      expect(toAdmin.code, toAdmin.stderr).to.equal(0);
      const sent = JSON.parse(toAdmin.stdout);
      const frame = await admin.next('user:notify', (f) => f.payload.id === sent.id, 2000);
      expect(frame.payload).to.include({ title: 'From the console', message: 'hello', level: 'success', source: 'cli', seq: sent.seq, read: false });

      const everyone = await cliProcess(env, ['--json', 'notify', '--broadcast', '--title', 'Maintenance', '--message', 'at noon']);
      expect(everyone.code, everyone.stderr).to.equal(0);
      const broadcast = JSON.parse(everyone.stdout);
      await admin.next('system:notify', (f) => f.payload.id === broadcast.id, 2000);
      await other.next('system:notify', (f) => f.payload.id === broadcast.id, 2000);
      // bob saw the broadcast, never admin's own notification
      expect(other.all('user:notify')).to.deep.equal([]);
    } finally {
      await Promise.all([admin.close(), other.close()]);
    }
  });

  it("mixed with this instance's own writes: every seq once, in order; an update arrives as its new seq; last_seq is the database's", async () => {
    const ws = await WsClient.basic(svc, ADMIN.username, ADMIN.password);
    try {
      const sent: number[] = [];
      const local = async (title: string) =>
        sent.push((await request(svc.url).post('/api/notifications').set('Authorization', adminAuth()).send({ title, message: 'm' }).expect(202)).body.seq);
      // the CLI in this process: its own database connection and bus, like a process of its own
      const elsewhere = async (...args: string[]) => {
        const run = await cli(env, ['--json', 'notify', '--title', 'elsewhere', '--message', 'm', ...args]);
        expect(run.code, run.stderr).to.equal(0);
        sent.push(run.json().seq);
        return run.json();
      };
      await local('here 1');
      const first = await elsewhere('--broadcast', '--id', 'cli-status');
      await Promise.all([local('here 2'), elsewhere('--user', 'admin'), local('here 3')]);
      // sent again with its id: an update, at a new seq (its old one is never delivered again)
      const updated = await cli(env, ['--json', 'notify', '--broadcast', '--id', 'cli-status', '--title', 'elsewhere, updated', '--message', 'm']);
      expect(updated.json()).to.include({ id: first.id, action: 'updated' });
      sent.push(updated.json().seq);
      await local('here 4');

      const last = Math.max(...sent);
      await eventually(() => expect(Math.max(0, ...seqsOf(ws.frames))).to.equal(last), 3000, 20);
      const seen = seqsOf(ws.frames);
      // strictly increasing: nothing twice, nothing out of order
      expect(seen).to.deep.equal([...seen].sort((x, y) => x - y));
      expect(new Set(seen).size).to.equal(seen.length);
      // everything that is still at its seq arrived (the first version of cli-status may have been superseded before it went out)
      expect(seen).to.include.members(sent.filter((s) => s !== first.seq));
      const status = ws.all('system:notify', (f) => f.payload.id === first.id);
      expect(status.at(-1)!.payload).to.include({ title: 'elsewhere, updated', seq: updated.json().seq });

      // a new connection's cursor is the database's counter, never beyond it
      const counter = await svc.service.notifications.service.lastSeq();
      const again = await WsClient.basic(svc, ADMIN.username, ADMIN.password);
      try {
        expect(again.all('gateway:welcome')[0]!.payload.last_seq).to.equal(counter);
      } finally {
        await again.close();
      }
    } finally {
      await ws.close();
    }
  });
});

describe('two instances writing one id at once', function () {
  this.timeout(60_000);
  let a: TestService;
  let b: TestService;
  before(async () => {
    a = await startService();
    b = await startPeer(a);
  });
  after(async () => {
    await b?.stop();
    await a?.destroy();
  });

  // On PostgreSQL the two batches race (without the lock, the later one failed with a duplicate
  // key); on SQLite the two instances of this process write one after the other, so there it
  // holds the replacing only.
  it('each batch reads the ids it replaces under the counter lock: no write fails, nor any bystander of its batch; the row holds the last seq', async () => {
    const writers = [a, b].map((s) => s.service.notifications.service);
    const start = Number((await a.service.db('counters').where({ name: 'notifications' }).first('value')).value);
    const work: Promise<{ seq: number | null }>[] = [];
    for (let round = 0; round < 15; round++) {
      for (const [i, w] of writers.entries()) {
        // a new id from both instances in the same moment (both would insert it), each beside new notifications of its batch
        work.push(w.notify('broadcast', { id: `shared-${round}`, title: `status ${round}.${i}`, message: 'm' }));
        for (let k = 0; k < 3; k++) work.push(w.notify('broadcast', { title: `bystander ${round}.${i}.${k}`, message: 'm' }));
      }
      await new Promise((r) => setTimeout(r, 3));
    }
    const outcomes = await Promise.allSettled(work);
    const failed = outcomes.filter((o): o is PromiseRejectedResult => o.status === 'rejected').map((o) => String(o.reason));
    expect(failed, failed.slice(0, 3).join('\n')).to.deep.equal([]);
    const seqs = outcomes.map((o) => (o as PromiseFulfilledResult<{ seq: number | null }>).value.seq!);
    expect(new Set(seqs).size).to.equal(seqs.length);
    const end = Number((await a.service.db('counters').where({ name: 'notifications' }).first('value')).value);
    expect(end - start).to.equal(seqs.length);
    // each shared id holds the later of its two writes
    for (let round = 0; round < 15; round++) {
      const row = await a.service
        .db('notifications')
        .where({ id: `shared-${round}` })
        .first('seq');
      expect(Number(row.seq)).to.equal(Math.max(seqs[round * 8], seqs[round * 8 + 4]));
    }
  });
});

describe('OrderedFanout.catchUp: what the database committed, up to its counter', function () {
  this.timeout(30_000);
  let svc: TestService;
  const pushed: ClientPush[] = [];
  let fanout: OrderedFanout;
  const log = capturingLogger('info');
  const commit = async (title: string, extra: Record<string, unknown> = {}) =>
    (
      await request(svc.url)
        .post('/api/notifications')
        .set('Authorization', adminAuth())
        .send({ title, message: 'm', ...extra })
        .expect(202)
    ).body.seq as number;

  before(async () => {
    svc = await startService();
    const service = svc.service.notifications.service;
    // a fan-out of its own, which hears of no push: only catchUp brings it anything
    fanout = new OrderedFanout({
      channels: { push: (p: ClientPush) => void pushed.push(p), frame: () => undefined, welcome: () => undefined },
      committedBetween: (after, before) => service.committedBetween(after, before),
      lastSeq: () => service.lastSeq(),
      committedHere: () => 0,
      log: log.logger,
      gapWaitMs: 20,
    });
    fanout.start(await service.lastSeq());
  });
  after(async () => {
    fanout?.stop();
    await svc?.destroy();
  });

  it('sends the commits it did not hear of, in seq order, and stops at the counter', async () => {
    const start = fanout.position;
    const a = await commit('a');
    const b = await commit('b');
    await fanout.catchUp();
    expect(pushed.map((p) => p.seq)).to.deep.equal([a, b]);
    expect(pushed.map((p) => (p.payload as { title: string }).title)).to.deep.equal(['a', 'b']);
    expect(fanout.position).to.equal(b).and.to.be.greaterThan(start);
    // nothing new: nothing sent, the position stays
    await fanout.catchUp();
    expect(pushed).to.have.length(2);
    expect(fanout.position).to.equal(b);
  });

  it('skips a seq an update superseded, and moves no further than the counter whatever was pushed', async () => {
    pushed.length = 0;
    const before = fanout.position;
    const old = await commit('status', { id: 'catch-up-status' });
    const later = await commit('other');
    const current = await commit('status, updated', { id: 'catch-up-status' });
    // a push beyond the database, heard meanwhile: dropped once the counter is read
    fanout.accept({ event: 'system:notify', user_id: null, seq: current + 1000, payload: { id: 'bogus', seq: current + 1000, title: 'bogus' } as never });
    await fanout.catchUp();
    await eventually(() => expect(fanout.refused).to.equal(1), 2000, 10);
    expect(pushed.map((p) => p.seq)).to.deep.equal([later, current]);
    expect(pushed.map((p) => p.seq)).not.to.include(old);
    expect(fanout.position).to.equal(await svc.service.notifications.service.lastSeq());
    expect(fanout.position).to.be.greaterThan(before);
  });
});
