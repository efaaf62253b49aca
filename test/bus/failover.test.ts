import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import { GatewayClient, type SocketFactory } from '../../src/client/gateway-client.js';
import { adminAuth, startPeer, startService, type TestService } from '../support/service.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { READY_TIMEOUT_MS, spawnService, type ServiceProcess } from '../support/process.js';
import { eventually } from '../plugins/helpers.js';

/** An instance that dies: its clients reconnect to another and resume with nothing missing. */
describe('an instance killed with SIGKILL', function () {
  this.timeout(120_000);
  let redis: TestRedis;
  let a: TestService;
  let b: TestService;
  let doomed: ServiceProcess;
  const clients: GatewayClient[] = [];

  before(async function () {
    // one of them a process: its start may take long on a loaded machine
    this.timeout(READY_TIMEOUT_MS + 60_000);
    redis = await startRedis();
    const env = { SERVICE_REDIS_URL: redis.url, SERVICE_WS_MAX_CONNECTIONS_PER_USER: '500' };
    a = await startService({ env });
    b = await startPeer(a, env);
    doomed = await spawnService({ dataDir: a.dataDir, databaseUrl: a.databaseUrl, env });
  });
  after(async () => {
    for (const c of clients.splice(0)) c.close();
    await doomed?.kill('SIGKILL');
    await b?.stop();
    await a?.destroy();
    await redis?.stop();
  });

  it('200 clients on it reconnect to the others and resume: every notification, once, in order', async () => {
    const ws = (u: string) => u.replace(/^http/, 'ws') + '/ws';
    const seen: number[][] = [];
    for (let i = 0; i < 200; i++) {
      const mine: number[] = [];
      seen.push(mine);
      const c = new GatewayClient({
        url: [ws(doomed.url), ws(b.url)],
        WebSocket: WebSocket as unknown as SocketFactory,
        headers: { Authorization: adminAuth() },
        backoff: { initialMs: 50, maxMs: 400 },
      });
      c.on('notification', ({ payload }) => payload.seq !== null && mine.push(payload.seq));
      clients.push(c);
    }
    await Promise.all(clients.map((c) => c.ready(20_000)));

    const sent: number[] = [];
    const post = async (i: number) =>
      sent.push(
        (
          await request(a.url)
            .post('/api/notifications')
            .set('Authorization', adminAuth())
            .send({ title: `n${i}`, message: 'm' })
            .expect(202)
        ).body.seq,
      );
    for (let i = 0; i < 10; i++) await post(i);
    await eventually(() => expect(seen.every((s) => s.length === 10)).to.equal(true), 5000, 50);

    const { signal } = await doomed.kill('SIGKILL');
    expect(signal).to.equal('SIGKILL');
    for (let i = 10; i < 30; i++) await post(i);

    await eventually(() => expect(clients.every((c) => c.state === 'live')).to.equal(true), 20_000, 100);
    await eventually(() => expect(seen.every((s) => s.length >= 30)).to.equal(true), 20_000, 100);
    for (const s of seen) {
      expect(s).to.deep.equal(sent); // nothing missing, nothing twice, in seq order
    }
    expect(b.service.gateway.gateway.connectionCount).to.be.at.least(200);
  });
});
