import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { KEEP_ALIVE_MS, STOP_IDLE_MARGIN_MS, STOP_IDLE_MS } from '../../src/http/drain.js';
import { startService, type TestService } from '../support/service.js';
import { forwardedForIsTheProxys, loginCallsAndPushThrough, metricsOnlyToThisMachine } from '../support/proxy.js';
import { unusedPort } from '../auth/helpers.js';
import { startForeground } from '../support/foreground.js';

const SHIPPED_CADDYFILE = path.resolve(import.meta.dirname, '../../docs/deploy/Caddyfile');

/**
 * docs/deploy/Caddyfile with the test's addresses: the site on plain HTTP at `port` (no
 * certificate here; Caddy's admin endpoint off), the upstream the test's service; every other
 * line as shipped.
 */
function site(port: number, upstream: number): string {
  const text = fs.readFileSync(SHIPPED_CADDYFILE, 'utf8');
  if (!/^service\.example\.com \{$/m.test(text) || !/reverse_proxy 127\.0\.0\.1:8080 \{/.test(text))
    throw new Error('the Caddyfile changed its site or upstream');
  return `{\n\tadmin off\n}\n${text.replace(/^service\.example\.com \{$/m, `http://127.0.0.1:${port} {`).replace('reverse_proxy 127.0.0.1:8080 {', `reverse_proxy 127.0.0.1:${upstream} {`)}`;
}

/** Debian's Caddy in the foreground, its config and data in a temp dir. */
async function startCaddy(config: string, port: number): Promise<{ stop(): Promise<void> }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'caddy-'));
  const file = path.join(dir, 'Caddyfile');
  fs.writeFileSync(file, config);
  const caddy = await startForeground({
    name: 'caddy',
    command: 'caddy',
    args: ['run', '--config', file, '--adapter', 'caddyfile'],
    dir,
    env: { ...process.env, HOME: dir, XDG_DATA_HOME: dir, XDG_CONFIG_HOME: dir },
    readyUrl: `http://127.0.0.1:${port}/readyz`,
  });
  return { stop: () => caddy.stop('SIGTERM') };
}

/** The shipped Caddyfile in front of one instance. */
describe('behind Caddy (docs/deploy/Caddyfile as shipped)', function () {
  this.timeout(60_000);
  let svc: TestService;
  let caddy: { stop(): Promise<void> };
  let origin: string;

  before(async () => {
    const port = await unusedPort();
    origin = `http://127.0.0.1:${port}`;
    svc = await startService({ env: { SERVICE_TRUST_PROXY: 'true', SERVICE_PUBLIC_URL: origin } });
    caddy = await startCaddy(site(port, Number(new URL(svc.url).port)), port);
  });
  after(async () => {
    await caddy?.stop();
    await svc?.destroy();
  });

  it('keeps an idle upstream connection far shorter than the service does (the service never closes one under a request Caddy sends)', () => {
    const json = JSON.parse(execFileSync('caddy', ['adapt', '--config', SHIPPED_CADDYFILE, '--adapter', 'caddyfile'], { encoding: 'utf8' }));
    const proxy = JSON.stringify(json.apps.http.servers);
    const idle = /"keep_alive":\{[^}]*"idle_timeout":(\d+)/.exec(proxy);
    expect(idle, 'transport http { keepalive … } in the Caddyfile').to.not.equal(null);
    expect(KEEP_ALIVE_MS - Number(idle![1]) / 1e6, 'margin, ms').to.be.at.least(30_000);
    expect(STOP_IDLE_MS - Number(idle![1]) / 1e6, 'margin before a stopping instance closes the connections still idle, ms').to.be.at.least(
      STOP_IDLE_MARGIN_MS,
    );
  });

  it('passes a login, API calls, a ws connection and a push', async () => {
    await loginCallsAndPushThrough(origin, 'through caddy');
  });

  it('takes the client address Caddy saw, not one the client wrote into X-Forwarded-For', async () => {
    await forwardedForIsTheProxys(origin, svc);
  });

  it('answers /metrics to this machine only: 403 to any other address', async () => {
    await metricsOnlyToThisMachine(origin);
  });
});
