import http from 'node:http';
import net from 'node:net';
import { expect } from 'chai';
import { adminAuth } from '../support/service.js';
import { READY_TIMEOUT_MS } from '../support/process.js';
import { sleep, startCluster, type Cluster, type Instance } from './harness.js';
import { Broadcaster, Clients, type Answer } from './load.js';

const CLIENTS = 150;
const RATE = 5;
const T0 = Date.now();
const admin = { authorization: adminAuth(), 'content-type': 'application/json' };

/** Resolves once nothing listens on the instance's port any more (its server closed). */
async function refusesConnections(inst: Instance, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const refused = await new Promise<boolean>((resolve) => {
      const s = net.connect(inst.port, '127.0.0.1', () => {
        s.destroy();
        resolve(false);
      });
      s.on('error', () => resolve(true));
    });
    if (refused) return;
    if (Date.now() > deadline) throw new Error(`${inst.name} still accepts connections ${ms} ms after SIGTERM`);
    await sleep(20);
  }
}

/**
 * A broadcast POSTed straight to the instance whose body is half sent when the instance gets
 * SIGTERM: it must still be answered (202) after the instance stopped listening, the drain.
 */
async function inFlightAcrossSigterm(inst: Instance, phase: number): Promise<Answer> {
  const body = JSON.stringify({ title: 'in flight across SIGTERM', message: `${Date.now()} ${phase}`, toast: false });
  const start = Date.now();
  const half = Math.floor(body.length / 2);
  const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = http.request(`${inst.url}/api/notifications`, {
      method: 'POST',
      agent: false,
      // the instance answers 100 Continue once it has read the headers and taken the request
      headers: { ...admin, 'content-length': Buffer.byteLength(body), expect: '100-continue' },
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
    req.flushHeaders();
    // the request is in flight (taken, half its body sent) when the signal comes
    req.once('continue', () => {
      req.write(body.slice(0, half));
      void (async () => {
        const exited = inst.kill('SIGTERM');
        try {
          await refusesConnections(inst, 10_000);
        } finally {
          req.end(body.slice(half));
        }
        await exited;
      })().catch(reject);
    });
  });
  const res = await answer;
  expect(res.status, `the request in flight at SIGTERM: ${res.text}`).to.equal(202);
  return { kind: 'direct', start, end: Date.now(), status: res.status, seqs: [(JSON.parse(res.text) as { seq: number }).seq] };
}

