import crypto from 'node:crypto';
import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import { Redis } from 'ioredis';
import { GatewayClient, type NotificationFrame, type SocketFactory } from '../../src/client/gateway-client.js';
import { OrderedFanout } from '../../src/notifications/fanout.js';
import type { ClientPush } from '../../src/bus/channels.js';
import { adminAuth, basic, startPeer, startService, type TestService } from '../support/service.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { writePlugin, eventually } from '../plugins/helpers.js';
import { capturingLogger } from '../sockets/helpers.js';
import { wsUrl } from '../gateway/helpers.js';

const admin = { Authorization: adminAuth() };
const ada = { Authorization: basic('ada', 'ada-password-1') };

/**
 * Whoever can reach the Redis server (any client of it, a compromised neighbour) publishing on
 * the bus channel: two real instances, ws clients on the second, and a raw Redis client as the
 * intruder. Nothing it publishes is believed; what it captured and sends again neither.
 */
describe('an intruder on the Redis bus', function () {
  this.timeout(90_000);
  let redis: TestRedis;
  let intruder: Redis;
  let tap: Redis;
  const captured: Buffer[] = [];
  let a: TestService;
  let b: TestService;
  let first: TestService | undefined;
  let adaId: string;
  const clients: GatewayClient[] = [];
  const env = () => ({ SERVICE_REDIS_URL: redis.url });

  const track = (svc: TestService, headers: Record<string, string>) => {
    const seen: NotificationFrame[] = [];
    const client = new GatewayClient({ url: wsUrl(svc), WebSocket: WebSocket as unknown as SocketFactory, headers, backoff: { initialMs: 50, maxMs: 500 } });
    client.on('notification', (n) => seen.push(n.payload));
    clients.push(client);
    return { client, seen, titles: () => seen.map((n) => (n as { title?: string }).title) };
  };
  const post = (svc: TestService, body: Record<string, unknown>) =>
    request(svc.url)
      .post('/api/notifications')
      .set(admin)
      .send(body)
      .expect(202)
      .then((r) => r.body as { id: string; seq: number | null });
  const publish = (message: string | Buffer) => intruder.publish(b.service.bridge!.channel, message);
  /** the push of a notification as today's bridge put it on the channel: plain JSON */
  const plainPush = (push: Record<string, unknown>) => JSON.stringify({ v: 1, origin: 'intruder', event: 'notification:push', payload: push });
  const view = (fields: Record<string, unknown>) => ({
    id: `spoof-${crypto.randomBytes(3).toString('hex')}`,
    seq: null,
    title: 'Your password expires today',
    message: 'Sign in again to keep your account',
    level: 'warning',
    source: 'security',
    link: 'https://evil.example/login',
    created_at: new Date().toISOString(),
    updated_at: new Date().toISOString(),
    read: false,
    broadcast: false,
    toast: true,
    ...fields,
  });
  const dbLastSeq = () => b.service.notifications.service.lastSeq();

  before(async () => {
    redis = await startRedis();
    intruder = new Redis(redis.url);
    tap = new Redis(redis.url);
    a = await startService({ env: env() });
    writePlugin(
      a.config.pluginsDir,
      'pinger',
      {
        id: 'pinger',
        name: 'Pinger',
        version: '1.0.0',
        entry: 'index.mjs',
        permissions: { subscribe: [], emit: [] },
      },
      { 'index.mjs': `export function setup(ctx) { ctx.router.get('/ping', (koa) => { koa.body = { pong: true }; }); }\n` },
    );
    // the plugin appears on A by a restart; B finds it at boot
    await a.stop();
    first = a;
    a = await startService({ dataDir: a.dataDir, databaseUrl: a.databaseUrl, env: env() });
    b = await startPeer(a, env());
    for (const s of [a, b]) await eventually(() => expect(s.service.bridge!.isUp).to.equal(true), 10_000);
    await tap.subscribe(b.service.bridge!.channel);
    tap.on('messageBuffer', (_c: Buffer, m: Buffer) => captured.push(m));
    adaId = (
      await request(a.url)
        .post('/api/users')
        .set(admin)
        .send({ username: 'ada', password: 'ada-password-1', groups: ['INT_USER'] })
        .expect(201)
    ).body.id;
  });
  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });
  after(async () => {
    intruder?.disconnect();
    tap?.disconnect();
    for (const s of [b, a]) await s?.stop();
    await first?.destroy();
    await redis?.stop();
  });

  it("a spoofed user:notify with a phishing link never reaches the user's browser on another instance", async () => {
    const onB = track(b, ada);
    await onB.client.ready();
    // today's plain envelope, and one dressed as the new format with a made-up MAC
    await publish(plainPush({ event: 'user:notify', user_id: adaId, seq: null, payload: view({}) }));
    const body = JSON.stringify({
      v: 2,
      id: crypto.randomBytes(16).toString('hex'),
      ts: Date.now(),
      origin: 'intruder',
      event: 'notification:push',
      payload: { event: 'user:notify', user_id: adaId, seq: null, payload: view({}) },
    });
    await publish(`sc-bus-v2.${crypto.randomBytes(32).toString('base64url')}.${body}`);
    // a real one posted on A after them arrives: the spoofed ones would have by now
    await post(a, { title: 'real one', message: 'm', user: 'ada' });
    await eventually(() => expect(onB.titles()).to.include('real one'), 2000);
    expect(onB.titles()).to.deep.equal(['real one']);
    expect(onB.seen.some((n) => (n as { link?: string }).link === 'https://evil.example/login')).to.equal(false);
  });

  it('a message with a huge seq does not freeze live delivery: later notifications still arrive live, and last_seq stays what the database holds', async () => {
    const onB = track(b, admin);
    await onB.client.ready();
    const huge = 1_000_000_000_000;
    await publish(plainPush({ event: 'system:notify', user_id: null, seq: huge, payload: view({ seq: huge, broadcast: true, title: 'frozen' }) }));
    // whatever gap the intruder's seq opened has been waited for and filled by now
    await new Promise((r) => setTimeout(r, 500));
    const sent: number[] = [];
    for (const from of [a, b, a]) sent.push((await post(from, { title: `after ${sent.length}`, message: 'm' })).seq!);
    await eventually(() => expect(onB.seen.map((n) => n.seq)).to.deep.equal(sent), 2000);
    expect(onB.titles()).not.to.include('frozen');
    // a client connecting now is welcomed with the database's last seq
    const late = track(b, admin);
    await late.client.ready();
    expect(late.client.lastSeq).to.equal(await dbLastSeq());
    expect(onB.client.lastSeq).to.equal(await dbLastSeq());
  });

  it('a spoofed plugin:admin_changed disables nothing', async () => {
    await request(b.url).get('/api/plugins/pinger/ping').set(admin).expect(200);
    await publish(
      JSON.stringify({ v: 1, origin: 'intruder', event: 'plugin:admin_changed', payload: { plugin_id: 'pinger', action: 'disable', instance: 'intruder' } }),
    );
    await new Promise((r) => setTimeout(r, 500));
    await request(b.url).get('/api/plugins/pinger/ping').set(admin).expect(200);
    await request(a.url).get('/api/plugins/pinger/ping').set(admin).expect(200);
  });

  it('a signed message captured on the channel and published again is dropped: a toast is not shown twice', async () => {
    const onB = track(b, ada);
    await onB.client.ready();
    // not stored (no seq): nothing but the bridge could tell a second copy from a new one
    await post(a, { title: 'toast once', message: 'm', user: 'ada', persist: false });
    await eventually(() => expect(onB.titles()).to.deep.equal(['toast once']), 2000);
    const message = await eventually(() => captured.find((m) => m.toString().includes('toast once')) ?? Promise.reject(new Error('not captured')));
    await publish(message);
    await publish(message);
    await post(a, { title: 'next', message: 'm', user: 'ada', persist: false });
    await eventually(() => expect(onB.titles()).to.include('next'), 2000);
    expect(onB.titles()).to.deep.equal(['toast once', 'next']);
    // nothing before in this file was a replay
    expect(b.service.bridge!.stats.droppedBy.replayed).to.equal(2);
  });

  it('every drop is counted in /metrics by reason', async () => {
    const before = b.service.bridge!.stats.dropped;
    await publish('not even JSON');
    await publish(JSON.stringify({ v: 1, origin: 'intruder', event: 'auth:system_key_changed', payload: {} }));
    await eventually(() => expect(b.service.bridge!.stats.dropped - before).to.equal(2), 2000);
    const text = (await request(b.url).get('/metrics').expect(200)).text;
    const count = (reason: string) => Number(new RegExp(`^service_bus_messages_dropped_total\\{reason="${reason}"\\} (\\d+)$`, 'm').exec(text)?.[1]);
    expect(count('unsigned')).to.be.at.least(5); // this file's intruder messages so far
    expect(count('unsigned')).to.equal(b.service.bridge!.stats.droppedBy.unsigned);
    expect(count('bad_signature')).to.be.at.least(1);
    expect(count('replayed')).to.be.at.least(2);
    expect(count('stale')).to.equal(0);
    // the total of before stays
    expect(text).to.match(new RegExp(`^bus_bridge_messages_dropped ${b.service.bridge!.stats.dropped}$`, 'm'));
  });

  it('a push whose seq the database does not hold, even one the bridge took, moves no cursor', async () => {
    // as if a holder of the key (or a bug) sent it: straight onto B's bus, where the bridge emits
    const onB = track(b, admin);
    await onB.client.ready();
    const beyond = (await dbLastSeq()) + 1000;
    b.service.bus.emit('notification:push', {
      event: 'system:notify',
      user_id: null,
      seq: beyond,
      payload: view({ seq: beyond, broadcast: true, title: 'beyond' }),
    });
    b.service.bus.emit('notification:push', {
      event: 'system:notify',
      user_id: null,
      seq: beyond + 1,
      payload: view({ seq: beyond + 1, broadcast: true, title: 'beyond too' }),
    });
    await new Promise((r) => setTimeout(r, 500));
    const sent = [(await post(a, { title: 'from A', message: 'm' })).seq!, (await post(b, { title: 'from B', message: 'm' })).seq!];
    await eventually(() => expect(onB.seen.map((n) => n.seq)).to.deep.equal(sent), 2000);
    const late = track(b, admin);
    await late.client.ready();
    expect(late.client.lastSeq).to.equal(await dbLastSeq());
  });
});

