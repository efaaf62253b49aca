/**
 * The request hot path against its fair limit (not a test). For each figure the service (its own
 * process) answers one request; that exact response (status, headers, body bytes) is captured and
 * replayed by a bare Koa + @koa/router app (scripts/bench/replay-server.ts, also its own process,
 * a fresh request id each time); autocannon (a third process) loads both in this run, and the
 * figure is the ratio. Then the login storm (API-key p99 at a steady rate with and without ten
 * clients logging in), a known device's login p99 while 40 addresses guess passwords against
 * the same login without them, and the cold start to /readyz 200.
 *
 *   npm run bench [-- --seconds 8 --connections 50 --rounds 2]
 *   npm run bench -- --device-storm-only     (the known device's figure alone)
 *   npm run bench -- --hot-path-only         (the API-key figure and the login p99 alone)
 *   npm run bench -- --cold-only [--cold-rounds 7]  (the cold start against its floor, the CLI's start)
 *   npm run bench -- --service DIR           (the service of another checkout's build, DIR/dist:
 *                                              scripts/bench-builds.sh runs two builds in turn)
 *
 * SERVICE_BENCH_DATABASE_URL=postgres://… runs the service on PostgreSQL.
 */
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { spawnService, type ServiceProcess } from '../test/support/process.js';
import { ADMIN, basic, testEnv } from '../test/support/service.js';
import type { Capture } from './bench/replay-server.js';
import { arg, benchDatabase, pct } from './bench/common.js';
import { DEVICE_COOKIE } from '../src/auth/device-cookie.js';

const run = promisify(execFile);
const SECONDS = arg('seconds', 8);
const CONNECTIONS = arg('connections', 50);
const ROUNDS = arg('rounds', 2);
const ROOT = path.resolve(import.meta.dirname, '..');
const AUTOCANNON = path.join(ROOT, 'node_modules/.bin/autocannon');
/**
 * The service and the bare baseline run on the first core, autocannon on the second (with
 * taskset, where there is one): which core a process lands on moved single runs by a tenth.
 */
const PIN = fs.existsSync('/usr/bin/taskset') && os.cpus().length >= 2 && !process.argv.includes('--no-pin');
const onCore = (core: number, command: string[]) => (PIN ? ['/usr/bin/taskset', '-c', String(core), ...command] : command);
/** the checkout whose service runs: this one, or --service DIR (its build) */
const SERVICE_ROOT = (() => {
  const i = process.argv.indexOf('--service');
  return i > 0 && process.argv[i + 1] ? path.resolve(process.argv[i + 1]!) : ROOT;
})();
/** the service as `npm start` runs it: the build when there is one */
const BUILD = fs.existsSync(path.join(SERVICE_ROOT, 'dist/server/main.js'))
  ? [process.execPath, path.join(SERVICE_ROOT, 'dist/server/main.js')]
  : [process.execPath, '--import', 'tsx', path.join(SERVICE_ROOT, 'src/main.ts')];
const SERVICE_COMMAND = onCore(0, BUILD);

interface Load {
  rps: number;
  p99: number;
  non2xx: number;
}

async function autocannon(url: string, headers: Record<string, string>, extra: string[] = [], seconds = SECONDS, pinned = true): Promise<Load> {
  const args = ['-j', '-d', String(seconds), '-c', String(CONNECTIONS), ...extra];
  for (const [k, v] of Object.entries(headers)) args.push('-H', `${k}=${v}`);
  const [command, ...rest] = pinned ? onCore(1, [AUTOCANNON, ...args, url]) : [AUTOCANNON, ...args, url];
  const { stdout } = await run(command!, rest, { encoding: 'utf8', maxBuffer: 64 << 20 });
  const out = JSON.parse(stdout);
  return { rps: out.requests.average, p99: out.latency.p99, non2xx: out.non2xx };
}

/** One request to the service, kept byte for byte (but its date and request id). */
async function capture(url: string, pathname: string, headers: Record<string, string>): Promise<Capture> {
  const res = await fetch(url + pathname, { headers });
  const keep: Record<string, string> = {};
  res.headers.forEach((v, k) => {
    if (!['date', 'x-request-id', 'connection', 'keep-alive', 'content-length', 'transfer-encoding'].includes(k)) keep[k] = v;
  });
  return { method: 'GET', path: pathname, status: res.status, headers: keep, body: Buffer.from(await res.arrayBuffer()).toString('base64') };
}

async function replayServer(c: Capture): Promise<{ url: string; stop(): void }> {
  const file = path.join(os.tmpdir(), `replay-${process.pid}-${Math.random().toString(36).slice(2)}.json`);
  fs.writeFileSync(file, JSON.stringify([c]));
  const [command, ...rest] = onCore(0, [process.execPath, '--import', 'tsx', 'scripts/bench/replay-server.ts', file]);
  const child = spawn(command!, rest, { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve) => child.stdout.once('data', (d) => resolve(String(d).trim())));
  return {
    url: `http://127.0.0.1:${port}`,
    stop() {
      child.kill();
      fs.rmSync(file, { force: true });
    },
  };
}

