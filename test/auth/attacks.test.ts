import { expect } from 'chai';
import request from 'supertest';
import type { CredentialsProvider, ExternalProfile } from '../../src/auth/providers/types.js';
import { basic, startService, type TestService } from '../support/service.js';
import { startSlapd, LDAP_PEOPLE, type Slapd } from '../support/slapd.js';
import { capturingLogger } from '../sockets/helpers.js';
import { createUser, requestFrom } from './helpers.js';

/** A plugin credentials provider: one PIN per user, names compared without case like a directory. */
const pinProvider: CredentialsProvider = {
  id: 'pin',
  kind: 'credentials',
  label: 'PIN',
  async authenticate(username: string, password: string): Promise<ExternalProfile | null> {
    if (username.toLowerCase() !== 'petra' || password !== 'petra-pin-1234') return null;
    return { provider: 'pin', provider_user_id: 'pin:petra', username: 'petra' };
  },
};

/** Ways to write one name that a provider reads as that name. */
const disguises = (name: string) => [` ${name}`, `${name} `, `\t${name}`, name.toUpperCase(), `${name.slice(0, 1)}\u200b${name.slice(1)}`];

/**
 * Password attacks against the running service, with a real directory: disguised names, floods
 * of new names, login storms, NUL bytes. Each is answered by the lockout, the per-address limit
 * or a 4xx, never by a stalled service or a 500.
 */
