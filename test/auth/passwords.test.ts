import { expect } from 'chai';
import request from 'supertest';
import fs from 'node:fs';
import { Passwords } from '../../src/iam/passwords.js';
import { HASH_THREAD_NICE } from '../../src/iam/hash-worker.js';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { WsClient } from '../gateway/helpers.js';
import { createUser, requestFrom } from './helpers.js';

/** bcrypt runs in a bounded worker pool: a login storm costs the other requests nothing, a full queue answers 503 at once. */
describe('password hashing off the event loop', function () {
  this.timeout(60_000);
  let svc: TestService;
  const USERS = 24;

  before(async () => {
    // production's bcrypt cost (the suite's default is the cheapest): logins really are in flight
    svc = await startService({ env: { SERVICE_PASSWORD_QUEUE: '8', SERVICE_BCRYPT_COST: '10' } });
    for (let i = 0; i < USERS; i++) await createUser(svc.url, { username: `storm${i}`, password: `storm-password-${i}` });
  });
  after(async () => svc?.destroy());

  it('hashes on worker threads of a lower priority than the event loop, and leaves the main thread as it was', async () => {
    // /proc/<pid>/task/<tid>/stat: the 19th field is the thread's nice value
    const niceOf = (tid: string) => Number(fs.readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]);
    const before = niceOf(String(process.pid));
    const passwords = new Passwords({ threads: 1 });
    try {
      await passwords.hash('a password for the pool');
      const nices = fs.readdirSync('/proc/self/task').map(niceOf);
      expect(nices).to.include(HASH_THREAD_NICE);
      expect(niceOf(String(process.pid))).to.equal(before);
    } finally {
      await passwords.close();
    }
    // inline hashing (the CLI) runs on the calling thread and leaves its priority alone
    await new Passwords({ threads: 0, cost: 4 }).hash('inline');
    expect(niceOf(String(process.pid))).to.equal(before);
  });

  it('while 20 logins are in flight, an API-key request and a ws push are answered within 200 ms', async () => {
    const key = (await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).send({ label: 'probe' }).expect(201)).body.token as string;
    const ws = await WsClient.connect(svc, { headers: { 'X-API-Key': key } });
    try {
      // the service as it runs: the key used before, the login path run once (its code compiled)
      await request(svc.url).get('/api/me/access').set('X-API-Key', key).expect(200);
      expect((await requestFrom(svc.url, '127.0.3.1', 'POST', '/api/auth/login', { username: 'storm0', password: 'storm-password-0' })).status).to.equal(200);
      // from 20 addresses, so neither the per-address limit nor the queue bound refuses them
      const storm = Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          requestFrom(svc.url, `127.0.4.${i + 1}`, 'POST', '/api/auth/login', { username: `storm${i}`, password: `storm-password-${i}` }),
        ),
      );
      await new Promise((r) => setTimeout(r, 30)); // the logins are queued and hashing now
      const t0 = Date.now();
      await request(svc.url).get('/api/me/access').set('X-API-Key', key).expect(200);
      const apiMs = Date.now() - t0;
      const t1 = Date.now();
      svc.service.bus.emit('system:notify', { title: 'during the storm', message: 'm', persist: false });
      await ws.next('system:notify', (f) => f.payload.title === 'during the storm');
      const pushMs = Date.now() - t1;
      const answers = await storm;
      expect(answers.filter((a) => a.status === 200).length + answers.filter((a) => a.status === 503).length).to.equal(20);
      expect(apiMs, `API-key request took ${apiMs} ms`).to.be.below(200);
      expect(pushMs, `push took ${pushMs} ms`).to.be.below(200);
    } finally {
      await ws.close();
    }
  });

  it('a full hashing queue answers 503 with Retry-After and the error body at once; no request hangs', async () => {
    const started = Date.now();
    const answers = await Promise.all(
      Array.from({ length: USERS }, (_, i) =>
        requestFrom(svc.url, `127.0.5.${i + 1}`, 'POST', '/api/auth/login', { username: `storm${i}`, password: `storm-password-${i}` }),
      ),
    );
    const busy = answers.filter((a) => a.status === 503);
    expect(busy.length, JSON.stringify(answers.map((a) => a.status))).to.be.greaterThan(0);
    for (const b of busy) {
      expect(b.body.error).to.deep.include({ code: 'unavailable' });
      expect(b.headers['retry-after']).to.equal('1');
    }
    expect(answers.every((a) => a.status === 200 || a.status === 503)).to.equal(true);
    expect(Date.now() - started).to.be.below(20_000);
    // and once the storm is over, everyone gets in
    const again = await requestFrom(svc.url, '127.0.5.200', 'POST', '/api/auth/login', { username: 'storm0', password: 'storm-password-0' });
    expect(again.status).to.equal(200);
  });
});
