import net from 'node:net';
import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import {
  CredentialRefusedError,
  GatewayClient,
  type GatewayClientOptions,
  type NotificationFrame,
  type SocketFactory,
} from '../../src/client/gateway-client.js';
import { adminAuth, basic, ADMIN, startService, type TestService } from '../support/service.js';
import { unusedPort } from '../auth/helpers.js';
import { wsUrl } from '../gateway/helpers.js';
import { eventually } from '../plugins/helpers.js';

/**
 * A TCP relay in front of the service: `hold()` stops carrying bytes on the connections open at
 * that moment (a peer that went silent without closing, as after a network change), while new
 * connections pass as usual.
 */
class Relay {
  private readonly pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  private constructor(
    private readonly server: net.Server,
    readonly port: number,
  ) {}

  static async start(targetPort: number): Promise<Relay> {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const relay = new Relay(server, (server.address() as net.AddressInfo).port);
    server.on('connection', (client) => {
      const upstream = net.connect(targetPort, '127.0.0.1');
      const pair = { client, upstream };
      relay.pairs.add(pair);
      client.pipe(upstream);
      upstream.pipe(client);
      const end = () => {
        relay.pairs.delete(pair);
        client.destroy();
        upstream.destroy();
      };
      for (const s of [client, upstream]) s.on('close', end).on('error', end);
    });
    return relay;
  }

  url(): string {
    return `ws://127.0.0.1:${this.port}/ws`;
  }

  hold(): void {
    for (const { client, upstream } of this.pairs) {
      client.unpipe(upstream);
      upstream.unpipe(client);
      client.pause();
      upstream.pause();
    }
  }

  release(): void {
    for (const { client, upstream } of this.pairs) {
      client.pipe(upstream);
      upstream.pipe(client);
    }
  }

