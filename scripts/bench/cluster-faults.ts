/**
 * Faults under load (a benchmark, not a test; test/cluster/faults.test.ts is the test at a
 * modest size): three instances as their own processes on one PostgreSQL (a throwaway cluster)
 * and one Redis, behind nginx running docs/deploy/nginx.conf's several-instance variant. N
 * WebSocket clients (the typed client, default backoff) connect through nginx; broadcasts are
 * POSTed through nginx at a steady rate (every tenth request a batch of two). The run goes
 * through phases: fault-free, Redis killed and started again, PostgreSQL down 5 s, one instance
 * SIGKILLed and started again, a rolling restart (each instance SIGTERM, exit, start), and
 * fault-free again. For each phase it prints the delivery p50 / p99 of the notifications sent in
 * it and the p99's ratio to the first fault-free phase; for each fault, how many clients lost
 * their connection, when the last was live again (from the fault's start) and when every client
 * held every notification acknowledged during the fault (from the fault's end); the answers by status; and
 * whether anything acknowledged was missing at the end.
 *
 *   npm run bench:faults [-- --clients 5000 --rate 20 --quiet 20 --settle 10]
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { adminAuth } from '../../test/support/service.js';
import { sleep, startCluster } from '../../test/cluster/harness.js';
import { Broadcaster, Clients } from '../../test/cluster/load.js';
import { arg } from './common.js';

const CLIENTS = arg('clients', 5000);
const RATE = arg('rate', 20);
const QUIET_S = arg('quiet', 20);
const SETTLE_S = arg('settle', 10);

interface Fault {
  phase: number;
  name: string;
  start: number;
  end: number;
  allBackMs: number | null;
  caughtUpMs: number | null;
}

/** Waits until every client holds every seq of `seqs` (ascending) or `until`; the time from `from` to then, or null. */
async function caughtUp(clients: Clients, seqs: number[], from: number, until: number): Promise<number | null> {
  const next = new Array<number>(clients.clients.length).fill(0);
  for (;;) {
    let behind = 0;
    for (let i = 0; i < next.length; i++) {
      while (next[i]! < seqs.length && clients.has(i, seqs[next[i]!]!)) next[i]!++;
      if (next[i]! < seqs.length) behind++;
    }
    if (!behind) return Date.now() - from;
    if (Date.now() > until) return null;
    await sleep(100);
  }
}

