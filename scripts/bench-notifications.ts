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
 *   npm run bench:notifications [-- --seconds 3 --connections 50 --rounds 10 --profile DIR]
 *
 * --profile DIR: both servers write a V8 CPU profile there when they stop (node --cpu-prof).
 *
 * SERVICE_BENCH_DATABASE_URL=postgres://… runs on PostgreSQL (fresh databases are made from it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import Database from 'better-sqlite3';
import knex from 'knex';
import WebSocket from 'ws';
import { spawnService } from '../test/support/process.js';
import { ADMIN, basic } from '../test/support/service.js';
import { arg, pct, benchDatabase } from './bench/common.js';

// short rounds, many of them: on a shared machine the load moves within seconds, and each
// round's ratio compares two neighbouring slices of time
const SECONDS = arg('seconds', 3);
const CONNECTIONS = arg('connections', 50);
const ROUNDS = arg('rounds', 10);
const ROOT = path.resolve(import.meta.dirname, '..');
const PROFILE = process.argv.includes('--profile') ? path.resolve(process.argv[process.argv.indexOf('--profile') + 1]!) : null;
/** node, with a CPU profile written on exit under --profile */
const node = (...args: string[]) => [process.execPath, ...(PROFILE ? ['--cpu-prof', '--cpu-prof-dir', PROFILE] : []), '--import', 'tsx', ...args];

function load(url: string, headers: Record<string, string>, body: string, seconds = SECONDS): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon({ url, method: 'POST', connections: CONNECTIONS, duration: seconds, headers, body }, (err, result) => (err ? reject(err) : resolve(result)));
  });
}

/** The plain server as its own process; resolves with its URL once it listens. */
async function startPlain(databaseUrl: string | null, dataDir: string): Promise<{ url: string; child: ChildProcess }> {
  const [command, ...args] = node('scripts/bench/plain-insert-server.ts', databaseUrl ?? '', dataDir);
  const child = spawn(command!, args, {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the plain server exited (${code})`)));
    child.stdout!.once('data', (d: Buffer) => resolve(d.toString().trim()));
  });
  return { url: `http://127.0.0.1:${port}`, child };
}

/** The service's group-commit counters (/metrics): notifications written and the transactions that wrote them. */
async function groupCommit(url: string): Promise<{ notifications: number; batches: number } | null> {
  const text = await fetch(`${url}/metrics`).then((r) => (r.ok ? r.text() : ''));
  const value = (name: string) => Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? NaN);
  const out = { notifications: value('notifications_written'), batches: value('notification_write_batches') };
  return Number.isNaN(out.notifications + out.batches) ? null : out;
}

/** CPU seconds (user + system) a process has used so far, from /proc (NaN where there is none). */
function cpuSeconds(pid: number | undefined): number {
  const { user, system } = cpuSplit(pid);
  return user + system;
}

/** CPU seconds a process has spent in its own code (user) and in the kernel for it (system). */
function cpuSplit(pid: number | undefined): { user: number; system: number } {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    // utime and stime, fields 14 and 15 of stat(5), in clock ticks (100 a second on Linux)
    return { user: Number(fields[11]) / 100, system: Number(fields[12]) / 100 };
  } catch {
    return { user: NaN, system: NaN };
  }
}

/**
 * What a commit costs on this disk now: µs per one-row transaction of SQLite (WAL, synchronous
 * FULL as the service opens it: one fdatasync a commit). Group commit saves this per notification.
 */
function commitCost(dir: string): number {
  const file = path.join(dir, 'probe.sqlite');
  const probe = new Database(file);
  try {
    probe.pragma('journal_mode = WAL');
    probe.pragma('synchronous = FULL');
    probe.exec('CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT)');
    const insert = probe.prepare('INSERT INTO t VALUES (?, ?)');
    const t = performance.now();
    for (let i = 0; i < 300; i++) insert.run(`${i}-${Math.random()}`, 'x');
    return ((performance.now() - t) / 300) * 1000;
  } finally {
    probe.close();
    for (const suffix of ['', '-wal', '-shm']) fs.rmSync(file + suffix, { force: true });
  }
}

/** PostgreSQL's backends serving `database` (a local server: their CPU is read from /proc), CPU seconds so far by pid. */
async function backendCpu(admin: knex.Knex | null, database: string | null): Promise<Map<number, number>> {
  if (!admin || !database) return new Map();
  const rows: { pid: number }[] = await admin('pg_stat_activity').where({ datname: database }).select('pid');
  return new Map(rows.map((r) => [r.pid, cpuSeconds(r.pid)]));
}

