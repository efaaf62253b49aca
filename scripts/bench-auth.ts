/**
 * Benchmark of the API authentication path (issue: "an API-key request costs one indexed lookup
 * plus a cached permission set"). Compares, on this machine:
 *   - a bare Koa hello-world,
 *   - GET /api/me/access with a per-user API key (target: >= 70% of the bare Koa rate),
 *   - GET /api/me/access with repeated HTTP Basic (target: >= 60% of the bare Koa rate).
 * The load generator (autocannon) runs in its own process. Not a test: run it by hand,
 *   npx tsx scripts/bench-auth.ts [seconds=10] [connections=50]
 * With SERVICE_DATABASE_URL=postgres://… it benchmarks on PostgreSQL.
 */
import Koa from 'koa';
import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { AddressInfo } from 'node:net';
import { loadConfig } from '../src/config.js';
import { Service } from '../src/service.js';
import { createLogger } from '../src/log.js';

const seconds = Number(process.argv[2] ?? 10);
const connections = Number(process.argv[3] ?? 50);
const bin = path.resolve('node_modules/.bin/autocannon');

// asynchronous: the servers under test share this process's event loop
async function load(url: string, headers: Record<string, string> = {}): Promise<number> {
  const args = ['-j', '-d', String(seconds), '-c', String(connections)];
  for (const [k, v] of Object.entries(headers)) args.push('-H', `${k}=${v}`);
  const { stdout } = await promisify(execFile)(bin, [...args, url], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const out = JSON.parse(stdout);
  if (out.non2xx > 0 || out.errors > 0) throw new Error(`${url}: ${out.non2xx} non-2xx, ${out.errors} errors`);
  return out.requests.average;
}

async function main() {
  const bare = new Koa();
  bare.use((ctx) => {
    ctx.body = { hello: 'world' };
  });
  const bareServer = http.createServer(bare.callback());
  await new Promise<void>((r) => bareServer.listen(0, '127.0.0.1', r));
  const bareUrl = `http://127.0.0.1:${(bareServer.address() as AddressInfo).port}/`;

  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-'));
  const password = 'bench-admin-password';
  const config = loadConfig({
    ...process.env,
    SERVICE_PORT: '0',
    SERVICE_DATA_DIR: dataDir,
    SERVICE_LOG_LEVEL: 'silent',
    SERVICE_ADMIN_PASSWORD: password,
    SERVICE_PLUGINS_DIR: path.join(dataDir, 'plugins'),
  });
  const service = new Service(config, { logger: createLogger('silent') });
  await service.start();
  await service.booted();
  const basic = 'Basic ' + Buffer.from(`admin:${password}`).toString('base64');
  const res = await fetch(`${service.url}/api/me/api-keys`, {
    method: 'POST',
    headers: { authorization: basic, 'content-type': 'application/json' },
    body: JSON.stringify({ label: 'bench' }),
  });
  const { token } = (await res.json()) as { token: string };

  const target = `${service.url}/api/me/access`;
  const koaRps = await load(bareUrl);
  const keyRps = await load(target, { 'X-API-Key': token });
  const basicRps = await load(target, { Authorization: basic });
  const pct = (n: number) => `${Math.round((n / koaRps) * 100)}%`;
  console.log(`bare Koa hello-world        ${Math.round(koaRps)} req/s`);
  console.log(`/api/me/access, API key     ${Math.round(keyRps)} req/s (${pct(keyRps)} of bare Koa; target >= 70%)`);
  console.log(`/api/me/access, HTTP Basic  ${Math.round(basicRps)} req/s (${pct(basicRps)} of bare Koa; target >= 60%)`);

  await service.stop();
  bareServer.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
