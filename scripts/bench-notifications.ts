/**
 * Notification write throughput (not a test): the service as its own process, autocannon
 * posting user-targeted notifications with 50 connections, a WebSocket client of the target
 * user measuring push latency, then bulk requests of 1,000. Beside it, in the same run, a bare
 * Koa app that answers the same POST with 202 and stores nothing: the baseline of this machine.
 *
 *   npm run bench:notifications [-- --seconds 10 --connections 50]
 *
 * SERVICE_BENCH_DATABASE_URL=postgres://… runs on PostgreSQL (a fresh database is made from it).
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import autocannon from 'autocannon';
import Koa from 'koa';
import WebSocket from 'ws';
import { spawnService } from '../test/support/process.js';
import { ADMIN, basic } from '../test/support/service.js';
import { arg, pct, benchDatabase } from './bench/common.js';

const SECONDS = arg('seconds', 10);
const CONNECTIONS = arg('connections', 50);

function load(url: string, headers: Record<string, string>, body: string): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon({ url, method: 'POST', connections: CONNECTIONS, duration: SECONDS, headers, body }, (err, result) => (err ? reject(err) : resolve(result)));
  });
}

async function main() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-notify-'));
  const db = await benchDatabase();
  const svc = await spawnService({ dataDir, databaseUrl: db.url, env: { SERVICE_LOG_LEVEL: 'warn' } });
  const bare = new Koa();
  bare.use((ctx) => {
    ctx.status = 202;
    ctx.body = { id: 'x', seq: 1 };
  });
  const bareServer = http.createServer(bare.callback());
  await new Promise<void>((r) => bareServer.listen(0, '127.0.0.1', r));
  try {
    const admin = basic(ADMIN.username, ADMIN.password);
    const json = { authorization: admin, 'content-type': 'application/json' };
    const created = await fetch(`${svc.url}/api/users`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ username: 'target', password: 'target-password-1' }),
    });
    if (created.status !== 201) throw new Error(`creating the target user: ${created.status}`);

    // the target's connection: commit -> client latency from the notification's created_at
    const pushes: number[] = [];
    const ws = new WebSocket(`${svc.url.replace('http', 'ws')}/ws`, {
      headers: { authorization: basic('target', 'target-password-1') },
      perMessageDeflate: false,
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('error', reject);
      ws.on('message', (data) => {
        const text = data.toString();
        if (text.startsWith('{"event":"gateway:welcome"')) return resolve();
        if (text.startsWith('{"event":"user:notify"')) pushes.push(Date.now() - Date.parse(JSON.parse(text).payload.created_at));
      });
    });

    const body = JSON.stringify({ title: 'bench', message: 'a pipeline finished', user: 'target', toast: false });
    const baseline = await load(`http://127.0.0.1:${(bareServer.address() as AddressInfo).port}/`, json, body);
    const countBefore = await fetch(`${svc.url}/api/notifications?limit=1`, { headers: { authorization: basic('target', 'target-password-1') } }).then(
      (r) => r.json() as Promise<{ last_seq: number }>,
    );
    const result = await load(`${svc.url}/api/notifications`, json, body);
    const countAfter = await fetch(`${svc.url}/api/notifications?limit=1`, { headers: { authorization: basic('target', 'target-password-1') } }).then(
      (r) => r.json() as Promise<{ last_seq: number }>,
    );
    await new Promise((r) => setTimeout(r, 1000));
    // the pushes of the timed load only (the bulk requests below push too)
    const pushLatency = pushes.splice(0).sort((a, b) => a - b);
    const persisted = (countAfter.last_seq - countBefore.last_seq) / SECONDS;

    // bulk: 1,000 user notifications in one request
    const items = JSON.stringify({
      notifications: Array.from({ length: 1000 }, (_, i) => ({ title: `bulk ${i}`, message: 'm', user: 'target', toast: false })),
    });
    const bulkMs: number[] = [];
    for (let i = 0; i < 7; i++) {
      const t = performance.now();
      const r = await fetch(`${svc.url}/api/notifications/batch`, { method: 'POST', headers: json, body: items });
      if (r.status !== 202) throw new Error(`bulk: ${r.status}`);
      await r.arrayBuffer();
      bulkMs.push(performance.now() - t);
    }
    bulkMs.sort((a, b) => a - b);
    ws.terminate();

    console.log(
      `machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, ${db.url ? 'PostgreSQL' : 'SQLite'}`,
    );
    console.log(`bare Koa answering the same POST (baseline)   ${Math.round(baseline.requests.average)} req/s`);
    console.log(
      `POST /api/notifications, ${CONNECTIONS} clients, one user   ${Math.round(result.requests.average)} req/s (${(result.requests.average / baseline.requests.average).toFixed(2)}x the baseline), ${result.non2xx} non-2xx`,
    );
    console.log(`notifications persisted per second            ${Math.round(persisted)}/s (goal >= 5000/s)`);
    console.log(`POST latency p50 / p99                        ${result.latency.p50} / ${result.latency.p99} ms (goal p99 <= 50 ms)`);
    console.log(
      `push latency commit -> client p50 / p99       ${pct(pushLatency, 50)} / ${pct(pushLatency, 99)} ms over ${pushLatency.length} pushes (goal p99 <= 50 ms)`,
    );
    console.log(
      `bulk: 1,000 notifications in one request      median ${bulkMs[3].toFixed(0)} ms, best ${bulkMs[0].toFixed(0)} ms (goal <= 150 ms on PostgreSQL)`,
    );
  } finally {
    bareServer.close();
    await svc.kill('SIGTERM');
    await db.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
