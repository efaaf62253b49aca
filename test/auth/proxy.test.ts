import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import { startService, adminAuth, basic, ADMIN, type TestService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';
import { wsUrl } from '../gateway/helpers.js';

/** The status of a WebSocket upgrade (101 when it opened; the socket is closed again). */
function upgradeStatus(svc: TestService, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl(svc), { headers });
    ws.once('open', () => {
      ws.close();
      resolve(101);
    });
    ws.once('unexpected-response', (_req, res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    ws.once('error', reject);
  });
}

/** Behind a TLS-terminating reverse proxy: public URL https, plain HTTP to us. */
describe('behind a reverse proxy', () => {
  let svc: TestService;
  const logs = capturingLogger('info');
  before(async () => {
    svc = await startService({ logger: logs.logger, env: { SERVICE_PUBLIC_URL: 'https://svc.example.org', SERVICE_TRUST_PROXY: 'true' } });
  });
  after(async () => svc.destroy());

  it('sets Secure cookies on login although the hop to us is plain HTTP', async () => {
    const res = await request(svc.url)
      .post('/api/auth/login')
      .set('Origin', 'https://svc.example.org')
      .send({ username: ADMIN.username, password: ADMIN.password })
      .expect(200);
    const cookies = ([] as string[]).concat(res.headers['set-cookie'] ?? []);
    expect(cookies.length).to.be.greaterThan(0);
    for (const c of cookies)
      expect(c)
        .to.match(/;\s*secure/i)
        .and.match(/httponly/i);
    expect(
      cookies.some((c) => c.startsWith('svc.device=')),
      'the device cookie is one of them',
    ).to.equal(true);
  });

  it('counts login failures per real client (X-Forwarded-For), not per proxy', async () => {
    await request(svc.url)
      .post('/api/users')
      .set('Authorization', adminAuth())
      .send({ username: 'proxied', password: 'proxied-password', groups: ['INT_VIEWER'] })
      .expect(201);
    for (let i = 0; i < 5; i++) {
      await request(svc.url).get('/api/me').set('X-Forwarded-For', '203.0.113.7').set('Authorization', basic('proxied', 'wrong-one')).expect(401);
    }
    await request(svc.url).get('/api/me').set('X-Forwarded-For', '203.0.113.7').set('Authorization', basic('proxied', 'proxied-password')).expect(429);
    // another client behind the same proxy is not locked out
    await request(svc.url).get('/api/me').set('X-Forwarded-For', '198.51.100.9').set('Authorization', basic('proxied', 'proxied-password')).expect(200);
  });

  it('reads the address the proxy added, not one the client wrote in front of it', async () => {
    await request(svc.url)
      .post('/api/users')
      .set('Authorization', adminAuth())
      .send({ username: 'spoofer', password: 'spoofer-password', groups: ['INT_VIEWER'] })
      .expect(201);
    // a client rotating a forged first entry: the proxy appends the real address, which is what counts
    for (let i = 0; i < 5; i++) {
      await request(svc.url)
        .get('/api/me')
        .set('X-Forwarded-For', `10.9.9.${i}, 203.0.113.8`)
        .set('Authorization', basic('spoofer', `wrong-${i}`))
        .expect(401);
    }
    await request(svc.url)
      .get('/api/me')
      .set('X-Forwarded-For', '10.9.9.99, 203.0.113.8')
      .set('Authorization', basic('spoofer', 'spoofer-password'))
      .expect(429);
  });

  it('counts ws Basic failures per real client too, and the log line names that client, not the proxy', async () => {
    await request(svc.url)
      .post('/api/users')
      .set('Authorization', adminAuth())
      .send({ username: 'wsproxied', password: 'wsproxied-password', groups: ['INT_VIEWER'] })
      .expect(201);
    const from = (address: string, password: string) => upgradeStatus(svc, { 'X-Forwarded-For': address, Authorization: basic('wsproxied', password) });
    const before = logs.lines.length;
    for (let i = 0; i < 5; i++) expect(await from('203.0.113.21', `wrong-${i}`)).to.equal(401);
    // A is locked, over ws and over HTTP alike
    expect(await from('203.0.113.21', 'wsproxied-password')).to.equal(429);
    await request(svc.url).get('/api/me').set('X-Forwarded-For', '203.0.113.21').set('Authorization', basic('wsproxied', 'wsproxied-password')).expect(429);
    // B, behind the same proxy, is not
    expect(await from('198.51.100.22', 'wsproxied-password')).to.equal(101);
    const failures = logs.lines
      .slice(before)
      .map((l) => JSON.parse(l))
      .filter((l) => l.event === 'login_failed' && l.username === 'wsproxied');
    expect(failures.length).to.be.at.least(6);
    for (const f of failures) expect(f).to.include({ ip: '203.0.113.21', via: 'basic' });
  });
});
