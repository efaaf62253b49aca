/**
 * What the audit trail costs the paths it records (not a test): the service in this process,
 * measured with the trail recording and with its batched recorder turned into a no-op, in
 * alternating rounds of the same run (this machine is noisy):
 *
 *   - a password login, one after another (each records auth.login, batched);
 *   - a denied request under load (each records request.denied, coalesced per actor and route).
 *
 * The figure is the ratio recording / not recording: 1.00x means the trail costs nothing
 * measurable on that path. The login percentiles are taken over every login of a side (all its
 * rounds together: a p99 needs more than one round's logins), beside each round's own p99.
 *
 * The password hash runs at bcrypt cost 4 (the test environment's; production refuses less than
 * 10): what the trail adds to a login is the same whatever the hash costs, and beside a 5 ms
 * login it shows where beside a 70 ms one (or, on a loaded machine, a hashing thread at nice 10
 * waiting seconds for a core) it would not. `--cost 10` measures production's.
 *
 *   npm run bench:audit [-- --logins 100 --seconds 3 --rounds 6 --cost 4]
 *
 * SERVICE_BENCH_DATABASE_URL=postgres://… runs on PostgreSQL (a fresh database is made from it).
 */
import os from 'node:os';
import autocannon from 'autocannon';
import request from 'supertest';
import { startService, adminAuth, ADMIN } from '../test/support/service.js';
import { arg, pct, benchDatabase } from './bench/common.js';

const LOGINS = arg('logins', 100);
const COST = arg('cost', 4);
const SECONDS = arg('seconds', 3);
const ROUNDS = arg('rounds', 6);

async function logins(url: string): Promise<number[]> {
  const ms: number[] = [];
  for (let i = 0; i < LOGINS; i++) {
    const t = performance.now();
    const res = await request(url).post('/api/auth/login').send({ username: ADMIN.username, password: ADMIN.password });
    if (res.status !== 200) throw new Error(`login answered ${res.status}`);
    ms.push(performance.now() - t);
  }
  return ms.sort((a, b) => a - b);
}

function denied(url: string, key: string): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon({ url: `${url}/api/users`, connections: 20, duration: SECONDS, headers: { 'x-api-key': key } }, (err, result) =>
      err ? reject(err) : resolve(result),
    );
  });
}

async function main(): Promise<void> {
  const db = await benchDatabase();
  const svc = await startService({
    databaseUrl: db.url || null,
    env: { SERVICE_LOG_LEVEL: 'warn', SERVICE_BCRYPT_COST: String(COST), SERVICE_LOGIN_ATTEMPTS_PER_MINUTE: '100000' },
  });
  try {
    await request(svc.url)
      .post('/api/users')
      .set('Authorization', adminAuth())
      .send({ username: 'viewer', password: 'viewer-password-1', groups: ['INT_VIEWER'] })
      .expect(201);
    const key = (
      await request(svc.url)
        .post('/api/me/api-keys')
        .set('Authorization', 'Basic ' + Buffer.from('viewer:viewer-password-1').toString('base64'))
        .send({ label: 'bench' })
        .expect(201)
    ).body.token as string;
    const trail = svc.service.iam.audit;
    const recording = trail.record.bind(trail);
    const set = (on: boolean) => {
      trail.record = on ? recording : () => undefined;
    };
    const side = () => ({ logins: [] as number[], p50: [] as number[], p99: [] as number[], rps: [] as number[], cpu: [] as number[] });
    // CPU of this process (the service, its hashing threads and the client) per login: what the
    // trail adds whatever else the machine runs, where the latency moves with the machine's load
    const cpuMs = () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1000;
    };
    const results = { on: side(), off: side() };
    await logins(svc.url); // warm up: the hashing threads, the caches
    for (let round = 0; round < ROUNDS; round++) {
      for (const on of round % 2 ? [true, false] : [false, true]) {
        set(on);
        const s = on ? results.on : results.off;
        const cpuBefore = cpuMs();
        const ms = await logins(svc.url);
        await trail.flush();
        s.cpu.push((cpuMs() - cpuBefore) / LOGINS);
        s.logins.push(...ms);
        s.p50.push(pct(ms, 50));
        s.p99.push(pct(ms, 99));
        const load = await denied(svc.url, key);
        if (load.non2xx === 0) throw new Error('the denied requests were not denied');
        s.rps.push(load.requests.average);
        await trail.flush();
      }
    }
    set(true);
    const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
    const median = (xs: number[]) => pct(sorted(xs), 50);
    const on = sorted(results.on.logins);
    const off = sorted(results.off.logins);
    const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
    const rounds = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(' / ');
    console.log(
      `machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, node ${process.version}, load ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')}, ${new Date().toISOString()}`,
    );
    console.log(
      `audit trail, ${db.url ? 'PostgreSQL' : 'SQLite'}, ${ROUNDS} rounds alternating of ${LOGINS} logins (bcrypt cost ${COST}) and ${SECONDS} s of denied requests a side (recording / not recording):`,
    );
    for (const p of [50, 90, 99]) {
      console.log(
        `  login p${p}            ${ratio(pct(on, p), pct(off, p)).padStart(6)}  (${pct(on, p).toFixed(1)} vs ${pct(off, p).toFixed(1)} ms, ${on.length} logins a side)`,
      );
    }
    console.log(`  login p50 of each round: recording ${rounds(results.on.p50)} ms, not ${rounds(results.off.p50)} ms`);
    console.log(`  login p99 of each round: recording ${rounds(results.on.p99)} ms, not ${rounds(results.off.p99)} ms`);
    console.log(
      `  CPU per login        ${ratio(median(results.on.cpu), median(results.off.cpu)).padStart(6)}  (${median(results.on.cpu).toFixed(2)} vs ${median(results.off.cpu).toFixed(2)} ms, median of the rounds; the trail's writes flushed before the count ends)`,
    );
    console.log(`  denied requests/s of each round: recording ${rounds(results.on.rps)}, not ${rounds(results.off.rps)}`);
    console.log(
      `  denied requests/s    ${ratio(avg(results.on.rps), avg(results.off.rps)).padStart(6)}  (${Math.round(avg(results.on.rps))} vs ${Math.round(avg(results.off.rps))} req/s)`,
    );
    const verified = await trail.verify();
    console.log(`  the chain after the run: ${verified.ok ? `verifies, ${verified.events} events` : `does not verify: ${verified.reason}`}`);
  } finally {
    await svc.destroy();
    await db.drop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
