import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import WebSocket from 'ws';
import { GatewayClient, type SocketFactory } from '../../src/client/gateway-client.js';
import { ADMIN, adminAuth, startPeer, startService, type TestService } from '../support/service.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { unusedPort } from '../auth/helpers.js';
import { eventually } from '../plugins/helpers.js';

const EXAMPLE = path.resolve(import.meta.dirname, '../../docs/deploy/nginx.conf');

/** A commented-out line of the file, as it reads once uncommented. */
const uncommented = (line: string) => line.replace(/^#( |$)/, '');

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

/**
 * docs/deploy/nginx.conf with the test's ports, without TLS (no certificate here). As shipped
 * (one instance), its `server 127.0.0.1:8080` becomes the instance and every other line stays
 * as written. With `several`, the commented variant takes the place of that upstream, with the
 * instances as its server lines.
 */
function siteConfig(listenPort: number, upstreams: number[], variant: 'shipped' | 'several'): string {
  const out: string[] = [];
  let block: 'active' | 'variant' | null = null;
  let serversDone = false;
  for (const raw of fs.readFileSync(EXAMPLE, 'utf8').split('\n')) {
    if (/^upstream service_core \{/.test(raw)) block = 'active';
    else if (/^#\s*upstream service_core \{/.test(raw)) block = 'variant';
    if (block) {
      const line = block === 'variant' ? uncommented(raw) : raw;
      const keep = (block === 'active') === (variant === 'shipped');
      if (/^\}/.test(line)) block = null;
      if (!keep) continue;
      if (variant === 'shipped') out.push(line.replace(/^(\s*server 127\.0\.0\.1):8080;/, `$1:${upstreams[0]};`));
      else if (!/^\s*server /.test(line)) out.push(line);
      else if (!serversDone) {
        out.push(...upstreams.map((p) => `    server 127.0.0.1:${p};`));
        serversDone = true;
      }
    } else if (/^\s*listen 443 ssl/.test(raw)) out.push(`    listen 127.0.0.1:${listenPort};`);
    else if (!/^\s*ssl_/.test(raw)) out.push(raw);
  }
  return out.join('\n');
}

/** Debian's nginx, as a foreground process of the test with its own prefix. */
interface TestNginx {
  /** what nginx wrote to its error log so far */
  errors(): string;
  stop(): Promise<void>;
}

async function startNginx(site: string): Promise<TestNginx> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nginx-'));
  for (const d of ['logs', 'tmp']) fs.mkdirSync(path.join(dir, d));
  const conf = path.join(dir, 'nginx.conf');
  fs.writeFileSync(
    conf,
    [
      'daemon off;',
      'worker_processes 1;',
      `pid ${dir}/nginx.pid;`,
      `error_log ${dir}/logs/error.log warn;`,
      'events { worker_connections 1024; }',
      'http {',
      `  access_log ${dir}/logs/access.log;`,
      ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `  ${t}_temp_path ${dir}/tmp/${t};`),
      site,
      '}',
    ].join('\n'),
  );
  const child: ChildProcess = spawn('nginx', ['-c', conf, '-p', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d) => (err += d.toString()));
  const port = Number(/listen 127\.0\.0\.1:(\d+)/.exec(site)![1]);
  const exited = new Promise((r) => child.once('exit', r));
  const stop = async (signal: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await exited;
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    await eventually(
      async () => {
        if (child.exitCode !== null) throw new Error(`nginx exited: ${err}`);
        await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => expect(r.status).to.equal(200));
      },
      10_000,
      100,
    );
  } catch (e) {
    await stop('SIGKILL');
    throw e;
  }
  return {
    errors: () => fs.readFileSync(path.join(dir, 'logs', 'error.log'), 'utf8'),
    stop: () => stop('SIGQUIT'),
  };
}

/** Five failed logins through the proxy with an X-Forwarded-For of the client's own: the service records the address nginx saw. */
async function forwardedForIsNginxs(origin: string, svc: TestService): Promise<void> {
  for (let i = 0; i < 5; i++) {
    const r = await fetch(`${origin}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin, 'x-forwarded-for': '203.0.113.9' },
      body: JSON.stringify({ username: 'admin', password: `wrong-${i}` }),
    });
    expect(r.status).to.equal(401);
  }
  // nginx appends the address it saw (127.0.0.1): the service reads the client, not the proxy
  const rows = await svc.service.db('login_failures').where({ username: 'admin' }).select('ip');
  expect(rows.map((r: { ip: string }) => r.ip)).to.include('127.0.0.1');
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
    nginx = await startNginx(siteConfig(port, [Number(new URL(svc.url).port)], 'shipped'));
  });
  after(async () => {
    await nginx?.stop();
    await svc?.destroy();
  });

  it('lists one instance: a login, API calls, a ws connection and a push go through, and nginx logs no upstream error', async () => {
    expect(activeServers(fs.readFileSync(EXAMPLE, 'utf8'))).to.deep.equal(['server 127.0.0.1:8080;']);
    const login = await fetch(`${origin}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin },
      body: JSON.stringify({ username: ADMIN.username, password: ADMIN.password }),
    });
    expect(login.status).to.equal(200);
    const { token } = (await login.json()) as { token: string };
    // more requests than a round robin over two servers needs to reach both
    for (let i = 0; i < 6; i++) {
      const me = await fetch(`${origin}/api/me`, { headers: { authorization: `Bearer ${token}` } });
      expect(((await me.json()) as { username: string }).username).to.equal('admin');
    }
    const client = new GatewayClient({
      url: `${origin.replace('http', 'ws')}/ws`,
      WebSocket: WebSocket as unknown as SocketFactory,
      headers: { Authorization: `Bearer ${token}` },
    });
    try {
      await client.ready();
      const got: string[] = [];
      client.on('notification', ({ payload }) => got.push(payload.title!));
      const res = await fetch(`${origin}/api/notifications`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: adminAuth() },
        body: JSON.stringify({ title: 'through nginx', message: 'm' }),
      });
      expect(res.status).to.equal(202);
      await eventually(() => expect(got).to.deep.equal(['through nginx']), 2000);
    } finally {
      client.close();
    }
    expect(nginx.errors()).not.to.match(/upstream/);
  });

  it('takes the client address nginx saw, not one the client wrote into X-Forwarded-For', async () => {
    await forwardedForIsNginxs(origin, svc);
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
    nginx = await startNginx(siteConfig(port, [new URL(a.url).port, new URL(b.url).port].map(Number), 'several'));
  });
  after(async () => {
    await nginx?.stop();
    await b?.stop();
    await a?.destroy();
    await redis?.stop();
  });

  it('a login, an API call, a ws connection and a push from either instance, through the proxy', async () => {
    const login = await fetch(`${origin}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin },
      body: JSON.stringify({ username: ADMIN.username, password: ADMIN.password }),
    });
    expect(login.status).to.equal(200);
    const { token } = (await login.json()) as { token: string };
    const me = await fetch(`${origin}/api/me`, { headers: { authorization: `Bearer ${token}` } });
    expect(((await me.json()) as { username: string }).username).to.equal('admin');

    // several connections: the balancer spreads them over both instances
    const clients = Array.from(
      { length: 4 },
      () =>
        new GatewayClient({
          url: `${origin.replace('http', 'ws')}/ws`,
          WebSocket: WebSocket as unknown as SocketFactory,
          headers: { Authorization: `Bearer ${token}` },
        }),
    );
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
    await forwardedForIsNginxs(origin, a);
  });
});