/** The unit that advances the live cursor, on a real database: the seq rule alone. */
describe('OrderedFanout: the database bounds the cursor', function () {
  this.timeout(30_000);
  let svc: TestService;
  const pushed: ClientPush[] = [];
  let fanout: OrderedFanout;
  let committedHere = 0;
  const log = capturingLogger('info');

  const push = (seq: number, title: string) => ({ event: 'system:notify' as const, user_id: null, seq, payload: { id: `n-${seq}-${title}`, seq, title } });
  const commit = async (title: string) =>
    (await request(svc.url).post('/api/notifications').set(admin).send({ title, message: 'm' }).expect(202)).body.seq as number;

  before(async () => {
    svc = await startService();
    const service = svc.service.notifications.service;
    fanout = new OrderedFanout({
      channels: { push: (p: ClientPush) => void pushed.push(p), frame: () => undefined, welcome: () => undefined },
      committedBetween: (after, before) => service.committedBetween(after, before),
      lastSeq: () => service.lastSeq(),
      committedHere: () => committedHere,
      log: log.logger,
      gapWaitMs: 20,
    });
    fanout.start(await service.lastSeq());
  });
  after(async () => {
    fanout?.stop();
    await svc?.destroy();
  });

  it('a seq beyond the database is dropped once the counter is read; the position stays', async () => {
    const start = fanout.position;
    fanout.accept(push(start + 1_000_000, 'bogus'));
    await eventually(() => expect(fanout.refused).to.equal(1), 2000, 10);
    expect(fanout.position).to.equal(start);
    expect(pushed).to.deep.equal([]);
    expect(log.text()).to.include('notification push dropped');
  });

  it('a seq the database holds (committed elsewhere) goes out, after the counter is read', async () => {
    const seq = await commit('elsewhere');
    fanout.accept(push(seq, 'elsewhere'));
    await eventually(() => expect(pushed.map((p) => p.seq)).to.deep.equal([seq]), 2000, 10);
    expect(fanout.position).to.equal(seq);
  });

  it("this instance's own commit goes out at once, without reading the counter", async () => {
    const seq = await commit('here');
    committedHere = seq;
    const before = pushed.length;
    fanout.accept(push(seq, 'here'));
    // synchronous: no database read in between
    expect(pushed.slice(before).map((p) => p.seq)).to.deep.equal([seq]);
    expect(fanout.position).to.equal(seq);
  });

  it('a bogus seq among real ones: the real ones go out in order, the bogus one never', async () => {
    const s1 = await commit('one');
    const s2 = await commit('two');
    const before = pushed.length;
    fanout.accept(push(s2 + 500, 'bogus'));
    fanout.accept(push(s2, 'two'));
    fanout.accept(push(s1, 'one'));
    await eventually(() => expect(pushed.slice(before).map((p) => p.seq)).to.deep.equal([s1, s2]), 2000, 10);
    await new Promise((r) => setTimeout(r, 100));
    expect(pushed.slice(before).map((p) => p.seq)).to.deep.equal([s1, s2]);
    expect(fanout.position).to.equal(s2);
  });
});