describe('password attacks', function () {
  this.timeout(60_000);
  let slapd: Slapd;
  let svc: TestService;
  const logs = capturingLogger('info');

  before(async () => {
    slapd = await startSlapd();
    svc = await startService({
      logger: logs.logger,
      env: {
        SERVICE_AUTH_PROVIDERS: 'ldap,local',
        SERVICE_LDAP_URL: slapd.url,
        SERVICE_LDAP_BIND_DN: slapd.bindDN,
        SERVICE_LDAP_BIND_PASSWORD: slapd.bindPassword,
        SERVICE_LDAP_BASE_DN: slapd.baseDN,
        // the floods below come from one address; the lockout tests use others
        SERVICE_LOGIN_ATTEMPTS_PER_MINUTE: '30',
      },
    });
    svc.service.bus.emit('auth:register_provider', { provider: pinProvider, plugin_name: 'pin-plugin' });
    await createUser(svc.url, { username: 'lena', password: 'lena-password-1', groups: ['INT_USER'] });
  });
  after(async () => {
    await svc?.destroy();
    await slapd?.stop();
  });

  const login = (from: string, username: string, password: string) => requestFrom(svc.url, from, 'POST', '/api/auth/login', { username, password });

  const cases: Array<{ provider: string; name: string; password: string; from: string }> = [
    { provider: 'ldap', name: 'bob', password: LDAP_PEOPLE.bob.password, from: '127.0.1.1' },
    { provider: 'local', name: 'lena', password: 'lena-password-1', from: '127.0.1.2' },
    { provider: 'plugin', name: 'petra', password: 'petra-pin-1234', from: '127.0.1.3' },
  ];
  for (const c of cases) {
    it(`disguised names share one lockout (${c.provider})`, async () => {
      // the right password in disguise logs in as the same person: the names are one name
      const first = await login(c.from, disguises(c.name)[0], c.password);
      expect(first.status, JSON.stringify(first.body)).to.equal(200);
      expect(first.body.user.username).to.equal(c.name);
      for (const [i, name] of disguises(c.name).entries()) {
        expect((await login(c.from, name, `wrong-${i}`)).status, JSON.stringify(name)).to.equal(401);
      }
      // five failures under five spellings: the plain name and every spelling are locked, even with the right password
      for (const name of [c.name, ...disguises(c.name)]) {
        expect((await login(c.from, name, c.password)).status, JSON.stringify(name)).to.equal(429);
      }
      if (c.provider === 'local') {
        const viaBasic = await requestFrom(svc.url, c.from, 'GET', '/api/me', undefined, { authorization: basic(` ${c.name}`, c.password) });
        expect(viaBasic.status).to.equal(429);
      }
    });
  }

  it('HTTP Basic: disguised names share the lockout too', async () => {
    await createUser(svc.url, { username: 'basil', password: 'basil-password-1' });
    for (const [i, name] of disguises('basil').entries()) {
      const r = await requestFrom(svc.url, '127.0.1.4', 'GET', '/api/me', undefined, { authorization: basic(name, `wrong-${i}`) });
      expect(r.status, JSON.stringify(name)).to.equal(401);
    }
    const locked = await requestFrom(svc.url, '127.0.1.4', 'GET', '/api/me', undefined, { authorization: basic('basil', 'basil-password-1') });
    expect(locked.status).to.equal(429);
    expect(Number(locked.headers['retry-after'])).to.be.within(1, 60);
  });

  it('each failed login is one log line with the name as typed, the address, the provider and the reason, never the password', async () => {
    const before = logs.lines.length;
    await login('127.0.1.5', ' Nobody\u200b', 'a-password-that-must-not-be-logged');
    await requestFrom(svc.url, '127.0.1.5', 'GET', '/api/me', undefined, { authorization: basic('lena', 'another-secret-not-logged') });
    const lines = logs.lines.slice(before);
    const failures = lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'login_failed');
    expect(failures).to.have.length(2);
    expect(failures[0]).to.include({ username: ' Nobody\u200b', ip: '127.0.1.5', provider: 'ldap,local,pin', reason: 'invalid_credentials', via: 'login' });
    expect(failures[1]).to.include({ username: 'lena', ip: '127.0.1.5', provider: 'local', reason: 'invalid_credentials', via: 'basic' });
    expect(lines.join('')).not.to.include('must-not-be-logged');
    expect(lines.join('')).not.to.include('another-secret-not-logged');
  });

  it('200 parallel Basic requests with new names from one address: a 429 for most, no hashing queue, /healthz stays fast', async () => {
    const started = Date.now();
    const flood = Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        requestFrom(svc.url, '127.0.2.1', 'GET', '/api/me', undefined, { authorization: basic(`intruder-${i}`, `guess-${i}`) }),
      ),
    );
    const healthTimes: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t = Date.now();
      await request(svc.url).get('/healthz').expect(200);
      healthTimes.push(Date.now() - t);
    }
    const answers = await flood;
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 429).length).to.be.at.least(150);
    expect(statuses.every((s) => s === 401 || s === 429)).to.equal(true);
    healthTimes.sort((a, b) => a - b);
    expect(healthTimes[2], `healthz median ${healthTimes[2]} ms`).to.be.below(200);
    expect(Date.now() - started).to.be.below(10_000);
    // another address is not affected by the flood's limit
    expect((await requestFrom(svc.url, '127.0.2.2', 'GET', '/api/me', undefined, { authorization: basic('lena', 'lena-password-1') })).status).to.equal(200);
  });

  it('a password longer than the documented limit is refused before any hashing (400)', async () => {
    const long = 'x'.repeat(1025);
    const viaLogin = await login('127.0.3.1', 'lena', long);
    expect(viaLogin.status).to.equal(400);
    expect(viaLogin.body.error.details[0].field).to.equal('password');
    const viaBasic = await requestFrom(svc.url, '127.0.3.1', 'GET', '/api/me', undefined, { authorization: basic('lena', long) });
    expect(viaBasic.status).to.equal(400);
    expect(viaBasic.body.error.details[0].field).to.equal('authorization');
  });

  it("NUL bytes in the login form and the JSON body are a 400 (or the form's error page), never a 500, on every dialect", async () => {
    for (const [username, password] of [
      ['le\u0000na', 'x'],
      ['lena', 'pass\u0000word'],
      ['\u0000', '\u0000'],
    ]) {
      const form = await request(svc.url)
        .post('/login')
        .set('Origin', 'http://localhost:8080')
        .type('form')
        .send(new URLSearchParams({ username, password, next: '/' }).toString());
      expect(form.status, JSON.stringify(username)).to.equal(303);
      expect(form.headers.location).to.match(/error=bad_request/);
      const api = await login('127.0.3.2', username, password);
      expect(api.status).to.equal(400);
      expect(api.body.error.details[0].message).to.match(/NUL/);
    }
    // deep in a body, too
    let deep: unknown = 'a\u0000b';
    for (let i = 0; i < 200; i++) deep = { d: deep };
    const res = await request(svc.url).post('/api/auth/login').send({ username: 'lena', password: 'x', extra: deep });
    expect(res.status).to.equal(400);
    expect(res.body.error.details[0].field).to.match(/^extra\.d\.d/);
  });
});
