import http from 'node:http';
import { expect } from 'chai';
import request from 'supertest';
import { startService, adminAuth, basic, SYSTEM_KEY, type TestService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function makeUser(svc: TestService, username: string, groups: string[], password = 'user-password-1') {
  const res = await request(svc.url).post('/api/users').set('Authorization', adminAuth()).send({ username, password, groups }).expect(201);
  return { id: res.body.id as string, username, password, auth: basic(username, password) };
}

async function makeKey(svc: TestService, auth: string, body: Record<string, unknown> = { label: 'k' }) {
  const res = await request(svc.url).post('/api/me/api-keys').set('Authorization', auth).send(body).expect(201);
  return res.body as { id: string; token: string; prefix: string };
}

describe('credential methods', () => {
  describe('with SERVICE_SYSTEM_API_KEY set', () => {
    let svc: TestService;
    before(async () => {
      svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY, SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    });
    after(async () => svc.destroy());

    it('accepts the system key as X-API-Key and as Bearer, bypassing permission checks', async () => {
      const a = await request(svc.url).get('/api/me').set('X-API-Key', SYSTEM_KEY).expect(200);
      expect(a.body).to.include({ method: 'system_key', is_system: true, username: 'system' });
      const b = await request(svc.url).get('/api/me').set('Authorization', `Bearer ${SYSTEM_KEY}`).expect(200);
      expect(b.body.method).to.equal('system_key');
      await request(svc.url).get('/api/users').set('X-API-Key', SYSTEM_KEY).expect(200);
    });

    it('tries the system key first over both headers, then user keys: a user key beside it never shadows it', async () => {
      const u = await makeUser(svc, 'order-user', ['INT_VIEWER']);
      const key = await makeKey(svc, u.auth);
      const both = await request(svc.url).get('/api/me').set('X-API-Key', key.token).set('Authorization', `Bearer ${SYSTEM_KEY}`).expect(200);
      expect(both.body).to.include({ method: 'system_key', is_system: true });
      // again, with the user key's identity cached from a request of its own
      await request(svc.url).get('/api/me').set('X-API-Key', key.token).expect(200);
      const again = await request(svc.url).get('/api/me').set('X-API-Key', key.token).set('Authorization', `Bearer ${SYSTEM_KEY}`).expect(200);
      expect(again.body.method).to.equal('system_key');
      // two user keys: X-API-Key's comes first, as before
      const other = await makeKey(svc, adminAuth());
      const users = await request(svc.url).get('/api/me').set('X-API-Key', key.token).set('Authorization', `Bearer ${other.token}`).expect(200);
      expect(users.body).to.include({ method: 'api_key', username: 'order-user' });
    });

    it('an env-set system key is locked in the settings API (409)', async () => {
      const res = await request(svc.url)
        .put('/api/settings/system-api-key')
        .set('Authorization', adminAuth())
        .send({ key: 'x'.repeat(40) })
        .expect(409);
      expect(res.body.error.code).to.equal('conflict');
      await request(svc.url).delete('/api/settings/system-api-key').set('Authorization', adminAuth()).expect(409);
    });

    it('an invalid key falls through to no identity (401)', async () => {
      await request(svc.url)
        .get('/api/me')
        .set('X-API-Key', SYSTEM_KEY + 'x')
        .expect(401);
      await request(svc.url).get('/api/me').set('Authorization', 'Bearer svk_notarealkeyatallnotarealkey').expect(401);
    });
  });

  describe('with no system key configured', () => {
    let svc: TestService;
    before(async () => {
      svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: '   ', SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    });
    after(async () => svc.destroy());

    it('method 1 is disabled: no empty or implicit key is accepted', async () => {
      await request(svc.url).get('/api/me').set('X-API-Key', '').expect(401);
      await request(svc.url).get('/api/me').set('X-API-Key', '   ').expect(401);
      await request(svc.url).get('/api/me').set('Authorization', 'Bearer ').expect(401);
      await request(svc.url).get('/api/me').set('X-API-Key', SYSTEM_KEY).expect(401);
      const s = await request(svc.url).get('/api/settings/system-api-key').set('Authorization', adminAuth()).expect(200);
      expect(s.body).to.deep.equal({ configured: false, locked: false });
    });

    it('takes the key from the secrets store, replaced and cleared at run time without restart', async () => {
      const k1 = 'first-system-key-aaaaaaaaaaaaaaaaaaaaaaaaaaaa';
      const k2 = 'second-system-key-bbbbbbbbbbbbbbbbbbbbbbbbbbbb';
      const bad = await request(svc.url).put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: 'short' }).expect(400);
      expect(bad.body.error.details[0].field).to.equal('key');
      // a refused secret is never quoted back (an error body is shown and logged)
      const secretLike = 'a-secret-that-must-not-come-back 0123456789';
      const spaced = await request(svc.url).put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: secretLike }).expect(400);
      expect(JSON.stringify(spaced.body)).not.to.include('must-not-come-back');
      expect(spaced.body.error.details).to.deep.equal([{ field: 'key', message: 'must not contain whitespace' }]);
      const webhook = await request(svc.url).put('/api/settings/webhook-secret').set('Authorization', adminAuth()).send({ secret: secretLike }).expect(400);
      expect(JSON.stringify(webhook.body)).not.to.include('must-not-come-back');
      await request(svc.url).put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: k1 }).expect(204);
      expect((await request(svc.url).get('/api/me').set('X-API-Key', k1).expect(200)).body.method).to.equal('system_key');
      await request(svc.url).put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: k2 }).expect(204);
      await request(svc.url).get('/api/me').set('X-API-Key', k1).expect(401);
      await request(svc.url).get('/api/me').set('X-API-Key', k2).expect(200);
      // stored encrypted, never in clear
      const rows = await svc.service.db('secrets').select('ciphertext');
      expect(JSON.stringify(rows)).not.to.contain(k2);
      await request(svc.url).delete('/api/settings/system-api-key').set('Authorization', adminAuth()).expect(204);
      await request(svc.url).get('/api/me').set('X-API-Key', k2).expect(401);
    });

    it('a system key that is also a user key resolves as the system', async () => {
      const key = await makeKey(svc, adminAuth());
      expect((await request(svc.url).get('/api/me').set('X-API-Key', key.token).expect(200)).body.method).to.equal('api_key');
      await request(svc.url).put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: key.token }).expect(204);
      expect((await request(svc.url).get('/api/me').set('X-API-Key', key.token).expect(200)).body.method).to.equal('system_key');
      await request(svc.url).delete('/api/settings/system-api-key').set('Authorization', adminAuth()).expect(204);
    });
  });

  describe('per-user keys, Basic and guards', () => {
    let svc: TestService;
    before(async () => {
      svc = await startService({ env: { SERVICE_PERMISSION_CACHE_TTL_MS: '60000' } });
    });
    after(async () => svc.destroy());

    it('a per-user key carries the owner permissions, is shown once and listed without the secret', async () => {
      const u = await makeUser(svc, 'keyowner', ['INT_USER']);
      const key = await makeKey(svc, u.auth, { label: 'ci' });
      expect(key.token).to.match(/^svk_[A-Za-z0-9_-]{43}$/);
      const me = await request(svc.url).get('/api/me').set('Authorization', `Bearer ${key.token}`).expect(200);
      expect(me.body).to.include({ method: 'api_key', username: 'keyowner', is_system: false });
      const access = await request(svc.url).get('/api/me/access').set('X-API-Key', key.token).expect(200);
      expect(access.body.permissions).to.include.members(['api:read', 'api:write', 'feature:dashboard.view']);
      const list = await request(svc.url).get('/api/me/api-keys').set('Authorization', u.auth).expect(200);
      expect(JSON.stringify(list.body)).not.to.contain(key.token);
      const row = list.body.keys.find((k: any) => k.id === key.id);
      expect(row).to.include({ label: 'ci', prefix: key.prefix, kind: 'key' });
      // stored as SHA-256 only
      const stored = await svc.service.db('api_keys').where({ id: key.id }).first();
      expect(JSON.stringify(stored)).not.to.contain(key.token);
      expect(stored.token_hash).to.match(/^[0-9a-f]{64}$/);
    });

    it("an administrator issues a key for another user: the owner's, shown once, audited; never for an account it may not take over", async () => {
      const u = await makeUser(svc, 'keyfor', ['INT_USER']);
      const issued = await request(svc.url)
        .post(`/api/users/${u.id}/api-keys`)
        .set('Authorization', adminAuth())
        .send({ label: 'deploy job', scopes: ['api:read'] })
        .expect(201);
      expect(issued.body).to.include({ label: 'deploy job', kind: 'key' });
      expect(issued.body.scopes).to.deep.equal(['api:read']);
      const me = await request(svc.url).get('/api/me').set('X-API-Key', issued.body.token).expect(200);
      expect(me.body).to.include({ method: 'api_key', username: 'keyfor' });
      // the owner sees it among their own, without the token
      const mine = await request(svc.url).get('/api/me/api-keys').set('Authorization', u.auth).expect(200);
      expect(mine.body.keys.map((k: { id: string }) => k.id)).to.include(issued.body.id);
      expect(JSON.stringify(mine.body)).not.to.contain(issued.body.token);
      await svc.service.iam.audit.flush();
      const event = await svc.service.db('audit_events').where({ action: 'key.issued', target_id: issued.body.id }).first();
      expect(event).to.include({ outcome: 'success', actor_username: 'admin', target_name: 'deploy job' });
      expect(JSON.parse(event.details)).to.include({ owner: 'keyfor', owner_id: u.id });

      // the owner's permissions bound the scopes; the body is validated as the owner's own would be
      const beyond = await request(svc.url)
        .post(`/api/users/${u.id}/api-keys`)
        .set('Authorization', adminAuth())
        .send({ label: 'x', scopes: ['feature:admin.users'] })
        .expect(400);
      expect(beyond.body.error.details[0]).to.include({ field: 'scopes' });
      const bad = await request(svc.url).post(`/api/users/${u.id}/api-keys`).set('Authorization', adminAuth()).send({ scopes: 'api:read' }).expect(400);
      expect(bad.body.error.details.map((d: { field: string }) => d.field)).to.include.members(['label', 'scopes']);
      await request(svc.url)
        .post('/api/users/00000000-0000-4000-8000-000000000000/api-keys')
        .set('Authorization', adminAuth())
        .send({ label: 'x' })
        .expect(404);
      // a plain administrator (not a superadmin) may not hand out the bot account; a user may not use this path for anyone
      const bot = (await request(svc.url).get('/api/users').query({ username: 'bot' }).set('Authorization', adminAuth()).expect(200)).body.users[0];
      const refused = await request(svc.url).post(`/api/users/${bot.id}/api-keys`).set('Authorization', adminAuth()).send({ label: 'x' }).expect(403);
      expect(refused.body.error.message).to.match(/only a superadmin/);
      await request(svc.url).post(`/api/users/${u.id}/api-keys`).set('Authorization', u.auth).send({ label: 'x' }).expect(403);
      expect((await request(svc.url).get(`/api/users/${bot.id}/api-keys`).set('Authorization', adminAuth()).expect(200)).body.keys).to.deep.equal([]);
    });

    it("a key issued for another account stands alone: the administrator's key ending ends it not; a key scoped to reads issues none of its own account by this path either", async () => {
      const u = await makeUser(svc, 'standalone', ['INT_USER']);
      const admin = await request(svc.url).get('/api/me').set('Authorization', adminAuth()).expect(200);
      const hour = new Date(Date.now() + 3_600_000).toISOString();
      const adminKey = await makeKey(svc, adminAuth(), { label: 'short', expires_at: hour });
      const issued = await request(svc.url).post(`/api/users/${u.id}/api-keys`).set('X-API-Key', adminKey.token).send({ label: 'long' }).expect(201);
      // not capped by the administrator's key, not ended with it
      expect(issued.body.expires_at).to.equal(null);
      await request(svc.url).delete(`/api/me/api-keys/${adminKey.id}`).set('Authorization', adminAuth()).expect(204);
      expect((await request(svc.url).get('/api/me').set('X-API-Key', issued.body.token).expect(200)).body.username).to.equal('standalone');

      // a key scoped to reads (here with the right to administer users) asks for a key of its own account
      const reader = await makeKey(svc, adminAuth(), { label: 'reader', scopes: ['feature:admin.users'] });
      const refused = await request(svc.url)
        .post(`/api/users/${admin.body.id}/api-keys`)
        .set('X-API-Key', reader.token)
        .send({ label: 'x', scopes: ['feature:admin.users'] })
        .expect(403);
      expect(refused.body.error.message).to.match(/scoped to reads/);
      await request(svc.url)
        .post('/api/me/api-keys')
        .set('X-API-Key', reader.token)
        .send({ label: 'x', scopes: ['feature:admin.users'] })
        .expect(403);
    });

    it('a revoked key, an expired key and a disabled owner give no identity', async () => {
      const u = await makeUser(svc, 'revoker', ['INT_USER']);
      const key = await makeKey(svc, u.auth);
      await request(svc.url).delete(`/api/me/api-keys/${key.id}`).set('Authorization', u.auth).expect(204);
      await request(svc.url).get('/api/me').set('X-API-Key', key.token).expect(401);
      await request(svc.url).delete(`/api/me/api-keys/${key.id}`).set('Authorization', u.auth).expect(404);

      const soon = await makeKey(svc, u.auth, { label: 'short', expires_at: new Date(Date.now() + 1200).toISOString() });
      await request(svc.url).get('/api/me').set('X-API-Key', soon.token).expect(200);
      await sleep(1400);
      await request(svc.url).get('/api/me').set('X-API-Key', soon.token).expect(401);
      const past = await request(svc.url)
        .post('/api/me/api-keys')
        .set('Authorization', u.auth)
        .send({ label: 'old', expires_at: '2001-01-01T00:00:00Z' })
        .expect(400);
      expect(past.body.error.details[0].field).to.equal('expires_at');

      const live = await makeKey(svc, u.auth);
      await request(svc.url).patch(`/api/users/${u.id}`).set('Authorization', adminAuth()).send({ disabled: true }).expect(200);
      await request(svc.url).get('/api/me').set('X-API-Key', live.token).expect(401);
      await request(svc.url).get('/api/me').set('Authorization', u.auth).expect(401);
    });

    it("a key scoped to reads changes nothing of its owner's either; it may listen (a ws ticket) and revoke itself", async () => {
      const key = await makeKey(svc, adminAuth(), { label: 'reader', scopes: ['api:read'] });
      const writer = await makeKey(svc, adminAuth(), { label: 'writer', scopes: ['api:read', 'api:write'] });
      await request(svc.url)
        .post('/api/notifications')
        .set('Authorization', adminAuth())
        .send({ title: 'for the reader', message: 'm', user: 'admin' })
        .expect(202);
      const mine = (await request(svc.url).get('/api/notifications').set('X-API-Key', key.token).expect(200)).body.notifications;
      const note = mine.find((n: any) => n.title === 'for the reader');
      expect(note, 'a reader reads').to.be.an('object');
      const changes: Array<[string, string, Record<string, unknown>?]> = [
        ['post', `/api/notifications/${note.id}/read`],
        ['post', '/api/notifications/read-all'],
        ['delete', `/api/notifications/${note.id}`],
        ['post', '/api/me/api-keys', { label: 'narrower', scopes: ['api:read'] }],
        ['post', '/api/me/mfa/totp'],
      ];
      for (const [method, url, body] of changes) {
        const res = await (request(svc.url) as any)
          [method](url)
          .set('X-API-Key', key.token)
          .send(body ?? {});
        expect(res.status, `${method} ${url}: ${JSON.stringify(res.body)}`).to.equal(403);
        expect(res.body.error).to.include({ code: 'forbidden', message: 'this key is scoped to reads: a change needs a key whose scopes include api:write' });
      }
      // nothing changed: the notification is there, unread
      const still = (await request(svc.url).get('/api/notifications').set('X-API-Key', key.token).expect(200)).body.notifications;
      expect(still.find((n: any) => n.id === note.id)).to.include({ read: false });
      // a key that may write does, on its owner's things
      await request(svc.url).post(`/api/notifications/${note.id}/read`).set('X-API-Key', writer.token).expect(204);
      // listening and giving up access stay open to the reader
      const ticket = await request(svc.url).post('/api/ws/ticket').set('X-API-Key', key.token).expect(200);
      expect(ticket.body.ticket).to.be.a('string');
      await request(svc.url).delete(`/api/me/api-keys/${key.id}`).set('X-API-Key', key.token).expect(204);
      await request(svc.url).get('/api/me').set('X-API-Key', key.token).expect(401);
    });

    it('key_scopes limit a key: 403 naming the permission outside the scope', async () => {
      const key = await makeKey(svc, adminAuth(), { label: 'read-only', scopes: ['api:read'] });
      await request(svc.url).get('/api/me').set('X-API-Key', key.token).expect(200);
      const res = await request(svc.url).get('/api/users').set('X-API-Key', key.token).expect(403);
      expect(res.body.error).to.include({ code: 'forbidden' });
      expect(res.body.error.message).to.contain('feature:admin.users');
      const access = await request(svc.url).get('/api/me/access').set('X-API-Key', key.token).expect(200);
      expect(access.body.permissions).to.deep.equal(['api:read']);
      // a scoped key cannot mint a broader key (one that may write, to be let ask at all)
      const writer = await makeKey(svc, adminAuth(), { label: 'read-write', scopes: ['api:read', 'api:write'] });
      const broader = await request(svc.url).post('/api/me/api-keys').set('X-API-Key', writer.token).send({ label: 'x' }).expect(400);
      expect(broader.body.error.details[0].field).to.equal('scopes');
      const unknown = await request(svc.url)
        .post('/api/me/api-keys')
        .set('Authorization', adminAuth())
        .send({ label: 'x', scopes: ['feature:nope'] })
        .expect(400);
      expect(unknown.body.error.details).to.deep.equal([{ field: 'scopes', message: 'unknown permission feature:nope' }]);
      // nor manage the owner's other credentials or password
      const other = await makeKey(svc, adminAuth(), { label: 'other' });
      await request(svc.url).delete(`/api/me/api-keys/${other.id}`).set('X-API-Key', key.token).expect(403);
      const me = (await request(svc.url).get('/api/me').set('X-API-Key', key.token).expect(200)).body;
      await request(svc.url)
        .post(`/api/users/${me.id}/password`)
        .set('X-API-Key', key.token)
        .send({ new_password: 'x'.repeat(12), current_password: 'admin-test-password' })
        .expect(403);
      await request(svc.url).delete(`/api/me/api-keys/${key.id}`).set('X-API-Key', key.token).expect(204);
      await request(svc.url).get('/api/me').set('X-API-Key', key.token).expect(401);
    });

    it('HTTP Basic validates against local IAM; malformed headers are 401, never 500', async () => {
      const me = await request(svc.url).get('/api/me').set('Authorization', adminAuth()).expect(200);
      expect(me.body.method).to.equal('basic');
      for (const header of [
        'Basic !!!not-base64!!!',
        'Basic ' + Buffer.from('no-colon-here').toString('base64'),
        'Basic ' + Buffer.from(':only-password').toString('base64'),
        'Basic',
        'Basic ' + 'A'.repeat(10 * 1024),
        'Bearer ' + 'A'.repeat(10 * 1024),
        'Digest username="x"',
      ]) {
        const res = await request(svc.url).get('/api/me').set('Authorization', header);
        expect(res.status, header.slice(0, 30)).to.equal(401);
        expect(res.body.error.code).to.equal('unauthorized');
      }
      const big = await request(svc.url)
        .get('/api/me')
        .set('X-API-Key', 'k'.repeat(10 * 1024));
      expect(big.status).to.equal(401);
    });

    it('five Basic failures per user and IP lock further attempts with 429 and Retry-After', async () => {
      const u = await makeUser(svc, 'lockme', ['INT_VIEWER']);
      for (let i = 0; i < 5; i++) await request(svc.url).get('/api/me').set('Authorization', basic('lockme', 'wrong-password')).expect(401);
      const locked = await request(svc.url).get('/api/me').set('Authorization', u.auth).expect(429);
      expect(locked.body.error.code).to.equal('rate_limited');
      expect(Number(locked.headers['retry-after'])).to.be.within(1, 60);
      // counted in the database, so every instance sees it
      expect(await svc.service.db('login_failures').where({ username: 'lockme' }).count({ n: '*' }).first()).to.satisfy((r: any) => Number(r.n) >= 5);
    });

    it('a parallel burst of guesses cannot pass the lockout before failures land', async () => {
      await makeUser(svc, 'burst', ['INT_VIEWER']);
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          request(svc.url)
            .get('/api/me')
            .set('Authorization', basic('burst', `wrong-password-${i}`)),
        ),
      );
      const statuses = results.map((r) => r.status);
      expect(statuses.filter((s) => s === 401).length).to.be.at.most(5);
      expect(statuses.filter((s) => s === 429).length).to.be.at.least(7);
      expect(statuses.every((s) => s === 401 || s === 429)).to.equal(true);
    });

    it('parallel requests with the same credentials share one check (one guess, one hash)', async () => {
      const u = await makeUser(svc, 'twelve', ['INT_VIEWER']);
      // twelve connections opened first, then the twelve requests written at once: they arrive
      // together however slow the machine is (new connections would be spread over its hiccups)
      const agent = new http.Agent({ keepAlive: true, maxSockets: 12 });
      const get = (path: string, headers: Record<string, string> = {}) =>
        new Promise<number>((resolve, reject) =>
          http
            .get(`${svc.url}${path}`, { agent, headers }, (res) => {
              res.resume();
              res.on('end', () => resolve(res.statusCode!));
            })
            .on('error', reject),
        );
      try {
        await Promise.all(Array.from({ length: 12 }, () => get('/healthz')));
        const wrong = await Promise.all(Array.from({ length: 12 }, () => get('/api/me', { authorization: basic('twelve', 'the-same-wrong-one') })));
        expect(wrong).to.deep.equal(Array(12).fill(401));
      } finally {
        agent.destroy();
      }
      // one failure counted, not twelve: the right password still gets in
      await request(svc.url).get('/api/me').set('Authorization', u.auth).expect(200);
      const rows = await svc.service.db('login_failures').where({ username: 'twelve' }).count({ n: '*' }).first();
      expect(Number((rows as { n: number }).n)).to.equal(0); // the success cleared the one it counted
    });

    it('refuses cross-site writes carried by browser-cached Basic credentials, and form bodies', async () => {
      const res = await request(svc.url)
        .post('/api/me/api-keys')
        .set('Authorization', adminAuth())
        .set('Origin', 'https://evil.example')
        .send({ label: 'csrf' })
        .expect(403);
      expect(res.body.error).to.deep.include({ code: 'forbidden', details: { reason: 'cross_origin' } });
      await request(svc.url)
        .post('/api/me/api-keys')
        .set('Authorization', adminAuth())
        .set('Origin', 'http://localhost:8080')
        .send({ label: 'same-site' })
        .expect(201);
      // a read stays fine cross-origin, and a non-browser client sends no Origin at all
      await request(svc.url).get('/api/me').set('Authorization', adminAuth()).set('Origin', 'https://evil.example').expect(200);
      const form = await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).type('form').send('label=from-a-form').expect(415);
      expect(form.body.error.code).to.equal('unsupported_media_type');
    });

    it('NUL characters are a 400 naming the field, on every dialect', async () => {
      const res = await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).send({ label: 'a\u0000b' }).expect(400);
      expect(res.body.error.details[0]).to.deep.equal({ field: 'label', message: 'must not contain NUL characters' });
      await request(svc.url).get('/api/me').set('Authorization', basic('ad\u0000min', 'x')).expect(401);
      const login = await request(svc.url).post('/api/auth/login').send({ username: 'ad\u0000min', password: 'x' }).expect(400);
      expect(login.body.error.details[0].field).to.equal('username');
    });

    it('a password change drops cached Basic verifications at once', async () => {
      const u = await makeUser(svc, 'rotator', ['INT_VIEWER']);
      await request(svc.url).get('/api/me').set('Authorization', u.auth).expect(200);
      await request(svc.url).get('/api/me').set('Authorization', u.auth).expect(200); // cached
      await request(svc.url)
        .post(`/api/users/${u.id}/password`)
        .set('Authorization', u.auth)
        .send({ new_password: 'brand-new-password', current_password: u.password })
        .expect(204);
      await request(svc.url).get('/api/me').set('Authorization', u.auth).expect(401);
      await request(svc.url).get('/api/me').set('Authorization', basic('rotator', 'brand-new-password')).expect(200);
    });

    it('changing your own password needs the current one', async () => {
      const u = await makeUser(svc, 'selfchange', ['INT_VIEWER']);
      const missing = await request(svc.url)
        .post(`/api/users/${u.id}/password`)
        .set('Authorization', u.auth)
        .send({ new_password: 'another-password' })
        .expect(400);
      expect(missing.body.error.details[0].field).to.equal('current_password');
      await request(svc.url)
        .post(`/api/users/${u.id}/password`)
        .set('Authorization', u.auth)
        .send({ new_password: 'another-password', current_password: 'wrong-one' })
        .expect(400);
      const other = await makeUser(svc, 'other', ['INT_VIEWER']);
      await request(svc.url).post(`/api/users/${other.id}/password`).set('Authorization', u.auth).send({ new_password: 'another-password' }).expect(403);
    });

    it('guards: 401 without identity, 403 naming the permission', async () => {
      const viewer = await makeUser(svc, 'viewer1', ['INT_VIEWER']);
      const unauth = await request(svc.url).get('/api/users').expect(401);
      expect(unauth.body).to.deep.equal({ error: { code: 'unauthorized', message: 'authentication required' } });
      // a credential that did not sign in is named by its kind, never by why it failed
      const wrongPassword = await request(svc.url).get('/api/users').set('Authorization', basic('viewer1', 'not-the-password')).expect(401);
      const noSuchUser = await request(svc.url).get('/api/users').set('Authorization', basic('nobody-here', 'not-the-password')).expect(401);
      for (const res of [wrongPassword, noSuchUser]) expect(res.body.error).to.deep.equal({ code: 'unauthorized', message: 'invalid username or password' });
      for (const headers of [{ 'X-API-Key': 'svk_not-a-key' }, { Authorization: 'Bearer not-a-token' }]) {
        const res = await request(svc.url).get('/api/users').set(headers).expect(401);
        expect(res.body.error).to.deep.equal({ code: 'unauthorized', message: 'the API key or token is not valid: unknown, revoked or expired' });
        expect(res.headers['www-authenticate']).to.equal('Bearer, Basic realm="service"');
      }
      const res = await request(svc.url).get('/api/users').set('Authorization', viewer.auth).expect(403);
      expect(res.body.error).to.deep.equal({
        code: 'forbidden',
        message: 'missing permission feature:admin.users',
        details: { permission: 'feature:admin.users' },
      });
    });

    it('membership changes are visible to the very next request despite the cache', async () => {
      const u = await makeUser(svc, 'promoted', ['INT_VIEWER']);
      await request(svc.url).get('/api/groups').set('Authorization', u.auth).expect(403);
      await request(svc.url)
        .patch(`/api/users/${u.id}`)
        .set('Authorization', adminAuth())
        .send({ groups: ['INT_VIEWER', 'INT_ADMIN'] })
        .expect(200);
      await request(svc.url).get('/api/groups').set('Authorization', u.auth).expect(200);
      // a group's permission edit and a group's deletion invalidate too
      await request(svc.url)
        .post('/api/groups')
        .set('Authorization', adminAuth())
        .send({ name: 'auditors', permissions: ['feature:admin.users'] })
        .expect(201);
      const a = await makeUser(svc, 'auditor', ['auditors']);
      await request(svc.url).get('/api/users').set('Authorization', a.auth).expect(200);
      await request(svc.url).patch('/api/groups/auditors').set('Authorization', adminAuth()).send({ permissions: [] }).expect(200);
      await request(svc.url).get('/api/users').set('Authorization', a.auth).expect(403);
      await request(svc.url)
        .patch('/api/groups/auditors')
        .set('Authorization', adminAuth())
        .send({ permissions: ['feature:admin.users'] })
        .expect(200);
      await request(svc.url).get('/api/users').set('Authorization', a.auth).expect(200);
      await request(svc.url).delete('/api/groups/auditors').set('Authorization', adminAuth()).expect(204);
      await request(svc.url).get('/api/users').set('Authorization', a.auth).expect(403);
    });
  });
});