describe('three instances behind nginx (the shipped several-instance config) under faults', function () {
  this.timeout(4 * READY_TIMEOUT_MS);
  let cluster: Cluster;
  let clients: Clients | undefined;

  before(async function () {
    cluster = await startCluster({ instances: 3, clients: CLIENTS });
  });
  after(async () => {
    await clients?.close();
    await cluster?.destroy();
  });

  it('admits an 8 MiB batch through nginx (client_max_body_size)', async () => {
    const user = await fetch(`${cluster.origin}/api/users`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ username: 'sink', password: 'sink-password-123' }),
    });
    expect(user.status).to.equal(201);
    // 1,000 items for a user with no connection (nothing to push), '€' three bytes each: just under 8 MiB
    const item = (i: number, len: number) => ({ user: 'sink', title: `big ${i}`, message: '€'.repeat(len), toast: false });
    const overhead = Buffer.byteLength(JSON.stringify({ notifications: Array.from({ length: 1000 }, (_, i) => item(i, 0)) }));
    const len = Math.min(4000, Math.floor((8 * 1024 * 1024 - 1024 - overhead) / 3000));
    const body = JSON.stringify({ notifications: Array.from({ length: 1000 }, (_, i) => item(i, len)) });
    expect(Buffer.byteLength(body)).to.be.within(8 * 1024 * 1024 - 4096, 8 * 1024 * 1024);
    const res = await fetch(`${cluster.origin}/api/notifications/batch`, { method: 'POST', headers: admin, body });
    expect(res.status, await res.clone().text()).to.equal(202);
    expect(((await res.json()) as { notifications: unknown[] }).notifications).to.have.length(1000);
  });

  it(`${CLIENTS} clients, ${RATE} broadcasts/s: Redis restart, PostgreSQL down 5 s, a SIGKILL, a rolling restart; nothing acknowledged is lost`, async () => {
    const c = (clients = new Clients(`${cluster.origin.replace('http', 'ws')}/ws`, CLIENTS, { Authorization: adminAuth() }, { initialMs: 100, maxMs: 2000 }));
    await c.ready(30_000);
    const caster = new Broadcaster(cluster.origin, adminAuth(), RATE, () => c.phase);
    caster.start();
    const b = cluster.instances[1];
    let killedAt = 0;
    let diedBy = 0;
    try {
      await sleep(1000);
      c.phase = 1; // Redis: a crash and a start, empty
      await cluster.redis.kill();
      await sleep(500);
      await cluster.redis.restart();
      await sleep(1000);
      c.phase = 2; // PostgreSQL down for 5 s
      await cluster.pg.stop();
      await sleep(5000);
      await cluster.pg.start();
      await sleep(1000);
      c.phase = 3; // one instance dies and comes back
      killedAt = Date.now();
      expect(await b!.kill('SIGKILL')).to.deep.equal({ code: null, signal: 'SIGKILL' });
      // it died somewhere between the signal and its exit reaching the test
      diedBy = Date.now();
      await b!.start();
      await sleep(500);
      c.phase = 4; // a rolling upgrade: each in turn drains (SIGTERM), exits 0 and starts again
      for (const inst of cluster.instances) {
        const direct = await inFlightAcrossSigterm(inst, c.phase);
        caster.answers.push(direct);
        expect(await inst.kill('SIGTERM'), `${inst.name}:\n${inst.output.slice(-2000)}`).to.deep.equal({ code: 0, signal: null });
        await inst.start();
      }
      await sleep(500);
    } finally {
      await caster.stop();
    }

    // every answer: 202 or 503, but for a request the SIGKILL cut (nginx's 502). None at a
    // SIGTERM: the drain answers what nginx writes onto a connection idle at that moment (it
    // leaves those to nginx to close) and what was in flight (src/http/drain.ts)
    const cut = (x: Answer) => x.status === 502 && x.start <= diedBy && x.end >= killedAt;
    const wrong = caster.answers.filter((x) => x.status !== 202 && x.status !== 503 && !cut(x));
    const when = (t: number) => `${t - T0} ms (kill at ${killedAt - T0} ms, exit seen at ${diedBy - T0})`;
    expect(
      wrong.map((x) => ({ kind: x.kind, status: x.status, start: when(x.start), end: when(x.end), error: x.error?.slice(0, 80) })),
      `nginx:\n${cluster.nginx
        .errors()
        .split('\n')
        .filter((l) => !/Connection refused|no live upstreams/.test(l))
        .join('\n')
        .slice(-3000)}`,
    ).to.deep.equal([]);
    const acked = caster.acked();
    // most requests were acknowledged: the faults are short
    expect(caster.answers.filter((x) => x.status === 202).length).to.be.greaterThan(caster.answers.length * 0.6);
    expect(cluster.instances.every((i) => i.running)).to.equal(true);

    // every client ends live, with every acknowledged notification (caught up after its reconnects)
    const deadline = Date.now() + 30_000;
    let missing = c.missing(acked);
    while ((missing.length || c.notLive()) && Date.now() < deadline) {
      await sleep(200);
      missing = c.missing(acked);
    }
    expect(c.notLive(), 'clients not live at the end').to.equal(0);
    expect(missing.slice(0, 5), `${missing.length} clients miss an acknowledged notification`).to.deep.equal([]);
    expect(c.duplicates, 'seqs handed on twice').to.equal(0);
    expect(c.truncated.size, 'clients whose resume was truncated').to.equal(0);
    // the faults were felt: clients of the killed and the drained instances reconnected
    expect(c.outages.length).to.be.at.least(CLIENTS);
    expect(c.outages.every((o) => o.to !== null)).to.equal(true);
  });
});