  async close(): Promise<void> {
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream.destroy();
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

interface Tracked {
  client: GatewayClient;
  seen: Array<{ payload: NotificationFrame; replayed: boolean }>;
  seqs: () => number[];
  states: string[];
}

/** The typed client against a real service: reconnects, resume, requests, refusals, keepalive. */
describe('GatewayClient', function () {
  this.timeout(60_000);
  let port: number;
  let first: TestService;
  let svc: TestService;
  const clients: GatewayClient[] = [];
  const relays: Relay[] = [];

  before(async () => {
    port = await unusedPort();
    first = svc = await startService({ env: { SERVICE_PORT: String(port) } });
  });
  afterEach(async () => {
    for (const c of clients.splice(0)) c.close();
    for (const r of relays.splice(0)) await r.close();
  });
  after(async () => {
    await svc?.stop();
    await first?.destroy();
  });

  const admin = { Authorization: adminAuth() };
  const track = (options: Partial<GatewayClientOptions> = {}): Tracked => {
    const client = new GatewayClient({
      url: wsUrl(svc),
      WebSocket: WebSocket as unknown as SocketFactory,
      headers: admin,
      backoff: { initialMs: 50, maxMs: 400 },
      ...options,
    });
    const seen: Tracked['seen'] = [];
    const states: string[] = [];
    client.on('notification', ({ payload, replayed }) => seen.push({ payload, replayed }));
    client.on('state', ({ state, reason }) => states.push(`${state}:${reason ?? ''}`));
    clients.push(client);
    return { client, seen, seqs: () => seen.map((n) => n.payload.seq!), states };
  };
  const relay = async () => {
    const r = await Relay.start(port);
    relays.push(r);
    return r;
  };
  const post = async (title: string): Promise<number> => {
    const res = await request(svc.url).post('/api/notifications').set(admin).send({ title, message: 'm' });
    expect(res.status, JSON.stringify(res.body)).to.equal(202);
    return res.body.seq as number;
  };

  it('reconnects to the service restarted on the same port and data, and resumes with no gap and no duplicate', async () => {
    const t = track();
    await t.client.ready();
    const sent = [await post('before 1'), await post('before 2')];
    await eventually(() => expect(t.seqs()).to.deep.equal(sent), 2000);

    await svc.stop();
    await eventually(() => expect(t.client.state).to.equal('reconnecting'), 2000);
    expect(t.states).to.include('reconnecting:closed with 1012');
    svc = await startService({ dataDir: first.dataDir, databaseUrl: first.databaseUrl, env: { SERVICE_PORT: String(port) } });
    for (let i = 1; i <= 5; i++) sent.push(await post(`after ${i}`));

    await eventually(() => expect(t.seqs()).to.deep.equal(sent), 10_000);
    expect(t.client.state).to.equal('live');
    expect(t.client.lastSeq).to.equal(sent[sent.length - 1]);
  });

  it('hands on what was posted while it was away once, in order, flagged as replayed; a new client resumes from a stored lastSeq', async () => {
    const t = track({ backoff: { initialMs: 10_000, maxMs: 10_000 } });
    await t.client.ready();
    const sent = [await post('live 1')];
    await eventually(() => expect(t.seqs()).to.deep.equal(sent), 2000);

    t.client.drop('test');
    expect(t.client.state).to.equal('reconnecting');
    const away: number[] = [];
    for (let i = 1; i <= 4; i++) away.push(await post(`away ${i}`));
    // the backoff is long: it is still away
    expect(t.client.state).to.equal('reconnecting');
    expect(t.seqs()).to.deep.equal(sent);

    // back at once, while more arrive during the resume
    t.client.reconnectNow();
    const during = Promise.all([post('during 1'), post('during 2')]);
    sent.push(...away, ...(await during));
    sent.sort((a, b) => a - b);
    await eventually(() => expect(t.seqs()).to.deep.equal(sent), 5000);
    expect(t.client.state).to.equal('live');
    for (const seq of away) expect(t.seen.find((n) => n.payload.seq === seq)!.replayed, `seq ${seq}`).to.equal(true);
    expect(t.seen[0]!.replayed).to.equal(false);

    const stored = t.client.lastSeq!;
    const later = await post('later');
    const next = track({ since: stored });
    await next.client.ready();
    await eventually(() => expect(next.seqs()).to.deep.equal([later]), 2000);
  });

  it('correlates a request with its answer, and rejects one the service does not answer in time', async () => {
    const r = await relay();
    const t = track({ url: r.url(), keepalive: false });
    await t.client.ready();
    const providers = await t.client.request('provider:list');
    expect(providers.ok, JSON.stringify(providers)).to.equal(true);
    expect(providers.operation).to.equal('provider:list');
    const unknown = await t.client.request('nothing:here');
    expect(unknown).to.include({ ok: false });
    expect(unknown.error?.code).to.equal('unknown_provider');

    r.hold();
    const started = Date.now();
    let failure: Error | null = null;
    await t.client.request('provider:list', {}, { timeoutMs: 300 }).catch((err: Error) => (failure = err));
    expect(String(failure), 'the request rejects').to.match(/provider:list: no answer within 300 ms/);
    expect(Date.now() - started).to.be.within(280, 2000);

    // the late answer arrives and is dropped; the connection carries on
    const late: unknown[] = [];
    t.client.on('socket:response', (res) => late.push(res));
    r.release();
    await eventually(() => expect(late).to.have.length(1), 2000);
    expect(t.client.state).to.equal('live');
    expect((await t.client.request('provider:list', {}, { timeoutMs: 2000 })).ok).to.equal(true);
  });

  it('a refused credential ends in state refused, without trying again', async () => {
    const gateway = svc.service.gateway.gateway;
    const refusedBefore = gateway.stats.refused;
    const wrong = track({ headers: { Authorization: basic(ADMIN.username, 'not-the-password') } });
    let failure: Error | null = null;
    await wrong.client.ready().catch((err: Error) => (failure = err));
    expect(String(failure)).to.match(/refused \(401\)/);
    expect(wrong.client.state).to.equal('refused');
    await new Promise((r) => setTimeout(r, 500));
    expect(wrong.client.state).to.equal('refused');
    expect(gateway.stats.refused - refusedBefore, 'one upgrade, no retries').to.equal(1);

    // a ticket the gateway does not know
    const bogus = track({ headers: undefined, ticket: async () => `svt_${'A'.repeat(43)}` });
    await bogus.client.ready().catch(() => undefined);
    expect(bogus.client.state).to.equal('refused');

    // the browser's way: the ticket endpoint said 401
    const ended = track({ headers: undefined, ticket: async () => Promise.reject(new CredentialRefusedError('your session ended')) });
    await ended.client.ready().catch(() => undefined);
    expect(ended.states).to.deep.equal(['refused:your session ended']);
  });

  it('connects with a fresh one-time ticket each time', async () => {
    let minted = 0;
    const ticket = async () => {
      minted++;
      const res = await request(svc.url).post('/api/ws/ticket').set(admin).expect(200);
      return res.body.ticket as string;
    };
    const t = track({ headers: undefined, ticket });
    await t.client.ready();
    t.client.reconnectNow();
    await eventually(() => expect(t.states.slice(-1)).to.deep.equal(['live:']), 5000);
    expect(minted).to.equal(2);
  });

  it('a resume the server cannot answer (its database away) is asked again on a new connection, with backoff, until it is answered', async () => {
    const t = track();
    await t.client.ready();
    const before = await post('before the outage');
    await eventually(() => expect(t.seqs()).to.deep.equal([before]), 2000);
    // the service's read of missed notifications fails as it does while the database is away (a
    // pool that hands out no connection): the gateway answers the resume with gateway:error unavailable
    const notifications = svc.service.notifications.service;
    const missedSince = notifications.missedSince.bind(notifications);
    let refused = 0;
    const refusedAt: number[] = [];
    t.client.on('state', ({ state, reason }) => state === 'reconnecting' && reason === 'resume refused: unavailable' && refusedAt.push(Date.now()));
    notifications.missedSince = async () => {
      refused++;
      throw Object.assign(new Error('Knex: Timeout acquiring a connection. The pool is probably full.'), { name: 'KnexTimeoutError' });
    };
    try {
      t.client.drop('the network went away');
      await eventually(() => expect(refusedAt.length).to.be.at.least(4), 5000, 20);
      expect(t.client.state).not.to.equal('live');
      // the backoff grows across refused resumes (50 ms doubling: the fourth try waits 200-400 ms);
      // it is not started again by each connection that opens
      expect(refusedAt[3]! - refusedAt[2]!).to.be.at.least(195);
    } finally {
      notifications.missedSince = missedSince;
    }
    const after = await post('after the outage');
    await t.client.ready(5000);
    await eventually(() => expect(t.seqs()).to.deep.equal([before, after]), 2000);
    expect(refused).to.be.at.least(4);
  });

  it('closed while its connection is still being made (a peer that never answers the upgrade): no error escapes', async () => {
    // a TCP server that takes the connection and says nothing: the ws handshake stays open
    const held: net.Socket[] = [];
    const silent = net.createServer((c) => void held.push(c));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const escaped: unknown[] = [];
    const onUncaught = (err: unknown) => void escaped.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      const t = track({ url: `ws://127.0.0.1:${(silent.address() as net.AddressInfo).port}/ws` });
      await eventually(() => expect(held).to.have.length(1), 2000);
      t.client.close();
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(t.client.state).to.equal('closed');
      expect(escaped).to.deep.equal([]);
    } finally {
      process.off('uncaughtException', onUncaught);
      for (const c of held) c.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('the keepalive drops a connection whose peer stopped answering, and reconnects', async () => {
    const r = await relay();
    const t = track({ url: r.url(), keepalive: { intervalMs: 150, timeoutMs: 300 } });
    await t.client.ready();
    // an answering peer is kept
    await new Promise((resolve) => setTimeout(resolve, 700));
    expect(t.states.filter((s) => s.startsWith('reconnecting'))).to.deep.equal([]);

    r.hold();
    const heldAt = Date.now();
    const sent = await post('while silent');
    await eventually(() => expect(t.states.some((s) => s.startsWith('reconnecting:no answer to gateway:ping within 300 ms'))).to.equal(true), 3000, 20);
    expect(Date.now() - heldAt).to.be.below(1500);
    // the relay carries the new connection: the notification arrives through the resume
    await eventually(() => expect(t.client.state).to.equal('live'), 3000);
    await eventually(() => expect(t.seqs()).to.deep.equal([sent]), 2000);
  });
});