describe("the current password, given to change one's own", function () {
  let svc: TestService;
  const logs = capturingLogger('info');
  before(async () => {
    svc = await startService({ logger: logs.logger });
  });
  after(async () => svc?.destroy());

  it('is a guess like a login: five wrong ones lock the pair (429), each a login_failed line', async () => {
    const u = await makeUser(svc, 'guessed', ['INT_VIEWER']);
    const token = (await request(svc.url).post('/api/auth/login').send({ username: u.username, password: u.password }).expect(200)).body.token;
    const change = (current: string) =>
      request(svc.url)
        .post(`/api/users/${u.id}/password`)
        .set('Authorization', `Bearer ${token}`)
        .send({ new_password: 'a-new-password-1', current_password: current });
    for (let i = 0; i < 5; i++) expect((await change(`wrong-guess-${i}`)).status).to.equal(400);
    const locked = await change(u.password).expect(429);
    expect(locked.headers['retry-after']).to.match(/^\d+$/);
    expect(locked.body.error.code).to.equal('rate_limited');
    // the password did not change, and the same lockout holds for a login from this address
    await request(svc.url).post('/api/auth/login').send({ username: u.username, password: u.password }).expect(429);
    const lines = logs.lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'login_failed' && l.via === 'password_change');
    expect(lines.map((l) => l.reason)).to.deep.equal([...Array(5).fill('invalid_credentials'), 'locked_out']);
    expect(lines[0]).to.include({ username: 'guessed', provider: 'local' });
    expect(logs.text()).not.to.include('wrong-guess-');
  });
});
