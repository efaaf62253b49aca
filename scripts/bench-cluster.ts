/**
 * Cross-instance delivery benchmark (not a test): two instances as their own processes on one
 * database and one Redis, WebSocket clients split between them, notifications posted on the
 * first at a steady rate. Prints p50 / p99 delivery latency from the POST to the clients on the
 * same instance and on the other, their ratio (the same-instance figure is the baseline of this
 * run), and what was lost.
 *
 *   npm run bench:cluster [-- --clients 2000 --rate 200 --seconds 30]
 *
 * SERVICE_BENCH_DATABASE_URL=postgres://… runs on PostgreSQL (a fresh database is made from it).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { startRedis } from '../test/support/redis.js';
import { spawnService, type ServiceProcess } from '../test/support/process.js';
import { ADMIN, basic } from '../test/support/service.js';
import { arg, pct, benchDatabase } from './bench/common.js';

const CLIENTS = arg('clients', 2000);
const RATE = arg('rate', 200);
const SECONDS = arg('seconds', 30);
const PER_USER = 10;
const USERS = Math.max(1, Math.round(CLIENTS / PER_USER));

async function inBatches<T>(items: T[], size: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

async function main() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-cluster-'));
  const db = await benchDatabase();
  const redis = await startRedis();
  const env = {
    SERVICE_REDIS_URL: redis.url,
    SERVICE_LOG_LEVEL: 'warn',
    SERVICE_WS_MAX_CONNECTIONS_PER_USER: String(PER_USER * 2),
    SERVICE_LOGIN_ATTEMPTS_PER_MINUTE: '100000',
    SERVICE_PASSWORD_QUEUE: '100000',
  };
  const instances: ServiceProcess[] = [];
  try {
    instances.push(await spawnService({ dataDir, databaseUrl: db.url, env }));
    instances.push(await spawnService({ dataDir, databaseUrl: db.url, env }));
    const [a, b] = instances;
    const admin = basic(ADMIN.username, ADMIN.password);
    const users = Array.from({ length: USERS }, (_, i) => ({ name: `bench${i}`, password: `bench-password-${i}` }));
    await inBatches(users, 20, (u) =>
      fetch(`${a.url}/api/users`, {
        method: 'POST',
        headers: { authorization: admin, 'content-type': 'application/json' },
        body: JSON.stringify({ username: u.name, password: u.password }),
      }).then((r) => {
        if (r.status !== 201) throw new Error(`creating ${u.name}: ${r.status}`);
      }),
    );

    // per user: half the connections on A, half on B
    const latency = { same: [] as number[], other: [] as number[] };
    let received = 0;
    const sockets: WebSocket[] = [];
    const connect = (inst: ServiceProcess, u: { name: string; password: string }, kind: 'same' | 'other') =>
      new Promise<void>((resolve, reject) => {
        const ws = new WebSocket(`${inst.url.replace('http', 'ws')}/ws`, { headers: { authorization: basic(u.name, u.password) }, perMessageDeflate: false });
        ws.on('message', (data) => {
          const text = data.toString();
          if (text.startsWith('{"event":"gateway:welcome"')) return resolve();
          if (!text.startsWith('{"event":"user:notify"')) return;
          const frame = JSON.parse(text) as { payload: { message: string } };
          latency[kind].push(Date.now() - Number(frame.payload.message));
          received++;
        });
        ws.once('error', reject);
        sockets.push(ws);
      });
    const plan: Array<() => Promise<void>> = [];
    for (const u of users) for (let k = 0; k < PER_USER; k++) plan.push(() => connect(k % 2 ? b : a, u, k % 2 ? 'other' : 'same'));
    await inBatches(plan, 100, (open) => open());

    // notifications posted on A, user-targeted round robin, at RATE per second
    const total = RATE * SECONDS;
    const started = Date.now();
    let failed = 0;
    const inflight: Promise<void>[] = [];
    for (let i = 0; i < total; i++) {
      const due = started + (i * 1000) / RATE;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const u = users[i % users.length];
      inflight.push(
        fetch(`${a.url}/api/notifications`, {
          method: 'POST',
          headers: { authorization: admin, 'content-type': 'application/json' },
          body: JSON.stringify({ title: `bench ${i}`, message: String(Date.now()), user: u.name, toast: false }),
        }).then(
          (r) => void (r.status === 202 || failed++),
          () => void failed++,
        ),
      );
    }
    await Promise.all(inflight);
    await new Promise((r) => setTimeout(r, 2000));
    const expected = total * PER_USER;
    for (const s of [latency.same, latency.other]) s.sort((x, y) => x - y);
    const line = (label: string, s: number[]) => `${label.padEnd(34)} p50 ${pct(s, 50)} ms   p99 ${pct(s, 99)} ms   (${s.length} deliveries)`;
    console.log(
      `machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, ${db.url ? 'PostgreSQL' : 'SQLite'}`,
    );
    console.log(`${CLIENTS} ws clients on 2 instances, ${RATE} notifications/s for ${SECONDS} s, each to ${PER_USER} connections of one user`);
    console.log(line('same instance (baseline)', latency.same));
    console.log(line('other instance (over Redis)', latency.other));
    console.log(`cross-instance p99 / same-instance p99: ${(pct(latency.other, 99) / pct(latency.same, 99)).toFixed(2)}x (goal <= 2x, and <= 50 ms)`);
    console.log(`delivered ${received} of ${expected}; lost ${expected - received}; failed POSTs ${failed}`);
    for (const ws of sockets) ws.terminate();
  } finally {
    for (const i of instances) await i.kill('SIGTERM');
    await redis.stop();
    await db.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