/** CPU seconds the backends used between two readings (one that appeared in between counts from zero). */
const backendDelta = (before: Map<number, number>, after: Map<number, number>) =>
  [...after].reduce((sum, [pid, t]) => sum + (Number.isNaN(t) ? 0 : t - (before.get(pid) ?? 0)), 0);

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-notify-'));
  const plainDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-plain-'));
  const db = await benchDatabase();
  const plainDb = await benchDatabase();
  const svc = await spawnService({
    dataDir,
    databaseUrl: db.url,
    env: { SERVICE_LOG_LEVEL: 'warn' },
    ...(PROFILE ? { command: node(path.join(ROOT, 'src/main.ts')) } : {}),
  });
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

    // the target's connection: latency from the notification's created_at (taken as its batch is written, just before the statement that commits it) to the client
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

    const commitsBefore = await groupCommit(svc.url);
    const probes = [commitCost(plainDir)];
    const rates = { service: [] as number[], plain: [] as number[] };
    // CPU of each server per persisted notification: on a saturated machine its inverse is the rate
    const cpu = { service: [] as number[], plain: [] as number[] };
    // the part of it spent in the kernel (system calls: sockets, the commits' writes and syncs)
    const kernel = { service: [] as number[], plain: [] as number[] };
    const pids = { service: svc.child.pid, plain: plain.child.pid };
    // on PostgreSQL, the CPU of each side's backends too (what a commit per row costs the server)
    const pgAdmin = db.url ? knex({ client: 'pg', connection: process.env.SERVICE_BENCH_DATABASE_URL, pool: { min: 0, max: 1 } }) : null;
    const databases = { service: db.url ? new URL(db.url).pathname.slice(1) : null, plain: plainDb.url ? new URL(plainDb.url).pathname.slice(1) : null };
    const serverCpu = { service: [] as number[], plain: [] as number[] };
    const post = { p50: [] as number[], p99: [] as number[], non2xx: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      for (const name of round % 2 ? (['plain', 'service'] as const) : (['service', 'plain'] as const)) {
        const side = sides[name];
        const before = await side.count();
        const cpuBefore = cpuSplit(pids[name]);
        const backendsBefore = await backendCpu(pgAdmin, databases[name]);
        const result = await load(side.url, json, body);
        const cpuAfter = cpuSplit(pids[name]);
        const backendsAfter = await backendCpu(pgAdmin, databases[name]);
        const after = await side.count();
        rates[name].push((after - before) / result.duration);
        cpu[name].push(((cpuAfter.user + cpuAfter.system - cpuBefore.user - cpuBefore.system) / (after - before)) * 1e6);
        kernel[name].push(((cpuAfter.system - cpuBefore.system) / (after - before)) * 1e6);
        serverCpu[name].push((backendDelta(backendsBefore, backendsAfter) / (after - before)) * 1e6);
        if (name === 'service') {
          post.p50.push(result.latency.p50);
          post.p99.push(result.latency.p99);
        }
        if (result.non2xx || result.errors) throw new Error(`${name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
      }
    }
    const commitsAfter = await groupCommit(svc.url);
    await pgAdmin?.destroy();
    probes.push(commitCost(plainDir));
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
    console.log(`a one-row SQLite commit on this disk (before / after the rounds): ${list(probes)} µs`);
    console.log(`${ROUNDS} rounds of ${SECONDS} s a side, ${CONNECTIONS} connections, alternating`);
    console.log(`plain server (one INSERT per request), persisted/s   median ${Math.round(median(rates.plain))}  (${list(rates.plain)})`);
    console.log(`service POST /api/notifications, persisted/s         median ${Math.round(median(rates.service))}  (${list(rates.service)})`);
    console.log(
      `service / plain                                       ${(median(rates.service) / median(rates.plain)).toFixed(2)}x of the medians; rounds ${list(ratios, 2)}, median ${median(ratios).toFixed(2)}x (goal >= 1.5x)`,
    );
    console.log(
      `CPU per persisted notification (median), its process  service ${Math.round(median(cpu.service))} µs, plain ${Math.round(median(cpu.plain))} µs (in the kernel: ${Math.round(median(kernel.service))} and ${Math.round(median(kernel.plain))} µs)`,
    );
    if (db.url) {
      console.log(
        `  and its PostgreSQL backends                         service ${Math.round(median(serverCpu.service))} µs, plain ${Math.round(median(serverCpu.plain))} µs`,
      );
    }
    if (commitsBefore && commitsAfter) {
      const batches = commitsAfter.batches - commitsBefore.batches;
      const written = commitsAfter.notifications - commitsBefore.notifications;
      console.log(
        `service group commit                                  ${written} notifications in ${batches} transactions, ${(written / batches).toFixed(1)} a transaction`,
      );
    }
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
