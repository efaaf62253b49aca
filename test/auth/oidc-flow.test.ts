import { expect } from 'chai';
import request from 'supertest';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { followToCallback, startIdp, type RunningIdp } from '../support/oidc-idp.js';
import { createUser, getUser, ORIGIN, patchAuthSettings, previousStepCode, setCookieLine, totpCode, unusedPort, userNamed } from './helpers.js';

const CLIENT_ID = 'service-core';
const CLIENT_SECRET = 'oidc-flow-client-secret-0123456789';
const CALLBACK = `${ORIGIN}/auth/callback/oidc`;

const ACCOUNTS: Record<string, Record<string, unknown>> = {
  'alice-sub': { email: 'alice@example.test', email_verified: true, preferred_username: 'alice', name: 'Alice Example', groups: ['idp-devs'] },
  'carol-sub': { email: 'Carol@Example.test', email_verified: true, preferred_username: 'carol.idp', name: 'Carol' },
  'mallory-sub': { email: 'victim@example.test', email_verified: false, preferred_username: 'mallory' },
  'admin-sub': { preferred_username: 'admin', name: 'Not the admin' },
  'disabled-sub': { email: 'disabled@example.test', email_verified: true, preferred_username: 'dis' },
};

type Agent = ReturnType<typeof request.agent>;

