import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import { GatewayClient, type NotificationFrame, type SocketFactory } from '../../src/client/gateway-client.js';
import { adminAuth, basic, startPeer, startService, SYSTEM_KEY, type TestService } from '../support/service.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { writePlugin, eventually } from '../plugins/helpers.js';
import { wsUrl } from '../gateway/helpers.js';

/** A typed client on an instance that records every notification it is handed. */
function clientOf(svc: TestService | TestService[], headers: Record<string, string>) {
  const seen: Array<{ event: string; payload: NotificationFrame }> = [];
  const client = new GatewayClient({
    url: (Array.isArray(svc) ? svc : [svc]).map((s) => wsUrl(s)),
    WebSocket: WebSocket as unknown as SocketFactory,
    headers,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  client.on('notification', (n) => seen.push(n));
  return { client, seen, seqs: () => seen.map((n) => n.payload.seq) };
}

/**
 * Three instances on one database and one Redis (a redis-server of the test's own): what
 * happens on one instance is seen on the others at once, and a Redis restart loses nothing.
 */
describe('several instances over Redis', function () {
  this.timeout(90_000);
  let redis: TestRedis;
  let a: TestService;
  let b: TestService;
  let c: TestService;
  let first: TestService | undefined;
  const clients: GatewayClient[] = [];
  const env = () => ({ SERVICE_REDIS_URL: redis.url, SERVICE_PERMISSION_CACHE_TTL_MS: '60000', SERVICE_SYSTEM_API_KEY: SYSTEM_KEY });

  before(async () => {
    redis = await startRedis();
    a = await startService({ env: env() });
    writePlugin(
      a.config.pluginsDir,
      'pinger',
      {
        id: 'pinger',
        name: 'Pinger',
        version: '1.0.0',
        entry: 'index.mjs',
        permissions: { subscribe: [], emit: ['plugin:pinger:beat'] },
        permissions_declared: [{ id: 'beats.read', description: 'see the beats' }],
        client_events: [{ topic: 'plugin:pinger:beat', permission: 'plugin:pinger:beats.read' }],
      },
      {
        'index.mjs': `export function setup(ctx) {
  ctx.router.get('/ping', (koa) => { koa.body = { pong: true }; });
  ctx.router.post('/beat', (koa) => { ctx.bus.emit('plugin:pinger:beat', { n: ctx.sdk.jsonBody(koa).n }); koa.status = 204; });
}
`,
      },
    );
    // the plugin appears on A by a restart; B and C find it at boot
    await a.stop();
    first = a;
    a = await startService({ dataDir: a.dataDir, databaseUrl: a.databaseUrl, env: env() });
    [b, c] = await Promise.all([startPeer(a, env()), startPeer(a, env())]);
    for (const s of [a, b, c]) await eventually(() => expect(s.service.bridge!.isUp).to.equal(true), 10_000);
  });
  afterEach(() => {
    for (const cl of clients.splice(0)) cl.close();
  });
  after(async () => {
    for (const s of [c, b, a]) await s?.stop();
    // the first A created the database and the data dir: its destroy() removes them
    await first?.destroy();
    await redis?.stop();
  });

  const track = (svc: TestService | TestService[], headers: Record<string, string>) => {
    const t = clientOf(svc, headers);
    clients.push(t.client);
    return t;
  };
  const admin = { Authorization: adminAuth() };
  const post = (svc: TestService, body: Record<string, unknown>) =>
    request(svc.url)
      .post('/api/notifications')
      .set(admin)
      .send(body)
      .expect(202)
      .then((r) => r.body as { id: string; seq: number });

  it('a user:notify and a broadcast posted on A reach clients on B and C live, in seq order, once each, within a second', async () => {
    await request(a.url)
      .post('/api/users')
      .set(admin)
      .send({ username: 'ada', password: 'ada-password-1', groups: ['INT_USER'] })
      .expect(201);
    const onB = track(b, { Authorization: basic('ada', 'ada-password-1') });
    const onC = track(c, { Authorization: basic('ada', 'ada-password-1') });
    const adminOnC = track(c, admin);
    await Promise.all([onB.client.ready(), onC.client.ready(), adminOnC.client.ready()]);
    const resumesBefore = [onB, onC].map((t) => t.client.lastSeq);

    const started = Date.now();
    const sent: Array<{ id: string; seq: number }> = [];
    for (let i = 0; i < 5; i++) {
      sent.push(await post(a, { title: `broadcast ${i}`, message: 'm' }));
      sent.push(await post(a, { title: `for ada ${i}`, message: 'm', user: 'ada' }));
    }
    const all = sent.map((s) => s.seq);
    for (const t of [onB, onC]) await eventually(() => expect(t.seqs()).to.deep.equal(all), 1000);
    expect(Date.now() - started).to.be.below(1000 + 10 * 200);
    // the admin is not ada: the broadcasts only
    await eventually(() => expect(adminOnC.seqs()).to.deep.equal(sent.filter((_, i) => i % 2 === 0).map((s) => s.seq)), 1000);
    // live, not by resume: no resume was needed after the welcome
    for (const [i, t] of [onB, onC].entries()) expect(t.client.lastSeq).to.be.at.least(resumesBefore[i]!);
  });

  it('a permission revoked on A is refused on B within a second (cache TTL 60 s); a user disabled on A loses its connections on B and C', async () => {
    await request(a.url)
      .post('/api/groups')
      .set(admin)
      .send({ name: 'senders', permissions: ['feature:notifications.broadcast'] })
      .expect(201);
    const u = (
      await request(a.url)
        .post('/api/users')
        .set(admin)
        .send({ username: 'bea', password: 'bea-password-1', groups: ['INT_USER', 'senders'] })
        .expect(201)
    ).body;
    const bea = basic('bea', 'bea-password-1');
    // B caches bea's permissions (60 s)
    expect((await request(b.url).get('/api/me/access').set('Authorization', bea).expect(200)).body.permissions).to.include('feature:notifications.broadcast');
    await request(a.url)
      .patch(`/api/users/${u.id}`)
      .set(admin)
      .send({ groups: ['INT_USER'] })
      .expect(200);
    await eventually(
      async () => {
        await request(b.url).post('/api/notifications').set('Authorization', bea).send({ title: 't', message: 'm' }).expect(403);
      },
      1000,
      50,
    );

    const wsB = track(b, { Authorization: bea });
    const wsC = track(c, { Authorization: bea });
    await Promise.all([wsB.client.ready(), wsC.client.ready()]);
    const closedAt: number[] = [];
    for (const t of [wsB, wsC]) t.client.on('state', ({ state }) => state === 'closed' && closedAt.push(Date.now()));
    const t0 = Date.now();
    await request(a.url).patch(`/api/users/${u.id}`).set(admin).send({ disabled: true }).expect(200);
    await eventually(() => expect(closedAt).to.have.length(2), 1000, 20);
    expect(Math.max(...closedAt) - t0).to.be.below(1000);
  });

  it('auth settings changed on A are followed by B and C at once (no 5 s polling with Redis)', async () => {
    await request(a.url)
      .post('/api/groups')
      .set(admin)
      .send({ name: 'sso-people', permissions: ['api:read'] })
      .expect(201);
    await request(a.url).patch('/api/settings/auth').set(admin).send({ sso_default_groups: 'sso-people' }).expect(200);
    for (const s of [b, c]) {
      await eventually(
        async () => {
          const view = (await request(s.url).get('/api/settings/auth').set(admin).expect(200)).body.settings;
          expect(view.sso_default_groups.value).to.deep.equal(['sso-people']);
          expect(s.service.auth.authSettings.current().ssoDefaultGroups).to.deep.equal(['sso-people']);
        },
        1000,
        50,
      );
    }
  });

  it('a plugin disabled on A stops acting on B; enabled again, it acts on B again', async () => {
    await request(b.url).get('/api/plugins/pinger/ping').set(admin).expect(200);
    await request(a.url).post('/api/plugins/pinger/disable').set(admin).expect(200);
    await eventually(() => request(b.url).get('/api/plugins/pinger/ping').set(admin).expect(404), 2000, 50);
    await eventually(() => request(c.url).get('/api/plugins/pinger/ping').set(admin).expect(404), 2000, 50);
    await request(a.url).post('/api/plugins/pinger/enable').set(admin).expect(200);
    await eventually(() => request(b.url).get('/api/plugins/pinger/ping').set(admin).expect(200), 2000, 50);
  });

  it('a plugin-declared event reaches only the clients allowed to see it, on every instance', async () => {
    await request(a.url)
      .post('/api/users')
      .set(admin)
      .send({ username: 'cid', password: 'cid-password-1', groups: ['INT_USER'], extra_permissions: ['plugin:pinger:beats.read'] })
      .expect(201);
    await request(a.url)
      .post('/api/users')
      .set(admin)
      .send({ username: 'dot', password: 'dot-password-1', groups: ['INT_USER'] })
      .expect(201);
    const beats = (svc: TestService, who: string, pw: string) => {
      const t = track(svc, { Authorization: basic(who, pw) });
      const got: unknown[] = [];
      t.client.on('plugin:pinger:beat', (p) => got.push(p));
      return { t, got };
    };
    const cidOnB = beats(b, 'cid', 'cid-password-1');
    const cidOnC = beats(c, 'cid', 'cid-password-1');
    const dotOnB = beats(b, 'dot', 'dot-password-1');
    await Promise.all([cidOnB, cidOnC, dotOnB].map((x) => x.t.client.ready()));
    await request(a.url).post('/api/plugins/pinger/beat').set(admin).send({ n: 7 }).expect(204);
    await eventually(() => expect(cidOnB.got).to.deep.equal([{ n: 7 }]), 1000);
    await eventually(() => expect(cidOnC.got).to.deep.equal([{ n: 7 }]), 1000);
    await new Promise((r) => setTimeout(r, 200));
    expect(dotOnB.got).to.deep.equal([]);
  });

  it('Redis killed under traffic and restarted: every client ends with every notification, once', async () => {
    const onB = track(b, admin);
    const onC = track(c, admin);
    await Promise.all([onB.client.ready(), onC.client.ready()]);
    const sent: number[] = [];
    const sender = (async () => {
      for (let i = 0; i < 60; i++) {
        const from = [a, b, c][i % 3];
        sent.push((await post(from, { title: `traffic ${i}`, message: 'm' })).seq);
        await new Promise((r) => setTimeout(r, 30));
      }
    })();
    await new Promise((r) => setTimeout(r, 400));
    await redis.kill();
    await eventually(() => expect([a, b, c].every((s) => !s.service.bridge!.isUp)).to.equal(true), 5000, 20);
    // no HTTP request failed meanwhile (post() expects 202 each time)
    await new Promise((r) => setTimeout(r, 700));
    await redis.restart();
    await sender;
    await eventually(() => expect([a, b, c].every((s) => s.service.bridge!.isUp)).to.equal(true), 10_000, 50);
    for (const t of [onB, onC]) {
      await eventually(
        () =>
          expect(
            t
              .seqs()
              .filter((s) => s !== null && sent.includes(s))
              .sort((x, y) => x! - y!),
          ).to.deep.equal([...sent].sort((x, y) => x - y)),
        10_000,
        100,
      );
      // once each
      expect(new Set(t.seqs()).size).to.equal(t.seqs().length);
    }
    const metrics = (await request(b.url).get('/metrics').expect(200)).text;
    expect(metrics).to.match(/^bus_bridge_up 1$/m);
  });

  it('a malformed or foreign message on the channel is logged and dropped, never applied', async () => {
    const { Redis } = await import('ioredis');
    const raw = new Redis(redis.url);
    try {
      const dropped = b.service.bridge!.stats.dropped;
      const channel = b.service.bridge!.channel;
      await raw.publish(channel, 'not json');
      await raw.publish(channel, JSON.stringify({ v: 1, origin: 'intruder', event: 'iam:password_changed', payload: { user_id: 7 } }));
      await raw.publish(channel, JSON.stringify({ v: 1, origin: 'intruder', event: 'system:boot_complete', payload: { plugins: [] } }));
      await raw.publish(channel, JSON.stringify({ v: 2, origin: 'intruder', event: 'auth:system_key_changed', payload: {} }));
      await eventually(() => expect(b.service.bridge!.stats.dropped - dropped).to.equal(4), 2000);
      await request(b.url).get('/readyz').expect(200);
    } finally {
      raw.disconnect();
    }
  });

  it('the provider list says which instance answered', async () => {
    const fromB = (await request(b.url).get('/api/socket/providers').expect(200)).body;
    const fromC = (await request(c.url).get('/api/socket/providers').expect(200)).body;
    expect(fromB.instance).to.equal(b.service.instanceId);
    expect(fromC.instance).to.equal(c.service.instanceId);
    expect(fromB.instance).not.to.equal(fromC.instance);
  });

  it('stops with 1012: clients move to another instance and resume with no gap and no duplicate', async () => {
    const d = await startPeer(a, env());
    await eventually(() => expect(d.service.bridge!.isUp).to.equal(true), 10_000);
    const moving = track([d, b], admin);
    await moving.client.ready();
    const sent: number[] = [(await post(a, { title: 'before', message: 'm' })).seq];
    await eventually(() => expect(moving.seqs()).to.include(sent[0]), 1000);
    const codes: string[] = [];
    moving.client.on('state', ({ state, reason }) => codes.push(`${state}:${reason ?? ''}`));
    const stopping = d.stop();
    sent.push((await post(a, { title: 'while moving', message: 'm' })).seq);
    await stopping;
    sent.push((await post(a, { title: 'after', message: 'm' })).seq);
    await eventually(() => expect(moving.seqs().filter((s) => sent.includes(s!))).to.deep.equal(sent), 5000, 50);
    expect(codes.some((c) => c.includes('1012'))).to.equal(true);
    expect(new Set(moving.seqs()).size).to.equal(moving.seqs().length);
  });
});
