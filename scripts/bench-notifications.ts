/**
 * Notification write throughput (not a test): the service as its own process against a plain
 * server (scripts/bench/plain-insert-server.ts, its own process: Koa, the service's database
 * configuration, one INSERT per request into a table shaped like `notifications`), each on a
 * database of its own. The same autocannon load (user-targeted notifications, 50 connections)
 * goes to each in turn, the order alternating round by round; the figure is the service's
 * persisted notifications per second as a multiple of the plain server's (medians of the
 * rounds), which is what group commit is for. A WebSocket client of the target user measures
 * push latency during the service's rounds; then seven bulk requests of 1,000.
 *
 *   npm run bench:notifications [-- --seconds 6 --connections 50 --rounds 5]
 *
 * SERVICE_BENCH_DATABASE_URL=postgres://… runs on PostgreSQL (fresh databases are made from it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import WebSocket from 'ws';
import { spawnService } from '../test/support/process.js';
import { ADMIN, basic } from '../test/support/service.js';
import { arg, pct, benchDatabase } from './bench/common.js';

const SECONDS = arg('seconds', 6);
const CONNECTIONS = arg('connections', 50);
const ROUNDS = arg('rounds', 5);
const ROOT = path.resolve(import.meta.dirname, '..');

function load(url: string, headers: Record<string, string>, body: string, seconds = SECONDS): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon({ url, method: 'POST', connections: CONNECTIONS, duration: seconds, headers, body }, (err, result) => (err ? reject(err) : resolve(result)));
  });
}

/** The plain server as its own process; resolves with its URL once it listens. */
async function startPlain(databaseUrl: string | null, dataDir: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/bench/plain-insert-server.ts', databaseUrl ?? '', dataDir], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the plain server exited (${code})`)));
    child.stdout!.once('data', (d: Buffer) => resolve(d.toString().trim()));
  });
  return { url: `http://127.0.0.1:${port}`, child };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-notify-'));
  const plainDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-plain-'));
  const db = await benchDatabase();
  const plainDb = await benchDatabase();
  const svc = await spawnService({ dataDir, databaseUrl: db.url, env: { SERVICE_LOG_LEVEL: 'warn' } });
  let plain: { url: string; child: ChildProcess } | undefined;
  try {
    plain = await startPlain(plainDb.url, plainDir);
    const admin = basic(ADMIN.username, ADMIN.password);
    const json = { authorization: admin, 'content-type': 'application/json' };
    const target = basic('target', 'target-password-1');
    const created = await fetch(`${svc.url}/api/users`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ username: 'target', password: 'target-password-1' }),
    });
    if (created.status !== 201) throw new Error(`creating the target user: ${created.status}`);

    // the target's connection: commit -> client latency from the notification's created_at
    const pushes: number[] = [];
    const ws = new WebSocket(`${svc.url.replace('http', 'ws')}/ws`, { headers: { authorization: target }, perMessageDeflate: false });
    await new Promise<void>((resolve, reject) => {
      ws.once('error', reject);
      ws.on('message', (data) => {
        const text = data.toString();
        if (text.startsWith('{"event":"gateway:welcome"')) return resolve();
        if (text.startsWith('{"event":"user:notify"')) pushes.push(Date.now() - Date.parse(JSON.parse(text).payload.created_at));
      });
    });

    const body = JSON.stringify({ title: 'bench', message: 'a pipeline finished', user: 'target', toast: false });
    const sides = {
      service: {
        url: `${svc.url}/api/notifications`,
        count: () =>
          fetch(`${svc.url}/api/notifications?limit=1`, { headers: { authorization: target } })
            .then((r) => r.json() as Promise<{ last_seq: number }>)
            .then((r) => r.last_seq),
      },
      plain: {
        url: `${plain.url}/`,
        count: () =>
          fetch(`${plain!.url}/count`)
            .then((r) => r.json() as Promise<{ count: number }>)
            .then((r) => r.count),
      },
    };
    // warm up both (JIT, pools, the identity cache), then drop the warm-up's pushes
    for (const side of Object.values(sides)) await load(side.url, json, body, 2);
    await new Promise((r) => setTimeout(r, 500));
    pushes.splice(0);

    const rates = { service: [] as number[], plain: [] as number[] };
    const post = { p50: [] as number[], p99: [] as number[], non2xx: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      for (const name of round % 2 ? (['plain', 'service'] as const) : (['service', 'plain'] as const)) {
        const side = sides[name];
        const before = await side.count();
        const result = await load(side.url, json, body);
        const after = await side.count();
        rates[name].push((after - before) / result.duration);
        if (name === 'service') {
          post.p50.push(result.latency.p50);
          post.p99.push(result.latency.p99);
        }
        if (result.non2xx || result.errors) throw new Error(`${name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
      }
    }
    await new Promise((r) => setTimeout(r, 1000));
    // the pushes of the timed load only (the bulk requests below push too)
    const pushLatency = pushes.splice(0).sort((a, b) => a - b);

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

    const ratios = rates.service.map((s, i) => s / rates.plain[i]!);
    const list = (xs: number[], digits = 0) => xs.map((x) => x.toFixed(digits)).join(' / ');
    console.log(
      `machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, load ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}, ${new Date().toISOString()}, ${db.url ? 'PostgreSQL' : 'SQLite'}`,
    );
    console.log(`${ROUNDS} rounds of ${SECONDS} s a side, ${CONNECTIONS} connections, alternating`);
    console.log(`plain server (one INSERT per request), persisted/s   median ${Math.round(median(rates.plain))}  (${list(rates.plain)})`);
    console.log(`service POST /api/notifications, persisted/s         median ${Math.round(median(rates.service))}  (${list(rates.service)})`);
    console.log(
      `service / plain                                       ${(median(rates.service) / median(rates.plain)).toFixed(2)}x of the medians; rounds ${list(ratios, 2)}, median ${median(ratios).toFixed(2)}x (goal >= 1.5x)`,
    );
    console.log(`service POST latency p50 / p99 (median of rounds)     ${median(post.p50)} / ${median(post.p99)} ms (goal p99 <= 50 ms)`);
    console.log(
      `push latency commit -> client p50 / p99              ${pct(pushLatency, 50)} / ${pct(pushLatency, 99)} ms over ${pushLatency.length} pushes (goal p99 <= 50 ms)`,
    );
    console.log(
      `bulk: 1,000 notifications in one request             median ${bulkMs[3]!.toFixed(0)} ms, best ${bulkMs[0]!.toFixed(0)} ms (goal <= 150 ms on PostgreSQL)`,
    );
  } finally {
    if (plain) {
      const exited = new Promise((r) => plain!.child.once('exit', r));
      plain.child.kill('SIGTERM');
      await exited;
    }
    await svc.kill('SIGTERM');
    await db.drop();
    await plainDb.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
    fs.rmSync(plainDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