async function main() {
  const started = Date.now();
  // every broadcast of the run kept (the default keeps 1,000: a client away longer would resume truncated)
  const cluster = await startCluster({ instances: 3, clients: CLIENTS, env: { SERVICE_LOG_LEVEL: 'error', SERVICE_NOTIFICATION_MAX_PER_USER: '10000000' } });
  let clients: Clients | null = null;
  try {
    const origin = cluster.origin;
    const c = (clients = new Clients(`${origin.replace('http', 'ws')}/ws`, CLIENTS, { Authorization: adminAuth() }));
    await c.ready(120_000);
    console.error(`${CLIENTS} clients live after ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const caster = new Broadcaster(origin, adminAuth(), RATE, () => c.phase);
    const faults: Fault[] = [];
    const names = ['fault-free', 'Redis restart', 'PostgreSQL down 5 s', 'SIGKILL + start', 'rolling restart (SIGTERM)', 'fault-free again'];
    // connections the kernel dropped from a full accept queue, machine-wide, at each phase's start
    const overflows: number[] = [];
    const fault = async (phase: number, action: () => Promise<void>) => {
      c.phase = phase;
      overflows[phase] = listenOverflows();
      const f: Fault = { phase, name: names[phase]!, start: Date.now(), end: 0, allBackMs: null, caughtUpMs: null };
      console.error(`phase ${phase}: ${f.name}`);
      await action();
      f.end = Date.now();
      const until = f.end + SETTLE_S * 1000;
      const seqs = caster.answers.filter((a) => a.status === 202 && a.start >= f.start && a.start <= f.end).flatMap((a) => a.seqs);
      f.caughtUpMs = await caughtUp(
        c,
        seqs.sort((a, b) => a - b),
        f.end,
        until,
      );
      await sleep(Math.max(0, until - Date.now()));
      faults.push(f);
    };
    caster.start();
    overflows[0] = listenOverflows();
    await sleep(QUIET_S * 1000);
    await fault(1, async () => {
      await cluster.redis.kill();
      await sleep(1000);
      await cluster.redis.restart();
    });
    await fault(2, async () => {
      await cluster.pg.stop();
      await sleep(5000);
      await cluster.pg.start();
    });
    await fault(3, async () => {
      await cluster.instances[1]!.kill('SIGKILL');
      await cluster.instances[1]!.start();
    });
    // when each instance of the rolling restart got SIGTERM, stopped listening, was gone, and was ready again
    const rolling: { name: string; term: number; unlistened: number | null; exited: number; ready: number }[] = [];
    await fault(4, async () => {
      for (const inst of cluster.instances) {
        const term = Date.now();
        const exiting = inst.kill('SIGTERM');
        let gone = false;
        void exiting.then(() => (gone = true));
        const unlistened = await refusedFrom(inst.port, () => gone);
        const exit = await exiting;
        const exited = Date.now();
        if (exit.code !== 0) console.error(`${inst.name} exited with ${JSON.stringify(exit)}`);
        await inst.start();
        rolling.push({ name: inst.name, term, unlistened, exited, ready: Date.now() });
      }
    });
    c.phase = 5;
    overflows[5] = listenOverflows();
    const phase5 = Date.now();
    await sleep(QUIET_S * 1000);
    await caster.stop();
    const acked = caster.acked();
    // the end: every client live with everything, or no progress for 30 s (at most 5 minutes)
    const ended = Date.now();
    let missing = c.missing(acked);
    let progress = Date.now();
    let best = Infinity;
    while ((missing.length || c.notLive()) && Date.now() - progress < 30_000 && Date.now() - ended < 300_000) {
      await sleep(1000);
      missing = c.missing(acked);
      if (missing.length + c.notLive() < best) [best, progress] = [missing.length + c.notLive(), Date.now()];
    }
    const settledMs = Date.now() - ended;

    // the outages, each counted in the fault during whose phase it began
    for (const f of faults) {
      const next = faults.find((g) => g.phase === f.phase + 1)?.start ?? Infinity;
      const mine = c.outages.filter((o) => o.from >= f.start && o.from < next);
      if (mine.length) f.allBackMs = mine.every((o) => o.to !== null) ? Math.max(...mine.map((o) => o.to!)) - f.start : null;
      (f as Fault & { lost?: number }).lost = new Set(mine.map((o) => o.client)).size;
    }
    const base = c.latency[0]!;
    const cpus = os.cpus();
    console.log(
      `machine: ${cpus.length} x ${cpus[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, load average at the end ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}`,
    );
    console.log(`${CLIENTS} ws clients through nginx over 3 instances, ${RATE} broadcasts/s (${CLIENTS * RATE} frames/s), PostgreSQL, Redis`);
    console.log('phase                          deliveries   p50 ms   p99 ms   p99 / fault-free');
    for (let p = 0; p < names.length; p++) {
      const h = c.latency[p];
      console.log(
        `${names[p]!.padEnd(30)} ${String(h?.total ?? 0).padStart(9)} ${String(h?.pct(50) ?? '-').padStart(8)} ${String(h?.pct(99) ?? '-').padStart(8)}   ${h ? (h.pct(99) / base.pct(99)).toFixed(2) + 'x' : '-'}`,
      );
    }
    console.log('(a delivery counts in the phase its notification was sent in)');
    console.log('fault                          took     clients that lost the connection   all live again (from the start)   all caught up (from the end)');
    for (const f of faults) {
      const lost = (f as Fault & { lost?: number }).lost ?? 0;
      const s = (v: number | null, none: string) => (v === null ? none : `${(v / 1000).toFixed(1)} s`);
      console.log(
        `${f.name.padEnd(30)} ${s(f.end - f.start, '').padStart(6)} ${String(lost).padStart(12)} ${s(f.allBackMs, lost ? 'not yet' : '-').padStart(32)} ${s(f.caughtUpMs, `> ${SETTLE_S} s`).padStart(32)}`,
      );
    }
    // the answers by status, in the phase their request was sent in; then when each fault began,
    // and for each phase when its first answers other than 202 / 503 were asked and given (s
    // from the first send: a rolling restart's are not hidden behind a SIGKILL's)
    const t0 = caster.answers.reduce((m, a) => Math.min(m, a.start), Infinity);
    const at = (t: number) => ((t - t0) / 1000).toFixed(1);
    const sentIn = (p: number) => {
      const from = p === 0 ? 0 : (faults.find((f) => f.phase === p)?.start ?? phase5);
      const to = faults.find((f) => f.phase === p + 1)?.start ?? (p === 5 ? Infinity : phase5);
      return caster.answers.filter((x) => x.start >= from && x.start < to);
    };
    for (let p = 0; p < names.length; p++) {
      const byStatus = new Map<string, number>();
      for (const a of sentIn(p)) {
        const key = a.status ? String(a.status) : `failed (${a.error})`;
        byStatus.set(key, (byStatus.get(key) ?? 0) + 1);
      }
      console.log(`answers, ${names[p]}: ${[...byStatus].map(([k, n]) => `${k}: ${n}`).join(', ')}`);
    }
    overflows[6] = listenOverflows();
    console.log(
      `connections dropped from a full accept queue (the machine's TcpExtListenOverflows), by phase: ${names.map((n, p) => `${n} ${overflows[p + 1]! - overflows[p]!}`).join(', ')}`,
    );
    console.log(`acknowledged notifications: ${acked.length}`);
    console.log(`faults began at ${faults.map((f) => `${at(f.start)} s (${f.name})`).join(', ')}`);
    console.log(
      `rolling restart: ${rolling
        .map(
          (r) =>
            `${r.name} SIGTERM at ${at(r.term)} s, not listening at ${r.unlistened ? `${at(r.unlistened)} s` : '-'}, gone at ${at(r.exited)} s, ready at ${at(r.ready)} s`,
        )
        .join('; ')}`,
    );
    for (let p = 0; p < names.length; p++) {
      const other = sentIn(p).filter((x) => x.status !== 202 && x.status !== 503);
      if (other.length) console.log(`  ${names[p]}, the first ${Math.min(6, other.length)} of ${other.length} answers other than 202 / 503:`);
      for (const a of other.slice(0, 6)) console.log(`    ${a.status || 'failed'} ${a.kind}: sent at ${at(a.start)} s, answered at ${at(a.end)} s`);
    }
    // what nginx said about answers other than a refused connect (a 502 or 504 has its line here)
    const said = cluster.nginx
      .errors()
      .split('\n')
      .filter((l) => l && !/Connection refused|no live upstreams/.test(l));
    console.log(`nginx error log, other than refused connections: ${said.length} lines, by kind:`);
    // by what nginx said (a 502's line says whether the instance reset, closed or never answered)
    const kinds = new Map<string, number>();
    for (const l of said) {
      const kind = /\*\d+ (.*?)(, client:|$)/.exec(l)?.[1] ?? l;
      kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
    }
    for (const [kind, n] of [...kinds].sort((a, b) => b[1] - a[1])) console.log(`  ${String(n).padStart(5)} x ${kind.slice(0, 200)}`);
    // the lines about a request other than an upgrade (a POST's 502 has one), with the instance it went to
    const named = (l: string) => cluster.instances.reduce((line, i) => line.replace(`127.0.0.1:${i.port}/`, `${i.name}/`), l);
    const posts = said.filter((l) => /request: "(?!GET \/ws )/.test(l));
    if (posts.length) console.log(`  about requests other than upgrades (${posts.length}), the first ones:`);
    for (const l of posts.slice(0, 8))
      console.log(
        `  ${named(l)
          .replace(/, client: .*?(, request)/, '$1')
          .slice(0, 240)}`,
      );
    if (said.length) console.log('  the last ones:');
    for (const l of said.slice(-8)) console.log(`  ${l.replace(/, client: .*?(, request)/, '$1').slice(0, 240)}`);
    console.log(
      `at the end (${(settledMs / 1000).toFixed(1)} s after the last send): ${CLIENTS - c.notLive()} of ${CLIENTS} clients live; ${missing.length} clients miss an acknowledged notification; ${c.truncated.size} clients were told their resume was truncated; ${c.duplicates} seqs handed on twice`,
    );
  } finally {
    await clients?.close(2000);
    await cluster.destroy();
  }
}

/** The kernel's count of connections dropped because a listening socket's accept queue was full. */
function listenOverflows(): number {
  const [head, values] = fs
    .readFileSync('/proc/net/netstat', 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('TcpExt:'));
  const at = head!.split(' ').indexOf('ListenOverflows');
  return Number(values!.split(' ')[at]);
}

/** When a connection to the port is first refused (every 20 ms): the instance stopped listening; null once `gone()` holds first. */
async function refusedFrom(port: number, gone: () => boolean): Promise<number | null> {
  for (;;) {
    if (gone()) return null;
    const refused = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(false);
      });
      s.once('error', () => resolve(true));
    });
    if (refused) return Date.now();
    await sleep(20);
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
