import { expect } from 'chai';
import request from 'supertest';
import { startService, startPeer, adminAuth, basic, type TestService } from '../support/service.js';

/** Two instances on one database: what matters must not live in one process's memory. */
describe('two instances on one database', () => {
  let a: TestService;
  let b: TestService;
  before(async () => {
    a = await startService();
    b = await startPeer(a, { SERVICE_PERMISSION_CACHE_TTL_MS: '0' });
  });
  after(async () => {
    await b?.stop();
    await a?.destroy();
  });

  it('a password changed on one instance ends cached Basic verifications on the other', async () => {
    const u = (
      await request(a.url)
        .post('/api/users')
        .set('Authorization', adminAuth())
        .send({ username: 'twin', password: 'twin-password-1', groups: ['INT_VIEWER'] })
        .expect(201)
    ).body;
    await request(b.url).get('/api/me').set('Authorization', basic('twin', 'twin-password-1')).expect(200);
    await request(b.url).get('/api/me').set('Authorization', basic('twin', 'twin-password-1')).expect(200); // cached on b
    await request(a.url).post(`/api/users/${u.id}/password`).set('Authorization', adminAuth()).send({ new_password: 'twin-password-2' }).expect(204);
    await request(b.url).get('/api/me').set('Authorization', basic('twin', 'twin-password-1')).expect(401);
    await request(b.url).get('/api/me').set('Authorization', basic('twin', 'twin-password-2')).expect(200);
  });

  it('login failures counted on one instance lock the other', async () => {
    await request(a.url)
      .post('/api/users')
      .set('Authorization', adminAuth())
      .send({ username: 'shared', password: 'shared-password', groups: ['INT_VIEWER'] })
      .expect(201);
    for (let i = 0; i < 5; i++) await request(a.url).get('/api/me').set('Authorization', basic('shared', 'nope-nope')).expect(401);
    await request(b.url).get('/api/me').set('Authorization', basic('shared', 'shared-password')).expect(429);
  });

  it('a key revoked on one instance is refused by the other at once; a session token works on both', async () => {
    const key = (await request(a.url).post('/api/me/api-keys').set('Authorization', adminAuth()).send({ label: 'both' }).expect(201)).body;
    await request(b.url).get('/api/me').set('X-API-Key', key.token).expect(200);
    await request(a.url).delete(`/api/me/api-keys/${key.id}`).set('Authorization', adminAuth()).expect(204);
    await request(b.url).get('/api/me').set('X-API-Key', key.token).expect(401);
    const login = (await request(a.url).post('/api/auth/login').send({ username: 'admin', password: 'admin-test-password' }).expect(200)).body;
    await request(b.url).get('/api/me').set('Authorization', `Bearer ${login.token}`).expect(200);
  });

  it('a settings change on one instance rebuilds the chain on the other', async () => {
    const before = (await request(b.url).get('/api/auth/providers').expect(200)).body.providers.map((p: any) => p.id);
    expect(before).to.deep.equal(['local']);
    await request(a.url)
      .patch('/api/settings/auth')
      .set('Authorization', adminAuth())
      .send({ auth_providers: 'local,oidc', oidc_issuer: 'http://127.0.0.1:9/', oidc_client_id: 'svc', oidc_client_secret: 'not-so-secret' })
      .expect(200);
    expect(await b.service.auth.followAuthSettings()).to.equal(true);
    const after = (await request(b.url).get('/api/auth/providers').expect(200)).body.providers.map((p: any) => p.id);
    expect(after).to.deep.equal(['local', 'oidc']);
  });
});
