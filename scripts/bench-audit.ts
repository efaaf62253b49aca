/**
 * What the audit trail costs the paths it records (not a test): the service in this process,
 * measured with the trail recording and with its batched recorder turned into a no-op, in
 * alternating rounds of the same run (this machine is noisy):
 *
 *   - a password login, one after another (each records auth.login, batched);
 *   - a denied request under load (each records request.denied, coalesced per actor and route).
 *
 * The figure is the ratio recording / not recording: 1.00x means the trail costs nothing
 * measurable on that path.
 *
 *   npm run bench:audit [-- --logins 60 --seconds 5 --rounds 2]
 *
 * SERVICE_BENCH_DATABASE_URL=postgres://… runs on PostgreSQL (a fresh database is made from it).
 */
import autocannon from 'autocannon';
import request from 'supertest';
import { startService, adminAuth, ADMIN } from '../test/support/service.js';
import { arg, pct, benchDatabase } from './bench/common.js';

const LOGINS = arg('logins', 60);
const SECONDS = arg('seconds', 5);
const ROUNDS = arg('rounds', 2);

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
    env: { SERVICE_LOG_LEVEL: 'warn', SERVICE_BCRYPT_COST: '10', SERVICE_LOGIN_ATTEMPTS_PER_MINUTE: '100000' },
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
    const results = { on: { login: [] as number[], rps: [] as number[] }, off: { login: [] as number[], rps: [] as number[] } };
    await logins(svc.url); // warm up: the hashing threads, the caches
    for (let round = 0; round < ROUNDS; round++) {
      for (const on of round % 2 ? [true, false] : [false, true]) {
        set(on);
        const side = on ? results.on : results.off;
        const ms = await logins(svc.url);
        side.login.push(pct(ms, 50), pct(ms, 99));
        const load = await denied(svc.url, key);
        if (load.non2xx === 0) throw new Error('the denied requests were not denied');
        side.rps.push(load.requests.average);
        await trail.flush();
      }
    }
    set(true);
    const avg = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const p50 = (xs: number[]) => avg(xs.filter((_, i) => i % 2 === 0));
    const p99 = (xs: number[]) => avg(xs.filter((_, i) => i % 2 === 1));
    const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
    console.log(`audit trail, ${db.url ? 'PostgreSQL' : 'SQLite'}, ${ROUNDS} rounds alternating (recording / not recording):`);
    console.log(
      `  login p50            ${ratio(p50(results.on.login), p50(results.off.login)).padStart(6)}  (${p50(results.on.login).toFixed(1)} vs ${p50(results.off.login).toFixed(1)} ms)`,
    );
    console.log(
      `  login p99            ${ratio(p99(results.on.login), p99(results.off.login)).padStart(6)}  (${p99(results.on.login).toFixed(1)} vs ${p99(results.off.login).toFixed(1)} ms)`,
    );
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