describe('OIDC login flow end to end (real oidc-provider IdP)', function () {
  let idp: RunningIdp;
  let svc: TestService;

  before(async function () {
    idp = await startIdp({ clients: [{ client_id: CLIENT_ID, client_secret: CLIENT_SECRET, redirect_uris: [CALLBACK] }], accounts: ACCOUNTS });
    svc = await startService();
    const res = await patchAuthSettings(svc.url, {
      auth_providers: 'local,oidc',
      oidc_issuer: idp.issuer,
      oidc_client_id: CLIENT_ID,
      oidc_client_secret: CLIENT_SECRET,
      oidc_group_mapping: { 'idp-devs': ['INT_USER'] },
      oidc_label: 'Example SSO',
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
  });

  after(async function () {
    await svc?.destroy();
    await idp?.stop();
  });

  /** GET start (as the browser), returns the IdP authorization URL. */
  async function start(agent: Agent, query: Record<string, string> = {}): Promise<string> {
    const res = await agent.get('/api/auth/oidc/start').query(query).expect(302);
    expect(res.headers.location.startsWith(`${idp.issuer}/`), res.headers.location).to.equal(true);
    return res.headers.location;
  }

  /** The callback path+query the IdP sent the browser to. */
  async function idpLogin(authorizationUrl: string, sub: string): Promise<string> {
    const cb = await followToCallback(authorizationUrl, { login: sub });
    expect(`${cb.origin}${cb.pathname}`).to.equal(CALLBACK);
    return cb.pathname + cb.search;
  }

  async function fullWebLogin(agent: Agent, sub: string, next = '/'): Promise<void> {
    const callback = await agent.get(await idpLogin(await start(agent, { next }), sub)).expect(302);
    const complete = await agent.get(callback.headers.location).expect(302);
    expect(complete.headers.location).to.equal(next);
  }

  it('lists the redirect provider with its start_url', async function () {
    const res = await request(svc.url).get('/api/auth/providers').expect(200);
    expect(res.body.providers).to.deep.equal([
      { id: 'local', kind: 'credentials', label: 'Local account' },
      { id: 'oidc', kind: 'redirect', label: 'Example SSO', start_url: `${ORIGIN}/api/auth/oidc/start` },
    ]);
    const page = await request(svc.url).get('/login').query({ next: '/board' }).expect(200);
    expect(page.text).to.include('href="/api/auth/oidc/start?next=%2Fboard"').and.include('Sign in with Example SSO');
  });

  it('start -> IdP -> callback -> /auth/complete: cookie session, mapped groups, token never in a URL', async function () {
    const agent = request.agent(svc.url);
    const startRes = await agent.get('/api/auth/oidc/start').query({ next: '/board?tab=1' }).expect(302);
    const binding = setCookieLine(startRes, 'svc.login')!;
    expect(binding.toLowerCase()).to.include('httponly').and.include('samesite=lax');
    const authUrl = new URL(startRes.headers.location);
    expect(authUrl.searchParams.get('code_challenge_method')).to.equal('S256');
    expect(authUrl.searchParams.get('nonce')).to.be.a('string');
    expect(authUrl.searchParams.get('redirect_uri')).to.equal(CALLBACK);

    // the state is kept server-side, hashed, its data sealed
    const stored = await svc.service.db('one_time_values').where({ purpose: 'oidc_state' });
    const state = authUrl.searchParams.get('state')!;
    expect(JSON.stringify(stored)).not.to.include(state).and.not.to.include(authUrl.searchParams.get('nonce')!);

    const callback = await agent.get(await idpLogin(startRes.headers.location, 'alice-sub')).expect(302);
    const completeUrl = new URL(callback.headers.location, ORIGIN);
    expect(completeUrl.pathname).to.equal('/auth/complete');
    expect(completeUrl.searchParams.get('next')).to.equal('/board?tab=1');
    expect(completeUrl.searchParams.get('code')).to.match(/^svc_/);
    expect(callback.headers.location).not.to.include('svs_');

    const complete = await agent.get(callback.headers.location).expect(302);
    expect(complete.headers.location).to.equal('/board?tab=1');
    const me = await agent.get('/api/me').expect(200);
    expect(me.body).to.include({ username: 'alice', email: 'alice@example.test', display_name: 'Alice Example', method: 'session_cookie' });
    expect(me.body.groups).to.have.members(['INT_VIEWER', 'INT_USER']);

    // the code is single use
    const again = await agent.get(callback.headers.location).expect(302);
    expect(again.headers.location).to.match(/^\/login\?error=invalid_code/);

    const alice = await userNamed(svc.url, 'alice');
    expect(alice.identities).to.deep.equal([{ provider: 'oidc', provider_user_id: 'alice-sub' }]);
    // a second login resolves to the same user
    await fullWebLogin(request.agent(svc.url), 'alice-sub');
    expect((await userNamed(svc.url, 'alice')).id).to.equal(alice.id);
    expect(await userNamed(svc.url, 'alice-2')).to.equal(undefined);
  });

  it('the sign-in redirects carry their Location and no body, whatever the client accepts', async function () {
    const agent = request.agent(svc.url);
    const startRes = await agent.get('/api/auth/oidc/start').set('Accept', 'text/html').expect(302);
    const callback = await agent
      .get(await idpLogin(startRes.headers.location, 'alice-sub'))
      .set('Accept', 'text/html')
      .expect(302);
    const complete = await agent.get(callback.headers.location).set('Accept', 'application/json').expect(302);
    const refused = await request(svc.url).get('/auth/complete').query({ code: 'svc_not-a-code' }).expect(302);
    for (const res of [startRes, callback, complete, refused]) {
      expect(res.headers.location).to.be.a('string').that.is.not.empty;
      expect(res.text).to.equal('');
      expect(res.headers['content-type']).to.equal(undefined);
    }
  });

  it('token-exchange for a client redirect_uri: login body once, then 401', async function () {
    const agent = request.agent(svc.url);
    const authUrl = await start(agent, { redirect_uri: `${ORIGIN}/app/callback` });
    const callback = await agent.get(await idpLogin(authUrl, 'alice-sub')).expect(302);
    const target = new URL(callback.headers.location);
    expect(`${target.origin}${target.pathname}`).to.equal(`${ORIGIN}/app/callback`);
    const code = target.searchParams.get('code')!;

    // the single-page app has no cookie of ours: a plain client redeems the code
    const res = await request(svc.url).post('/api/auth/token-exchange').set('Origin', ORIGIN).send({ code }).expect(200);
    expect(res.body.token_type).to.equal('session');
    expect(res.body.user).to.include({ username: 'alice' });
    expect(res.headers['set-cookie'] ?? []).to.be.empty;
    await request(svc.url).get('/api/me').set('Authorization', `Bearer ${res.body.token}`).expect(200);

    const replay = await request(svc.url).post('/api/auth/token-exchange').send({ code }).expect(401);
    expect(replay.body.error.code).to.equal('unauthorized');
    await request(svc.url).post('/api/auth/token-exchange').send({ code: 'svc_not-a-real-code-0123456789' }).expect(401);
  });

  it('a browser-bound code is useless to anyone else: token-exchange without the cookie is 401 and burns it', async function () {
    const agent = request.agent(svc.url);
    const callback = await agent.get(await idpLogin(await start(agent), 'alice-sub')).expect(302);
    const code = new URL(callback.headers.location, ORIGIN).searchParams.get('code')!;
    await request(svc.url).post('/api/auth/token-exchange').send({ code }).expect(401);
    const complete = await agent.get(callback.headers.location).expect(302);
    expect(complete.headers.location).to.match(/^\/login\?error=invalid_code/);
  });

  it('an exchange code expires after 60 s', async function () {
    const agent = request.agent(svc.url);
    const authUrl = await start(agent, { redirect_uri: `${ORIGIN}/app/callback` });
    const callback = await agent.get(await idpLogin(authUrl, 'alice-sub')).expect(302);
    const code = new URL(callback.headers.location).searchParams.get('code')!;
    const row = await svc.service.db('one_time_values').where({ purpose: 'exchange_code' }).orderBy('expires_at', 'desc').first();
    expect(Number(row.expires_at) - Date.now()).to.be.within(50_000, 60_000);
    await svc.service
      .db('one_time_values')
      .where({ hash: row.hash })
      .update({ expires_at: Date.now() - 1 });
    await request(svc.url).post('/api/auth/token-exchange').send({ code }).expect(401);
  });

  it('state mismatch, replayed callback and a callback from another browser go to /login?error=state_mismatch', async function () {
    const agent = request.agent(svc.url);
    const callbackPath = await idpLogin(await start(agent), 'alice-sub');

    const tampered = new URL(callbackPath, ORIGIN);
    tampered.searchParams.set('state', 'forged-state-0123456789abcdef0123456789');
    const forged = await agent.get(tampered.pathname + tampered.search).expect(302);
    expect(forged.headers.location).to.equal('/login?error=state_mismatch');

    // the same callback from a browser without the binding cookie
    const stranger = await request(svc.url).get(callbackPath).expect(302);
    expect(stranger.headers.location).to.equal('/login?error=state_mismatch');
    // ... which burned the state: the owner's own (late) callback is refused as well
    const late = await agent.get(callbackPath).expect(302);
    expect(late.headers.location).to.equal('/login?error=state_mismatch');

    // a good callback works once; its replay is refused
    const path2 = await idpLogin(await start(agent), 'alice-sub');
    await agent
      .get(path2)
      .expect(302)
      .expect('location', /^\/auth\/complete\?/);
    const replay = await agent.get(path2).expect(302);
    expect(replay.headers.location).to.equal('/login?error=state_mismatch');
  });

  it("an ID token whose nonce is not this login's goes to /login?error=nonce_mismatch", async function () {
    const agent = request.agent(svc.url);
    const authUrl = new URL(await start(agent));
    authUrl.searchParams.set('nonce', 'nonce-of-another-login-0123456789');
    const res = await agent.get(await idpLogin(authUrl.href, 'alice-sub')).expect(302);
    expect(res.headers.location).to.equal('/login?error=nonce_mismatch');
  });

  it('a login the user cancels at the IdP goes to /login?error=idp_error', async function () {
    const agent = request.agent(svc.url);
    const cb = await followToCallback(await start(agent, { next: '/after' }), { login: 'alice-sub', deny: true });
    const res = await agent.get(cb.pathname + cb.search).expect(302);
    expect(res.headers.location).to.equal('/login?error=idp_error&next=%2Fafter');
  });

  it('refuses a next or redirect_uri that leaves the service', async function () {
    for (const next of ['https://evil.example', '//evil.example', '/\\evil.example', 'evil', '/ok\nSet-Cookie: x']) {
      const res = await request(svc.url).get('/api/auth/oidc/start').query({ next }).expect(400);
      expect(res.body.error.details[0].field, next).to.equal('next');
    }
    for (const redirect_uri of ['https://evil.example/cb', `${ORIGIN}/cb#frag`, 'http://user:pw@localhost:8080/cb', 'http://256.256.256.256/cb']) {
      const res = await request(svc.url).get('/api/auth/oidc/start').query({ redirect_uri }).expect(400);
      expect(res.body.error.details[0].field).to.equal('redirect_uri');
    }
    await request(svc.url).get('/api/auth/oidc/start').query({ provider: 'nope' }).expect(404);
  });

  it('links by email only when the IdP says it is verified; a new SSO user never collides with a username', async function () {
    const carolId = await createUser(svc.url, { username: 'carol', password: 'carol-password-1', email: 'carol@example.test' });
    const victimId = await createUser(svc.url, { username: 'victim', password: 'victim-password-1', email: 'victim@example.test' });

    await fullWebLogin(request.agent(svc.url), 'carol-sub');
    const carol = await getUser(svc.url, carolId);
    expect(carol.identities).to.deep.include({ provider: 'oidc', provider_user_id: 'carol-sub' });
    expect(carol.username).to.equal('carol');

    await fullWebLogin(request.agent(svc.url), 'mallory-sub');
    const victim = await getUser(svc.url, victimId);
    expect(victim.identities.map((i: any) => i.provider)).not.to.include('oidc');
    const mallory = await userNamed(svc.url, 'mallory');
    expect(mallory.identities).to.deep.equal([{ provider: 'oidc', provider_user_id: 'mallory-sub' }]);
    expect(mallory.email, 'an unverified email is not stored').to.equal(null);
    expect(mallory.groups).to.deep.equal(['INT_VIEWER']);

    await fullWebLogin(request.agent(svc.url), 'admin-sub');
    const admin2 = await userNamed(svc.url, 'admin-2');
    expect(admin2.identities).to.deep.equal([{ provider: 'oidc', provider_user_id: 'admin-sub' }]);
    expect(admin2.groups).to.deep.equal(['INT_VIEWER']);
    // an SSO-only user has no password: the local provider refuses it
    await request(svc.url).post('/api/auth/login').send({ username: 'admin-2', password: 'anything-goes' }).expect(401);
  });

  it('a disabled user is sent to /login?error=account_disabled', async function () {
    await fullWebLogin(request.agent(svc.url), 'disabled-sub');
    const dis = await userNamed(svc.url, 'dis');
    await request(svc.url).patch(`/api/users/${dis.id}`).set('Authorization', adminAuth()).send({ disabled: true }).expect(200);
    const agent = request.agent(svc.url);
    const res = await agent.get(await idpLogin(await start(agent), 'disabled-sub')).expect(302);
    expect(res.headers.location).to.equal('/login?error=account_disabled');
  });

  it('IdP down -> /login?error=idp_unreachable, never a 500', async function () {
    const port = await unusedPort();
    // a new issuer takes the client secret typed again (it is never sent to an endpoint it was not set for)
    await patchAuthSettings(svc.url, { oidc_issuer: `http://127.0.0.1:${port}`, oidc_client_secret: CLIENT_SECRET }).expect(200);
    try {
      const res = await request(svc.url).get('/api/auth/oidc/start').query({ next: '/x' }).expect(302);
      expect(res.headers.location).to.equal('/login?error=idp_unreachable&next=%2Fx');
      const page = await request(svc.url).get(res.headers.location).expect(200);
      expect(page.text).to.include('could not be reached');
    } finally {
      await patchAuthSettings(svc.url, { oidc_issuer: idp.issuer, oidc_client_secret: CLIENT_SECRET }).expect(200);
    }
  });

  it('one address cannot fill the state table: starts share the per-address login budget', async function () {
    const tight = await startService({
      env: {
        SERVICE_LOGIN_ATTEMPTS_PER_MINUTE: '5',
        SERVICE_AUTH_PROVIDERS: 'local,oidc',
        SERVICE_OIDC_ISSUER: idp.issuer,
        SERVICE_OIDC_CLIENT_ID: CLIENT_ID,
        SERVICE_OIDC_CLIENT_SECRET: CLIENT_SECRET,
      },
    });
    try {
      const locations: string[] = [];
      for (let i = 0; i < 8; i++) locations.push((await request(tight.url).get('/api/auth/oidc/start').expect(302)).headers.location);
      expect(locations.filter((l) => l.startsWith(idp.issuer))).to.have.length(5);
      expect(locations.slice(5)).to.deep.equal(Array(3).fill('/login?error=rate_limited'));
      const states = await tight.service.db('one_time_values').where({ purpose: 'oidc_state' }).count({ n: '*' }).first();
      expect(Number((states as { n: number }).n)).to.equal(5);
      expect((await request(tight.url).get('/login?error=rate_limited').expect(200)).text).to.include('Too many sign-in attempts');
    } finally {
      await tight.destroy();
    }
  });

  it('a user with a second factor passes it on our page after the IdP, then the session is handed over as usual', async function () {
    // the enrolment may wait up to 5 s for a TOTP step with time left (previousStepCode)
    this.timeout(60_000);
    // alice signed in by OIDC before (mapped groups); she enrols an authenticator app
    const agent = request.agent(svc.url);
    await fullWebLogin(agent, 'alice-sub');
    const alice = await userNamed(svc.url, 'alice');
    const secret = (await agent.post('/api/me/mfa/totp').set('Origin', ORIGIN).expect(200)).body.secret;
    await agent
      .post('/api/me/mfa/totp/confirm')
      .set('Origin', ORIGIN)
      .send({ code: await previousStepCode(secret) })
      .expect(200);

    const browser = request.agent(svc.url);
    const callback = await browser.get(await idpLogin(await start(browser, { next: '/board' }), 'alice-sub')).expect(303);
    expect(callback.headers.location).to.equal('/login/mfa?next=%2Fboard');
    expect(setCookieLine(callback, 'svc.mfa_token')!.toLowerCase()).to.include('httponly');
    // the second step's page, then a wrong code, then the right one
    expect((await browser.get('/login/mfa?next=%2Fboard').expect(200)).text).to.include('data-second-step');
    const wrong = await browser.post('/login/mfa').set('Origin', ORIGIN).type('form').send('code=000000&next=%2Fboard').expect(303);
    expect(wrong.headers.location).to.equal('/login/mfa?error=invalid_code&next=%2Fboard');
    const right = await browser
      .post('/login/mfa')
      .set('Origin', ORIGIN)
      .type('form')
      .send(`code=${totpCode(secret)}&next=%2Fboard`)
      .expect(302);
    expect(right.headers.location).to.match(/^\/auth\/complete\?code=/);
    const complete = await browser.get(right.headers.location).expect(302);
    expect(complete.headers.location).to.equal('/board');
    const me = await browser.get('/api/me').expect(200);
    expect(me.body.id).to.equal(alice.id);
    // no session was made before the second step: the callback alone opened nothing
    await request(svc.url)
      .get('/api/me')
      .set('Cookie', (callback.headers['set-cookie'] as unknown as string[]).map((c) => c.split(';')[0]).join('; '))
      .expect(401);
    await request(svc.url).delete(`/api/users/${alice.id}/mfa`).set('Authorization', adminAuth()).expect(204);
  });

  it('refuses a plain-http issuer that is not a loopback address', async function () {
    const res = await patchAuthSettings(svc.url, { oidc_issuer: 'http://idp.example.com', oidc_client_secret: CLIENT_SECRET }).expect(400);
    expect(res.body.error.details[0]).to.deep.include({ field: 'oidc' });
    expect(res.body.error.details[0].message).to.include('loopback');
  });
});
