import { expect } from 'chai';
import request from 'supertest';
import { adminAuth, basic, startService, type TestService } from '../support/service.js';
import { createUser, ORIGIN, requestFrom, setCookieLine, setCookies } from './helpers.js';

describe('login API, web session and logout', function () {
  let svc: TestService;

  before(async function () {
    svc = await startService();
    await createUser(svc.url, { username: 'carl', password: 'carl-password-1', email: 'carl@example.test', display_name: 'Carl', groups: ['INT_USER'] });
    await createUser(svc.url, { username: 'lockme', password: 'lockme-password-1' });
    await createUser(svc.url, { username: 'sso-only' });
    const disabled = await createUser(svc.url, { username: 'gone', password: 'gone-password-1' });
    await request(svc.url).patch(`/api/users/${disabled}`).set('Authorization', adminAuth()).send({ disabled: true }).expect(200);
  });

  after(async function () {
    await svc?.destroy();
  });

  it('returns the session token and the user, and starts an HttpOnly SameSite=Lax cookie session', async function () {
    const sessionQueries: string[] = [];
    const onQuery = (q: { sql: string }) => q.sql.includes('web_sessions') && sessionQueries.push(q.sql);
    svc.service.db.on('query', onQuery);
    const res = await request(svc.url).post('/api/auth/login').send({ username: 'carl', password: 'carl-password-1' }).expect(200);
    svc.service.db.off('query', onQuery);
    // a request without a session cookie has no old session to destroy: the new one is one write
    expect(sessionQueries, sessionQueries.join('\n')).to.have.length(1);
    expect(res.body).to.have.keys('token', 'token_type', 'expires_at', 'user');
    expect(res.body.token_type).to.equal('session');
    expect(res.body.token).to.match(/^svs_/);
    const ttl = Date.parse(res.body.expires_at) - Date.now();
    expect(ttl).to.be.within(11.9 * 3600_000, 12 * 3600_000);
    expect(res.body.user).to.deep.include({ username: 'carl', display_name: 'Carl', email: 'carl@example.test', groups: ['INT_USER'] });
    expect(res.body.user.id).to.match(/^[0-9a-f-]{36}$/);
    expect(res.headers['cache-control']).to.equal('no-store');

    const cookie = setCookieLine(res, 'svc.sid')!;
    expect(cookie, 'session cookie').to.be.a('string');
    expect(cookie.toLowerCase()).to.include('httponly').and.include('samesite=lax');

    const me = await request(svc.url).get('/api/me').set('Authorization', `Bearer ${res.body.token}`).expect(200);
    expect(me.body).to.include({ username: 'carl', method: 'session_token' });
    const keys = await request(svc.url).get('/api/me/api-keys').set('Authorization', `Bearer ${res.body.token}`).expect(200);
    const current = keys.body.keys.find((k: any) => k.current);
    expect(current).to.include({ kind: 'session', label: 'web session (local)' });
    expect(JSON.stringify(keys.body)).not.to.include(res.body.token);
  });

  it('answers 401 with the error body for a wrong password, an unknown user and a password-less user', async function () {
    for (const creds of [
      { username: 'carl', password: 'wrong-password' },
      { username: 'nobody-here', password: 'whatever-1' },
      { username: 'sso-only', password: 'anything-at-all' },
    ]) {
      const res = await request(svc.url).post('/api/auth/login').send(creds).expect(401);
      expect(res.body).to.deep.equal({ error: { code: 'unauthorized', message: 'invalid username or password' } });
      expect(res.headers['set-cookie'] ?? []).to.be.empty;
    }
  });

  it('refuses a disabled user even with the right password', async function () {
    await request(svc.url).post('/api/auth/login').send({ username: 'gone', password: 'gone-password-1' }).expect(401);
  });

  it('validates the body (400 naming the field)', async function () {
    const res = await request(svc.url).post('/api/auth/login').send({ username: 'carl' }).expect(400);
    expect(res.body.error.code).to.equal('validation_failed');
    expect(res.body.error.details).to.deep.include({ field: 'password', message: 'is required' });
  });

  it('locks (username, IP) after 5 failures in 60 s with 429 and Retry-After; another IP is unaffected', async function () {
    for (let i = 0; i < 5; i++) {
      const r = await requestFrom(svc.url, '127.0.0.1', 'POST', '/api/auth/login', { username: 'lockme', password: `bad-${i}` });
      expect(r.status, `attempt ${i + 1}`).to.equal(401);
    }
    // the right password does not help while locked
    const locked = await requestFrom(svc.url, '127.0.0.1', 'POST', '/api/auth/login', { username: 'lockme', password: 'lockme-password-1' });
    expect(locked.status).to.equal(429);
    expect(locked.body.error.code).to.equal('rate_limited');
    expect(Number(locked.headers['retry-after'])).to.be.within(1, 60);
    // the counter is per username: HTTP Basic for the same pair is locked too
    const viaBasic = await requestFrom(svc.url, '127.0.0.1', 'GET', '/api/me', undefined, { authorization: basic('lockme', 'lockme-password-1') });
    expect(viaBasic.status).to.equal(429);

    // another client IP logs in, and its success does not reset the locked pair
    const other = await requestFrom(svc.url, '127.0.0.2', 'POST', '/api/auth/login', { username: 'lockme', password: 'lockme-password-1' });
    expect(other.status).to.equal(200);
    expect(other.body.user.username).to.equal('lockme');
    const still = await requestFrom(svc.url, '127.0.0.1', 'POST', '/api/auth/login', { username: 'lockme', password: 'lockme-password-1' });
    expect(still.status).to.equal(429);
    // other users on the locked IP are unaffected
    const carl = await requestFrom(svc.url, '127.0.0.1', 'POST', '/api/auth/login', { username: 'carl', password: 'carl-password-1' });
    expect(carl.status).to.equal(200);
  });

  it('starts every login under a fresh session id; the previous id stops working', async function () {
    const agent = request.agent(svc.url);
    const first = await agent.post('/api/auth/login').send({ username: 'carl', password: 'carl-password-1' }).expect(200);
    const firstCookies = setCookies(first);
    await agent.get('/api/me').expect(200);
    const second = await agent.post('/api/auth/login').send({ username: 'carl', password: 'carl-password-1' }).set('Origin', ORIGIN).expect(200);
    const secondCookies = setCookies(second);
    expect(secondCookies['svc.sid']).to.be.a('string').and.not.equal(firstCookies['svc.sid']);
    await agent.get('/api/me').expect(200);

    const oldCookie = `svc.sid=${firstCookies['svc.sid']}; svc.sid.sig=${firstCookies['svc.sid.sig']}`;
    await request(svc.url).get('/api/me').set('Cookie', oldCookie).expect(401);
    // a session id an attacker planted before login is not adopted either
    const planted = await request(svc.url).post('/api/auth/login').set('Cookie', oldCookie).send({ username: 'carl', password: 'carl-password-1' }).expect(200);
    expect(setCookies(planted)['svc.sid']).to.be.a('string').and.not.equal(firstCookies['svc.sid']);
  });

  it('accepts the cookie session for GET, and for POST only from an allowed Origin', async function () {
    const agent = request.agent(svc.url);
    await agent.post('/api/auth/login').send({ username: 'carl', password: 'carl-password-1' }).expect(200);
    const me = await agent.get('/api/me').expect(200);
    expect(me.body).to.include({ username: 'carl', method: 'session_cookie' });

    await agent.post('/api/me/api-keys').set('Origin', ORIGIN).send({ label: 'from the UI' }).expect(201);
    const evil = await agent.post('/api/me/api-keys').set('Origin', 'https://evil.example').send({ label: 'csrf' }).expect(403);
    expect(evil.body.error.code).to.equal('forbidden');
    await agent.post('/api/me/api-keys').send({ label: 'no origin' }).expect(403);
  });

  it('refuses a login or token exchange posted from a foreign page (login CSRF)', async function () {
    await request(svc.url).post('/api/auth/login').set('Origin', 'https://evil.example').send({ username: 'carl', password: 'carl-password-1' }).expect(403);
    await request(svc.url).post('/api/auth/token-exchange').set('Origin', 'https://evil.example').send({ code: 'svc_0123456789abcdef0123456789' }).expect(403);
  });

  it('logout with the token revokes it and ends the cookie session', async function () {
    const agent = request.agent(svc.url);
    const login = await agent.post('/api/auth/login').send({ username: 'carl', password: 'carl-password-1' }).expect(200);
    const token = login.body.token;
    const keyId = (await agent.get('/api/me/api-keys').expect(200)).body.keys.find((k: any) => k.current).id;
    const out = await agent.post('/api/auth/logout').set('Authorization', `Bearer ${token}`).expect(204);
    expect(setCookies(out)['svc.sid']).to.equal('');
    await request(svc.url).get('/api/me').set('Authorization', `Bearer ${token}`).expect(401);
    await agent.get('/api/me').expect(401);
    const rows = await svc.service.db('web_sessions').select('data');
    expect(rows.map((r: any) => JSON.parse(r.data).key_id)).not.to.include(keyId);
    const key = await svc.service.db('api_keys').where({ id: keyId }).first();
    expect(key.revoked_at).to.be.a('number');
  });

  it('logout through the cookie session revokes its token too', async function () {
    const agent = request.agent(svc.url);
    const login = await agent.post('/api/auth/login').send({ username: 'carl', password: 'carl-password-1' }).expect(200);
    const before = await svc.service.db('web_sessions').count({ n: '*' }).first();
    await agent.post('/api/auth/logout').set('Origin', 'https://evil.example').expect(403);
    await agent.post('/api/auth/logout').set('Origin', ORIGIN).expect(204);
    const after = await svc.service.db('web_sessions').count({ n: '*' }).first();
    expect(Number(after!.n)).to.equal(Number(before!.n) - 1);
    await agent.get('/api/me').expect(401);
    await request(svc.url).get('/api/me').set('Authorization', `Bearer ${login.body.token}`).expect(401);
    // nothing left to end: 401
    await request(svc.url).post('/api/auth/logout').expect(401);
  });

  it('logout with an API key ends nothing but the call (204) and keeps the key', async function () {
    const created = await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).send({ label: 'script' }).expect(201);
    await request(svc.url).post('/api/auth/logout').set('X-API-Key', created.body.token).expect(204);
    await request(svc.url).post('/api/auth/logout').set('Authorization', adminAuth()).expect(204);
    await request(svc.url).get('/api/me').set('X-API-Key', created.body.token).expect(200);
    // nothing ended, so no logout is recorded
    await svc.service.iam.audit.flush();
    const events = await request(svc.url).get('/api/audit').query({ action: 'auth.logout', limit: 200 }).set('Authorization', adminAuth()).expect(200);
    expect(events.body.events.filter((e: any) => e.actor.method === 'api_key' || e.actor.method === 'basic')).to.deep.equal([]);
  });

  it('lists the configured providers for the login page', async function () {
    const res = await request(svc.url).get('/api/auth/providers').expect(200);
    expect(res.body).to.deep.equal({ providers: [{ id: 'local', kind: 'credentials', label: 'Local account' }] });
  });

  describe('GET /login and the login form', function () {
    it('renders a page without inline script under a strict CSP and escapes what comes from the URL', async function () {
      const res = await request(svc.url).get('/login').query({ error: 'invalid_credentials', next: '/x"><script>alert(1)</script>' }).expect(200);
      expect(res.headers['content-type']).to.match(/^text\/html/);
      expect(res.headers['content-security-policy']).to.include("default-src 'none'").and.include("form-action 'self'");
      expect(res.text).to.include('Wrong username or password.');
      expect(res.text).to.include('<form method="post" action="/login">');
      // one script: the page's own module from this origin (passkeys), nothing inline
      expect(res.headers['content-security-policy']).to.include("script-src 'self'").and.not.include('unsafe');
      expect([...res.text.matchAll(/<script\b[^>]*>[\s\S]*?<\/script>/gi)].map((m) => m[0])).to.deep.equal([
        '<script type="module" src="/static/login.js"></script>',
      ]);
      expect(res.text).to.include('value="/x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"');
    });

    it('keeps a valid next, escaped, and shows the lockout message with its wait', async function () {
      const res = await request(svc.url).get('/login').query({ error: 'locked_out', retry_after: '42', next: '/dash?a=1&b="2"' }).expect(200);
      expect(res.text).to.include('Try again in 42 seconds.');
      expect(res.text).to.include('value="/dash?a=1&amp;b=&quot;2&quot;"');
      const css = await request(svc.url).get('/static/login.css').expect(200);
      expect(css.headers['content-type']).to.match(/^text\/css/);
    });

    it('signs in through the form with 303 redirects only, and refuses a foreign Origin', async function () {
      const agent = request.agent(svc.url);
      const bad = await agent.post('/login').type('form').set('Origin', ORIGIN).send({ username: 'carl', password: 'nope-nope', next: '/dash' }).expect(303);
      expect(bad.headers.location).to.equal('/login?error=invalid_credentials&next=%2Fdash');
      const good = await agent
        .post('/login')
        .type('form')
        .set('Origin', ORIGIN)
        .send({ username: 'carl', password: 'carl-password-1', next: '/dash' })
        .expect(303);
      expect(good.headers.location).to.equal('/dash');
      await agent.get('/api/me').expect(200);
      const offsite = await request(svc.url)
        .post('/login')
        .type('form')
        .send({ username: 'carl', password: 'carl-password-1', next: '//evil.example' })
        .expect(303);
      expect(offsite.headers.location).to.equal('/');
      await request(svc.url)
        .post('/login')
        .type('form')
        .set('Origin', 'https://evil.example')
        .send({ username: 'carl', password: 'carl-password-1' })
        .expect(403);
    });
  });
});