/** One login posted from a chosen loopback address (127.0.0.0/8), with a device cookie or none. */
function loginFrom(
  url: string,
  from: string,
  username: string,
  password: string,
  device: string | null,
): Promise<{ status: number; ms: number; device: string | null }> {
  const body = JSON.stringify({ username, password });
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${url}/api/auth/login`,
      {
        method: 'POST',
        localAddress: from,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...(device ? { cookie: `${DEVICE_COOKIE}=${device}` } : {}) },
      },
      (res) => {
        res.resume();
        res.on('end', () => {
          const set = ([] as string[]).concat(res.headers['set-cookie'] ?? []).find((c) => c.startsWith(`${DEVICE_COOKIE}=`));
          resolve({ status: res.statusCode ?? 0, ms: performance.now() - started, device: set ? set.slice(DEVICE_COOKIE.length + 1).split(';')[0]! : null });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * A known device's login p99 during a storm of wrong passwords from 40 loopback addresses (each
 * sends ten a second whether or not it was answered, up to eight at a time; new names mostly:
 * many times what the hashing threads do, so the common lane is full), against the same logins
 * with no storm, measured just before. An unknown client's logins beside it show what the storm
 * does to everyone else.
 */
async function deviceStorm(url: string): Promise<void> {
  const LOGINS = 60;
  const first = await loginFrom(url, '127.0.0.2', ADMIN.username, ADMIN.password, null);
  let device = first.device;
  if (first.status !== 200 || !device) throw new Error(`the first login answered ${first.status} without a device cookie`);
  const knownLogins = async () => {
    const out: Array<{ status: number; ms: number }> = [];
    for (let i = 0; i < LOGINS; i++) {
      const r = await loginFrom(url, '127.0.0.2', ADMIN.username, ADMIN.password, device);
      if (r.device) device = r.device;
      out.push(r);
    }
    return out;
  };
  const quiet = await knownLogins();
  const storming = { on: true, answers: 0, busy: 0, failed: 0 };
  const storm = Promise.all(
    Array.from({ length: 40 }, async (_, i) => {
      const inflight = new Set<Promise<void>>();
      for (let k = 0; storming.on; k++) {
        if (inflight.size < 8) {
          const sent: Promise<void> = loginFrom(url, `127.0.3.${i + 1}`, k % 4 ? `guesser-${i}-${k}` : ADMIN.username, `guess-${k}`, null)
            .then(
              (r) => {
                storming.answers++;
                if (r.status === 503) storming.busy++;
              },
              () => void storming.failed++,
            )
            .finally(() => inflight.delete(sent));
          inflight.add(sent);
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      await Promise.all(inflight);
    }),
  );
  await new Promise((resolve) => setTimeout(resolve, 500));
  // an unknown client with the right password, twice a second (its 503s count against it in the lockout, as anyone's)
  const unknown = (async () => {
    const out: number[] = [];
    while (storming.on) {
      const r = await loginFrom(url, '127.0.0.3', ADMIN.username, ADMIN.password, null);
      out.push(r.status);
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, 500 - r.ms)));
    }
    return out;
  })();
  const stormy = await knownLogins();
  storming.on = false;
  const [unknownStatuses] = await Promise.all([unknown, storm]);
  const p99 = (xs: Array<{ ms: number }>) =>
    pct(
      xs.map((x) => x.ms).sort((a, b) => a - b),
      99,
    );
  const ok = (xs: Array<{ status: number }>) => xs.filter((x) => x.status === 200).length;
  console.log(
    `${'known device login p99, 40-address storm'.padEnd(36)} ${((p99(stormy) / p99(quiet)).toFixed(2) + 'x').padStart(6)}  (${Math.round(p99(stormy))} vs ${Math.round(p99(quiet))} ms without; ${ok(stormy)}/${LOGINS} and ${ok(quiet)}/${LOGINS} logged in; ` +
      `the storm: ${storming.answers} answers, ${storming.busy} of them 503, ${storming.failed} connections failed; an unknown client meanwhile: ${[200, 429, 503].map((status) => `${unknownStatuses.filter((s) => s === status).length} x ${status}`).join(', ')})`,
  );
}

/**
 * The figures a change of the request path must keep: API-key requests against the bare Koa
 * replay of the same answer (ROUNDS times, alternating), and the p99 of 60 password logins one
 * after another (the login path: the attempt gate, bcrypt in the pool, the session, the events).
 */
async function hotPath(url: string, key: string): Promise<void> {
  const headers = { 'x-api-key': key };
  const captured = await capture(url, '/api/me/access', headers);
  const replay = await replayServer(captured);
  const bare: number[] = [];
  const ours: number[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const sides = [
        () => autocannon(replay.url + '/api/me/access', headers).then((l) => bare.push(l.rps)),
        () => autocannon(url + '/api/me/access', headers).then((l) => ours.push(l.rps)),
      ];
      for (const side of round % 2 ? sides.reverse() : sides) await side();
    }
  } finally {
    replay.stop();
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  console.log(`api-key vs bare koa: ${(mean(ours) / mean(bare)).toFixed(3)} (${Math.round(mean(ours))} vs ${Math.round(mean(bare))} req/s)`);
  const times: number[] = [];
  for (let i = 0; i < 60; i++) times.push((await loginFrom(url, '127.0.0.4', ADMIN.username, ADMIN.password, null)).ms);
  console.log(
    `login p99: ${pct(
      times.sort((a, b) => a - b),
      99,
    ).toFixed(1)} ms (p50 ${pct(times, 50).toFixed(1)} ms)`,
  );
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ratioText = (ours: number[], base: number[]) => `${(median(ours) / median(base)).toFixed(2)}x`;

/** Wall time of one process from spawn to exit, in ms (its output discarded). */
async function timed(command: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const started = performance.now();
  await run(command[0]!, command.slice(1), { cwd: ROOT, env, maxBuffer: 1 << 24 });
  return performance.now() - started;
}

/**
 * The cold start against its floor (scripts/bench/cold-floor.mjs: Koa, knex, the migrations'
 * tables and two bcrypt hashes at the same cost, then /readyz 200), each spawned to /readyz 200
 * on a fresh SQLite data dir, in alternation, ROUNDS_COLD times; then the CLI: `version` against
 * `node -e 0` in alternation, and `user list` on a seeded SQLite data dir. Medians.
 */
async function coldStart(): Promise<void> {
  const rounds = arg('cold-rounds', 7);
  const dist = path.join(SERVICE_ROOT, 'dist');
  const floorCommand = fs.existsSync(path.join(dist, 'migrations')) ? [process.execPath, path.join(ROOT, 'scripts/bench/cold-floor.mjs'), dist] : null;
  const startOnce = async (command: string[]) => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cold-'));
    try {
      const started = performance.now();
      const svc = await spawnService({ dataDir, databaseUrl: null, env: { SERVICE_LOG_LEVEL: 'warn' }, command, pollMs: 10 });
      const ms = performance.now() - started;
      await svc.kill('SIGTERM');
      return ms;
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  };
  const service: number[] = [];
  const floor: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const sides = [
      () => startOnce(BUILD).then((ms) => service.push(ms)),
      ...(floorCommand ? [() => startOnce(floorCommand).then((ms) => floor.push(ms))] : []),
    ];
    for (const side of round % 2 ? sides.reverse() : sides) await side();
  }
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  console.log(
    `${'cold start to /readyz 200 (SQLite)'.padEnd(36)} ${floor.length ? ratioText(service, floor).padStart(6) + ' the floor' : ''}  (${s(median(service))} vs ${floor.length ? s(median(floor)) : 'no floor without a build'}; ${rounds} rounds alternating, medians; best ${s(Math.min(...service))}; goal <= 2x the floor; ${BUILD.slice(1).join(' ')})`,
  );

  const cli = fs.existsSync(path.join(dist, 'server/cli.js'))
    ? [process.execPath, path.join(dist, 'server/cli.js')]
    : [process.execPath, '--import', 'tsx', path.join(SERVICE_ROOT, 'src/cli/main.ts')];
  const version: number[] = [];
  const bare: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const sides = [() => timed([...cli, 'version']).then((ms) => version.push(ms)), () => timed([process.execPath, '-e', '0']).then((ms) => bare.push(ms))];
    for (const side of round % 2 ? sides.reverse() : sides) await side();
  }
  console.log(
    `${'CLI version vs node -e 0'.padEnd(36)} ${ratioText(version, bare).padStart(6)}  (${median(version).toFixed(0)} vs ${median(bare).toFixed(0)} ms; goal <= 3x)`,
  );

  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cold-cli-'));
  try {
    const env = { ...process.env, ...testEnv(dataDir, null) };
    await timed([...cli, 'seed'], env);
    const list: number[] = [];
    for (let round = 0; round < rounds; round++) list.push(await timed([...cli, 'user', 'list'], env));
    console.log(
      `${'CLI user list (SQLite)'.padEnd(36)} ${s(median(list)).padStart(6)}  (best ${s(Math.min(...list))}; node -e 0 ${median(bare).toFixed(0)} ms; goal <= 1 s)`,
    );
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

async function main() {
  if (process.argv.includes('--cold-only')) {
    console.log(`machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, node ${process.version}, ${new Date().toISOString()}`);
    return coldStart();
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bench-'));
  const db = await benchDatabase();
  let svc: ServiceProcess | null = null;
  try {
    svc = await spawnService({
      dataDir,
      databaseUrl: db.url,
      env: { SERVICE_LOG_LEVEL: 'warn', SERVICE_LOGIN_ATTEMPTS_PER_MINUTE: '100000' },
      command: SERVICE_COMMAND,
    });
    const admin = basic(ADMIN.username, ADMIN.password);
    const key = (
      (await (
        await fetch(`${svc.url}/api/me/api-keys`, {
          method: 'POST',
          headers: { authorization: admin, 'content-type': 'application/json' },
          body: JSON.stringify({ label: 'bench' }),
        })
      ).json()) as { token: string }
    ).token;

    const figures: Array<{ label: string; path: string; headers: Record<string, string>; goal: number }> = [
      { label: 'API key GET /api/me/access', path: '/api/me/access', headers: { 'x-api-key': key }, goal: 0.7 },
      { label: 'repeated Basic GET /api/me/access', path: '/api/me/access', headers: { authorization: admin }, goal: 0.6 },
      { label: 'API key GET /api/me', path: '/api/me', headers: { 'x-api-key': key }, goal: 0.7 },
      { label: '/healthz', path: '/healthz', headers: {}, goal: 0.9 },
      { label: 'unauthenticated 401', path: '/api/me', headers: {}, goal: 0.8 },
    ];
    console.log(
      `machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, node ${process.version}, ${db.url ? 'PostgreSQL' : 'SQLite'}; autocannon -c ${CONNECTIONS} -d ${SECONDS}${PIN ? '; service and baseline on core 0, autocannon on core 1' : ''}`,
    );
    if (process.argv.includes('--hot-path-only')) {
      await hotPath(svc.url, key);
      return;
    }
    if (process.argv.includes('--device-storm-only')) {
      if (PIN) await run('/usr/bin/taskset', ['-a', '-p', '-c', `0-${os.cpus().length - 1}`, String(svc.child.pid)]);
      await deviceStorm(svc.url);
      return;
    }
    for (const f of figures) {
      const captured = await capture(svc.url, f.path, f.headers);
      const replay = await replayServer(captured);
      try {
        // each side ROUNDS times, in alternating order: which of two loads runs first (and on
        // which core a process landed) moves a single pair by a tenth or more on two cores
        const bare: number[] = [];
        const ours: number[] = [];
        for (let round = 0; round < ROUNDS; round++) {
          const sides = [
            () => autocannon(replay.url + f.path, f.headers).then((l) => bare.push(l.rps)),
            () => autocannon(svc!.url + f.path, f.headers).then((l) => ours.push(l.rps)),
          ];
          for (const side of round % 2 ? sides.reverse() : sides) await side();
        }
        const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
        const ratio = mean(ours) / mean(bare);
        const spread = ours.map((o, i) => o / bare[i]!).sort((a, b) => a - b);
        console.log(
          `${f.label.padEnd(36)} ${(ratio.toFixed(2) + 'x').padStart(6)}  (${Math.round(mean(ours))} vs ${Math.round(mean(bare))} req/s; rounds ${spread.map((r) => r.toFixed(2)).join(' ')}; goal >= ${f.goal.toFixed(2)}x)`,
        );
      } finally {
        replay.stop();
      }
    }

    // login storm: API-key p99 at a steady 1,000 req/s, alone and while ten clients log in. The
    // service gets both cores back first: keeping bcrypt off the event loop's core is the point
    if (PIN) await run('/usr/bin/taskset', ['-a', '-p', '-c', `0-${os.cpus().length - 1}`, String(svc.child.pid)]);
    const steady = ['-R', '1000'];
    const quiet = await autocannon(`${svc.url}/api/me/access`, { 'x-api-key': key }, steady, SECONDS, false);
    const storming = { on: true };
    const storm = Promise.all(
      Array.from({ length: 10 }, async () => {
        while (storming.on) {
          await fetch(`${svc!.url}/api/auth/login`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ username: ADMIN.username, password: ADMIN.password }),
          }).then((r) => r.arrayBuffer());
        }
      }),
    );
    const stormy = await autocannon(`${svc.url}/api/me/access`, { 'x-api-key': key }, steady, SECONDS, false);
    storming.on = false;
    await storm;
    console.log(
      `${'API-key p99 at 1,000 req/s, login storm'.padEnd(36)} ${((stormy.p99 / Math.max(1, quiet.p99)).toFixed(2) + 'x').padStart(6)}  (${stormy.p99} vs ${quiet.p99} ms without; goal <= 2x)`,
    );
    await deviceStorm(svc.url);

    await coldStart();
  } finally {
    await svc?.kill('SIGTERM');
    await db.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
