import fs from 'node:fs';
import { expect } from 'chai';
import { adminAuth, startPeer, startService, type TestService } from '../support/service.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { unusedPort } from '../auth/helpers.js';
import { eventually } from '../plugins/helpers.js';
import { SHIPPED_NGINX, shippedSite, startNginx, type TestNginx } from '../support/nginx.js';
import { KEEP_ALIVE_MS, STOP_IDLE_MARGIN_MS, STOP_IDLE_MS } from '../../src/http/drain.js';
import { clientThrough, forwardedForIsTheProxys, loginCallsAndPushThrough, loginThrough, metricsOnlyToThisMachine } from '../support/proxy.js';

/** The server lines of the file's upstream that is not commented out. */
function activeServers(text: string): string[] {
  const servers: string[] = [];
  let inside = false;
  for (const line of text.split('\n')) {
    if (/^upstream service_core \{/.test(line)) inside = true;
    else if (inside && /^\}/.test(line)) inside = false;
    else if (inside && /^\s*server /.test(line)) servers.push(line.trim());
  }
  return servers;
}

/** The shipped file as it is: one instance, no Redis. */
describe('behind nginx, one instance (docs/deploy/nginx.conf as shipped)', function () {
  this.timeout(60_000);
  let svc: TestService;
  let nginx: TestNginx;
  let origin: string;

  before(async () => {
    const port = await unusedPort();
    origin = `http://127.0.0.1:${port}`;
    svc = await startService({ env: { SERVICE_TRUST_PROXY: 'true', SERVICE_PUBLIC_URL: origin } });
    nginx = await startNginx(shippedSite(port, [Number(new URL(svc.url).port)], 'one'), port);
  });
  after(async () => {
    await nginx?.stop();
    await svc?.destroy();
  });

  it('keeps an idle upstream connection far shorter than the service does (a lagging instance never times out one nginx just wrote onto)', () => {
    const text = fs.readFileSync(SHIPPED_NGINX, 'utf8');
    const timeouts = [...text.matchAll(/^#?\s*keepalive_timeout (\d+)s;/gm)].map((m) => Number(m[1]) * 1000);
    // the shipped upstream and its several-instance variant
    expect(timeouts).to.have.length(2);
    for (const t of timeouts) expect(KEEP_ALIVE_MS - t, 'margin, ms').to.be.at.least(30_000);
    // and closed before a stopping instance closes the connections still idle (src/http/drain.ts)
    for (const t of timeouts) expect(STOP_IDLE_MS - t, 'margin before the stop closes them, ms').to.be.at.least(STOP_IDLE_MARGIN_MS);
  });

  it('lists one instance: a login, API calls, a ws connection and a push go through, and nginx logs no upstream error', async () => {
    expect(activeServers(fs.readFileSync(SHIPPED_NGINX, 'utf8'))).to.deep.equal(['server 127.0.0.1:8080;']);
    // more API calls than a round robin over two servers needs to reach both
    await loginCallsAndPushThrough(origin, 'through nginx', 6);
    expect(nginx.errors()).not.to.match(/upstream/);
  });

  it('takes the client address nginx saw, not one the client wrote into X-Forwarded-For', async () => {
    await forwardedForIsTheProxys(origin, svc);
  });

  it('answers /metrics to this machine only: 403 to any other address', async () => {
    await metricsOnlyToThisMachine(origin);
  });
});

/** The file's several-instance variant in front of two instances: login, API, ws, a push from the other instance. */
describe('behind nginx, several instances (the variant in docs/deploy/nginx.conf)', function () {
  this.timeout(60_000);
  let redis: TestRedis;
  let a: TestService;
  let b: TestService;
  let nginx: TestNginx;
  let origin: string;

  before(async () => {
    const port = await unusedPort();
    origin = `http://127.0.0.1:${port}`;
    redis = await startRedis();
    const env = { SERVICE_REDIS_URL: redis.url, SERVICE_TRUST_PROXY: 'true', SERVICE_PUBLIC_URL: origin };
    a = await startService({ env });
    b = await startPeer(a, env);
    nginx = await startNginx(shippedSite(port, [new URL(a.url).port, new URL(b.url).port].map(Number), 'several'), port);
  });
  after(async () => {
    await nginx?.stop();
    await b?.stop();
    await a?.destroy();
    await redis?.stop();
  });

  it('a login, an API call, a ws connection and a push from either instance, through the proxy', async () => {
    const token = await loginThrough(origin);
    const me = await fetch(`${origin}/api/me`, { headers: { authorization: `Bearer ${token}` } });
    expect(((await me.json()) as { username: string }).username).to.equal('admin');

    // several connections: the balancer spreads them over both instances
    const clients = Array.from({ length: 4 }, () => clientThrough(origin, token));
    try {
      await Promise.all(clients.map((c) => c.ready()));
      expect(a.service.gateway.gateway.connectionCount).to.be.greaterThan(0);
      expect(b.service.gateway.gateway.connectionCount).to.be.greaterThan(0);
      const got = clients.map(() => [] as string[]);
      clients.forEach((c, i) => c.on('notification', ({ payload }) => got[i].push(payload.title!)));
      for (const [i, svc] of [a, b].entries()) {
        const res = await fetch(`${svc.url}/api/notifications`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: adminAuth() },
          body: JSON.stringify({ title: `from instance ${i}`, message: 'm' }),
        });
        expect(res.status).to.equal(202);
      }
      await eventually(() => expect(got.every((g) => g.includes('from instance 0') && g.includes('from instance 1'))).to.equal(true), 2000);
    } finally {
      for (const c of clients) c.close();
    }
    expect(nginx.errors()).not.to.match(/upstream/);
  });

  it('takes the client address nginx saw, not one the client wrote into X-Forwarded-For', async () => {
    await forwardedForIsTheProxys(origin, a);
  });
});
