import { expect } from 'chai';
import request from 'supertest';
import { startService, adminAuth, basic, testEnv, SYSTEM_KEY, type TestService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';
import { cli } from '../cli/helpers.js';
import { previousStepCode, setCookies, totpCode as codeAt, TOTP_STEP_MS } from './helpers.js';
import { WsClient, refusedStatus } from '../gateway/helpers.js';

/** A time whose step is at least `steps` away from the current one's codes (drift tests). */
const stepsAway = (steps: number) => Date.now() + steps * TOTP_STEP_MS;

/**
 * The second factor over HTTP (authenticator app and recovery codes): enrolment, the second step
 * of a sign-in, replay, drift, lockout, Basic, the required-groups wall, step-up, resets.
 */
describe('second factor: TOTP and recovery codes', function () {
  this.timeout(60_000);
  let svc: TestService;
  const logs = capturingLogger('info');
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };

  before(async () => {
    svc = await startService({ logger: logs.logger, env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY, SERVICE_TRUST_PROXY: 'true' } });
  });
  after(async () => svc?.destroy());

  async function newUser(username: string, groups = ['INT_USER'], extra: Record<string, unknown> = {}) {
    const password = `${username}-password-1`;
    const id = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username, password, groups, ...extra })
        .expect(201)
    ).body.id as string;
    return { id, username, password };
  }

  /** Signs in with the password only (no second factor yet): the session token. */
  async function session(u: { username: string; password: string }): Promise<string> {
    const res = await api().post('/api/auth/login').send({ username: u.username, password: u.password }).expect(200);
    expect(res.body.token, JSON.stringify(res.body)).to.be.a('string');
    return res.body.token;
  }

  /** The device cookie an answer sets, if any. */
  const deviceOf = (res: request.Response) =>
    ([] as string[])
      .concat(res.headers['set-cookie'] ?? [])
      .map((c) => /^svc\.device=([^;]+)/.exec(c)?.[1])
      .find(Boolean);

  /** Enrols an authenticator app from a session: the secret and the recovery codes. */
  async function enrol(token: string, step: 'current' | 'previous' = 'current'): Promise<{ secret: string; recovery: string[] }> {
    const started = await api().post('/api/me/mfa/totp').set('Authorization', `Bearer ${token}`).expect(200);
    expect(started.body.otpauth_uri).to.match(/^otpauth:\/\/totp\/.*secret=/);
    expect(started.body.qr_svg).to.match(/^<svg/);
    const secret = started.body.secret as string;
    const confirmed = await api()
      .post('/api/me/mfa/totp/confirm')
      .set('Authorization', `Bearer ${token}`)
      .send({ code: step === 'previous' ? await previousStepCode(secret) : codeAt(secret) })
      .expect(200);
    return { secret, recovery: confirmed.body.recovery_codes };
  }

  /** The first step of a sign-in of an account with a factor: the mfa token. */
  async function firstStep(u: { username: string; password: string }): Promise<string> {
    const res = await api().post('/api/auth/login').send({ username: u.username, password: u.password }).expect(200);
    expect(res.body).to.include({ mfa_required: true });
    expect(res.body).not.to.have.property('token');
    expect(setCookies(res)).not.to.have.property('svc.sid');
    return res.body.mfa_token;
  }

  it('enrols an authenticator app; signing in then needs a code, taken once, with one step of drift', async () => {
    const alice = await newUser('alice');
    const token = await session(alice);
    // confirming with a wrong code leaves nothing active
    await api().post('/api/me/mfa/totp').set('Authorization', `Bearer ${token}`).expect(200);
    const wrong = await api().post('/api/me/mfa/totp/confirm').set('Authorization', `Bearer ${token}`).send({ code: '000000' }).expect(400);
    expect(wrong.body.error.details[0].field).to.equal('code');
    expect((await api().get('/api/me/mfa').set('Authorization', `Bearer ${token}`).expect(200)).body.totp).to.equal(false);

    // confirmed with the previous step's code: one step of drift
    const { secret, recovery } = await enrol(token, 'previous');
    expect(recovery).to.have.length(10);
    expect(new Set(recovery).size).to.equal(10);
    const status = (await api().get('/api/me/mfa').set('Authorization', `Bearer ${token}`).expect(200)).body;
    expect(status).to.deep.include({ totp: true, webauthn: [], recovery_codes_left: 10, required: false });
    expect(Date.parse(status.totp_created_at)).to.be.closeTo(Date.now(), 60_000);
    expect(status.totp_last_used_at).to.be.a('string');
    const listed = (await api().get('/api/users').set(sys).expect(200)).body.users.find((u: { username: string }) => u.username === 'alice');
    expect(listed.mfa).to.equal(true);
    // the secret is stored encrypted, never in clear
    expect(JSON.stringify(await svc.service.db('mfa_factors').select('*'))).not.to.include(secret);

    // the current code: a session, and the methods offered
    const first = await api().post('/api/auth/login').send({ username: 'alice', password: alice.password }).expect(200);
    expect(first.body.methods).to.have.members(['totp', 'recovery_code']);
    const now = codeAt(secret);
    const done = await api().post('/api/auth/login/mfa').send({ mfa_token: first.body.mfa_token, code: now }).expect(200);
    expect(done.body.user.username).to.equal('alice');
    await api().get('/api/me').set('Authorization', `Bearer ${done.body.token}`).expect(200);
    // the same code again: refused (no replay), and the token it came with is spent
    const again = await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: await firstStep(alice), code: now })
      .expect(401);
    expect(again.body.error.details.reason).to.equal('invalid_code');
    await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: first.body.mfa_token, code: codeAt(secret, stepsAway(1)) })
      .expect(401);
    // three steps away: refused
    const far = await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: again.body.error.details.mfa_token, code: codeAt(secret, stepsAway(3)) })
      .expect(401);
    // the token a wrong code answers works with a right one: the next step's code (drift the other way)
    await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: far.body.error.details.mfa_token, code: codeAt(secret, stepsAway(1)) })
      .expect(200);
    // codes are taken in order: once a later step's code was used, an earlier one is refused
    await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: await firstStep(alice), code: codeAt(secret) })
      .expect(401);
  });

  it('a recovery code works once; wrong codes lock like wrong passwords; each failure is a log line', async () => {
    const bob = await newUser('bob');
    const { recovery } = await enrol(await session(bob));
    const first = await firstStep(bob);
    await api().post('/api/auth/login/mfa').send({ mfa_token: first, code: recovery[0]!.toUpperCase() }).expect(200);
    const reused = await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: await firstStep(bob), code: recovery[0] })
      .expect(401);
    expect(reused.body.error.details.reason).to.equal('invalid_code');
    expect((await api().get('/api/users').set(sys).expect(200)).body.users.find((u: { username: string }) => u.username === 'bob')).to.include({ mfa: true });

    const before = logs.lines.length;
    let token: string = reused.body.error.details.mfa_token;
    let locked: request.Response | null = null;
    for (let i = 0; i < 6 && !locked; i++) {
      const res = await api().post('/api/auth/login/mfa').send({ mfa_token: token, code: '123456' });
      if (res.status === 429) locked = res;
      else {
        expect(res.status).to.equal(401);
        token = res.body.error.details.mfa_token;
      }
    }
    expect(locked, 'five wrong codes lock the pair').not.to.equal(null);
    expect(locked!.headers['retry-after']).to.match(/^\d+$/);
    // the password's lockout is the same: the password alone is now locked too
    await api().post('/api/auth/login').send({ username: 'bob', password: bob.password }).expect(429);
    const failures = logs.lines
      .slice(before)
      .map((l) => JSON.parse(l))
      .filter((l) => l.event === 'login_failed' && l.via === 'second_step');
    expect(failures.length).to.be.at.least(5);
    expect(logs.text()).not.to.include(recovery[1]!);
  });

  it('HTTP Basic never bypasses the second factor (401 mfa_required); API keys work', async () => {
    const carol = await newUser('carol');
    const token = await session(carol);
    const key = (await api().post('/api/me/api-keys').set('Authorization', `Bearer ${token}`).send({ label: 'program' }).expect(201)).body.token;
    await api().get('/api/me').set('Authorization', basic('carol', carol.password)).expect(200);
    await enrol(token);
    const refused = await api().get('/api/me').set('Authorization', basic('carol', carol.password)).expect(401);
    expect(refused.body.error.code).to.equal('mfa_required');
    // a wrong password stays the usual 401
    expect((await api().get('/api/me').set('Authorization', basic('carol', 'not-her-password')).expect(401)).body.error.code).to.equal('unauthorized');
    await api().get('/api/me').set('X-API-Key', key).expect(200);
  });

  it('enrolling and removing need a session; removal needs a code; an administrator resets, the CLI too', async () => {
    const dave = await newUser('dave');
    const token = await session(dave);
    const key = (await api().post('/api/me/api-keys').set('Authorization', `Bearer ${token}`).send({ label: 'k' }).expect(201)).body.token;
    await api().post('/api/me/mfa/totp').set('X-API-Key', key).expect(403);
    await api().post('/api/me/mfa/totp').set('Authorization', basic('dave', dave.password)).expect(403);
    const { secret } = await enrol(token);
    await api().delete('/api/me/mfa/totp').set('Authorization', `Bearer ${token}`).send({ code: '999999' }).expect(400);
    await api()
      .delete('/api/me/mfa/totp')
      .set('Authorization', `Bearer ${token}`)
      .send({ code: codeAt(secret, stepsAway(1)) })
      .expect(204);
    expect((await api().get('/api/me/mfa').set('Authorization', `Bearer ${token}`).expect(200)).body).to.deep.include({ totp: false, recovery_codes_left: 0 });

    // an administrator resets a user's factors: every session of theirs ends
    const t2 = await session(dave);
    await enrol(t2);
    const daveSession = (
      await api()
        .post('/api/auth/login/mfa')
        .send({ mfa_token: await firstStep(dave), code: (await svcCodes(dave.id))[0] })
        .expect(200)
    ).body.token;
    await api().delete(`/api/users/${dave.id}/mfa`).set('Authorization', adminAuth()).expect(204);
    await api().get('/api/me').set('Authorization', `Bearer ${daveSession}`).expect(401);
    expect((await api().get(`/api/users/${dave.id}`).set(sys).expect(200)).body.mfa).to.equal(false);
    await session(dave); // the password alone signs in again

    // the CLI recovers a locked-out operator
    const t3 = await session(dave);
    await enrol(t3);
    const run = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['--json', 'user', 'mfa-reset', 'dave']);
    expect(run.code, run.stderr).to.equal(0);
    expect(run.json()).to.deep.equal({ username: 'dave', mfa_reset: true });
    await session(dave);
    // again: nothing is left to remove, and the answer says so rather than claiming a removal
    const again = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['--json', 'user', 'mfa-reset', 'dave']);
    expect(again.code, again.stderr).to.equal(0);
    expect(again.json()).to.deep.equal({ username: 'dave', mfa_reset: false });
    const text = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['user', 'mfa-reset', 'dave']);
    expect(text.code, text.stderr).to.equal(0);
    expect(text.stdout).to.contain('dave had no second factor').and.not.contain('second factors of dave removed');
  });

  /** Recovery codes cannot be read back: a fresh set through the API, for tests that need one. */
  async function svcCodes(userId: string): Promise<string[]> {
    return svc.service.auth.mfa.recoveryCodes.replaceForTests(userId);
  }
  it('members of a required group reach only their profile and the enrolment until they enrol', async () => {
    await api()
      .patch('/api/settings/auth')
      .set(sys)
      .send({ mfa_required_groups: ['INT_VIEWER'] })
      .expect(200);
    try {
      const erin = await newUser('erin', ['INT_VIEWER']);
      const token = await session(erin);
      const auth = { Authorization: `Bearer ${token}` };
      await api().get('/api/me').set(auth).expect(200);
      expect((await api().get('/api/me/mfa').set(auth).expect(200)).body.required).to.equal(true);
      const walled = await api().get('/api/notifications').set(auth).expect(403);
      expect(walled.body.error.code).to.equal('mfa_enrollment_required');
      // the router matches any case and percent-decodes: so does the wall
      for (const path of ['/API/notifications', '/%61pi/notifications', '/api/Notifications/', '/api/%6Dotifications']) {
        expect((await api().get(path).set(auth)).body.error?.code, path).to.equal('mfa_enrollment_required');
      }
      // and no socket either: refused at the upgrade
      expect(await refusedStatus(svc, { headers: auth })).to.equal(403);
      await api().post('/api/me/api-keys').set(auth).send({ label: 'x' }).expect(403);
      // another group is not walled
      const frank = await newUser('frank', ['INT_USER']);
      await api()
        .get('/api/notifications')
        .set('Authorization', `Bearer ${await session(frank)}`)
        .expect(200);
      await enrol(token);
      await api().get('/api/notifications').set(auth).expect(200);
      (await WsClient.connect(svc, { headers: auth })).close();
    } finally {
      await api().patch('/api/settings/auth').set(sys).send({ mfa_required_groups: null }).expect(200);
    }
  });

  it('the login form hands over to the second step page; the session starts only after it', async () => {
    const hugo = await newUser('hugo');
    const { secret } = await enrol(await session(hugo), 'previous');
    const browser = request.agent(svc.url);
    const first = await browser
      .post('/login')
      .set('Origin', 'http://localhost:8080')
      .type('form')
      .send(`username=hugo&password=${hugo.password}&next=%2Fsettings`)
      .expect(303);
    expect(first.headers.location).to.equal('/login/mfa?next=%2Fsettings');
    await browser.get('/api/me').expect(401);
    const page = await browser.get('/login/mfa?next=%2Fsettings').expect(200);
    expect(page.text).to.include('autocomplete="one-time-code"').and.include('recovery codes');
    const done = await browser
      .post('/login/mfa')
      .set('Origin', 'http://localhost:8080')
      .type('form')
      .send(`code=${codeAt(secret)}&next=%2Fsettings`)
      .expect(303);
    expect(done.headers.location).to.equal('/settings');
    expect((await browser.get('/api/me').expect(200)).body.username).to.equal('hugo');
    // the page without a pending second step sends the browser back to sign in
    const stale = await request(svc.url).get('/login/mfa').expect(303);
    expect(stale.headers.location).to.equal('/login?error=second_step_expired');
  });

  it('a second step begun in a browser is bound to it', async () => {
    const gina = await newUser('gina');
    await enrol(await session(gina));
    const first = await api().post('/api/auth/login').set('Origin', 'http://localhost:8080').send({ username: 'gina', password: gina.password }).expect(200);
    const binding = setCookies(first)['svc.mfa'];
    expect(binding, 'a binding cookie').to.be.a('string');
    const code = (await svcCodes(gina.id))[0];
    // another browser (no cookie) with the stolen token: refused, and the owner's token is not spent by it
    const stolen = await api().post('/api/auth/login/mfa').set('Origin', 'http://localhost:8080').send({ mfa_token: first.body.mfa_token, code }).expect(401);
    expect(stolen.body.error.details.reason).to.equal('expired');
    expect(stolen.body.error.details).not.to.have.property('mfa_token');
    await api()
      .post('/api/auth/login/mfa')
      .set('Origin', 'http://localhost:8080')
      .set('Cookie', `svc.mfa=${binding}`)
      .send({ mfa_token: first.body.mfa_token, code })
      .expect(200);
    // used once: gone
    await api()
      .post('/api/auth/login/mfa')
      .set('Origin', 'http://localhost:8080')
      .set('Cookie', `svc.mfa=${binding}`)
      .send({ mfa_token: first.body.mfa_token, code: (await svcCodes(gina.id))[1] })
      .expect(401);
  });

  it('an enrolment started before the account had a factor cannot be confirmed after; a first factor ends the other sessions', async () => {
    const ivan = await newUser('ivan');
    const stale = await session(ivan); // opened before any factor (as if stolen)
    const mine = await session(ivan);
    // the stale session starts an app enrolment while there is no factor to step up with
    const planted = (await api().post('/api/me/mfa/totp').set('Authorization', `Bearer ${stale}`).expect(200)).body.secret as string;
    // the owner enrols from their session: the other sessions end, this one stays
    const { secret } = await enrol(mine);
    await api().get('/api/me').set('Authorization', `Bearer ${mine}`).expect(200);
    await api().get('/api/me').set('Authorization', `Bearer ${stale}`).expect(401);
    // and the planted enrolment is void: confirming it is refused even from a verified session
    const again = await api()
      .post('/api/me/mfa/totp/confirm')
      .set('Authorization', `Bearer ${mine}`)
      .send({ code: codeAt(planted) });
    expect(again.status, JSON.stringify(again.body)).to.equal(409);
    const rows = await svc.service.db('mfa_factors').where({ user_id: ivan.id }).select('kind', 'confirmed');
    expect(rows.map((r) => [r.kind, Boolean(r.confirmed)])).to.deep.equal([['totp', true]]);
    expect(codeAt(secret)).to.match(/^\d{6}$/);
  });

  it('a first factor needs a fresh sign-in or the current password: a stolen session cannot enrol its own', async () => {
    const nora = await newUser('nora');
    const token = await session(nora);
    const bearer = { Authorization: `Bearer ${token}` };
    // the session's sign-in ages past five minutes, as a stolen session's would be
    await svc.service
      .db('api_keys')
      .where({ user_id: nora.id, kind: 'session' })
      .update({ created_at: Date.now() - 6 * 60_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' }); // identities resolved before forget it, as time would
    for (const path of ['/api/me/mfa/totp', '/api/me/mfa/webauthn/options']) {
      const missing = await api().post(path).set(bearer).send({}).expect(400);
      expect(missing.body.error.details).to.deep.equal([
        { field: 'current_password', message: 'is required: a first second factor needs your current password, or a sign-in within the last 5 minutes' },
      ]);
      const wrong = await api().post(path).set(bearer).send({ current_password: 'not-the-password' }).expect(400);
      expect(wrong.body.error.details[0]).to.deep.equal({ field: 'current_password', message: 'is not correct' });
      await api().post(path).set(bearer).send({ current_password: nora.password }).expect(200);
    }
    // a wrong password here is a guess like any other: in the trail
    await svc.service.iam.audit.flush();
    const failed = await svc.service.db('audit_events').where({ action: 'auth.login_failed', target_name: 'nora' });
    expect(failed.length).to.be.greaterThan(0);
    // an account that signs in only through its provider: a fresh sign-in is the only proof
    await svc.service.db('users').where({ id: nora.id }).update({ hashed_password: null });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' });
    const sso = await api().post('/api/me/mfa/totp').set(bearer).send({ current_password: nora.password }).expect(400);
    expect(sso.body.error.details[0].message).to.match(/signs in through its provider\): sign in again/);
  });

  it('a session older than the step-up window must verify again before confirming another factor', async () => {
    const jane = await newUser('jane');
    const token = await session(jane);
    const { secret } = await enrol(token);
    // the session's verification ages past the window
    await svc.service
      .db('api_keys')
      .where({ user_id: jane.id, kind: 'session' })
      .update({ mfa_at: Date.now() - 24 * 3_600_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' }); // identities resolved before forget it, as time would
    const refused = await api()
      .post('/api/me/mfa/webauthn')
      .set('Authorization', `Bearer ${token}`)
      .send({ label: 'x', response: { id: 'a', rawId: 'a', type: 'public-key', response: {} } });
    expect(refused.status, JSON.stringify(refused.body)).to.equal(403);
    expect(refused.body.error.code).to.equal('step_up_required');
    const confirm = await api()
      .post('/api/me/mfa/totp/confirm')
      .set('Authorization', `Bearer ${token}`)
      .send({ code: codeAt(secret) });
    expect(confirm.body.error.code).to.equal('step_up_required');
  });

  it("wrong second factors from many addresses lock the account's second step", async () => {
    const kate = await newUser('kate');
    const { secret } = await enrol(await session(kate));
    let locked: request.Response | null = null;
    for (let i = 0; i < 12 && !locked; i++) {
      // every attempt from a different address: the per-address lockout never trips
      const first = await api()
        .post('/api/auth/login')
        .set('X-Forwarded-For', `203.0.113.${i + 1}`)
        .send({ username: 'kate', password: kate.password })
        .expect(200);
      const res = await api()
        .post('/api/auth/login/mfa')
        .set('X-Forwarded-For', `203.0.113.${i + 1}`)
        .send({ mfa_token: first.body.mfa_token, code: '000000' });
      if (res.status === 429) locked = res;
      else expect(res.status, JSON.stringify(res.body)).to.equal(401);
    }
    expect(locked, 'ten wrong codes lock the second step').not.to.equal(null);
    expect(Number(locked!.headers['retry-after'])).to.be.greaterThan(60);
    // even the right code waits now, from yet another address
    const first = await api().post('/api/auth/login').set('X-Forwarded-For', '198.51.100.7').send({ username: 'kate', password: kate.password }).expect(200);
    await api()
      .post('/api/auth/login/mfa')
      .set('X-Forwarded-For', '198.51.100.7')
      .send({ mfa_token: first.body.mfa_token, code: codeAt(secret) })
      .expect(429);
    // a passed second step (after the wait, here: the count cleared) clears it
    await svc.service.db('login_failures').where({ ip: 'second_factor' }).delete();
    const next = await api().post('/api/auth/login').set('X-Forwarded-For', '198.51.100.7').send({ username: 'kate', password: kate.password }).expect(200);
    await api()
      .post('/api/auth/login/mfa')
      .set('X-Forwarded-For', '198.51.100.7')
      .send({ mfa_token: next.body.mfa_token, code: codeAt(secret, stepsAway(1)) })
      .expect(200);
  });

  it("the password alone cannot lock the owner's device out of the second step; it makes no device known", async () => {
    const mira = await newUser('mira');
    const { secret, recovery } = await enrol(await session(mira));
    // the owner signs in on their laptop: the device becomes known after the second step only
    const step1 = await api().post('/api/auth/login').set('X-Forwarded-For', '192.0.2.10').send({ username: 'mira', password: mira.password }).expect(200);
    expect(deviceOf(step1), 'a device cookie on the password alone').to.equal(undefined);
    const step2 = await api()
      .post('/api/auth/login/mfa')
      .set('X-Forwarded-For', '192.0.2.10')
      .send({ mfa_token: step1.body.mfa_token, code: codeAt(secret, stepsAway(1)) })
      .expect(200);
    const laptop = deviceOf(step2);
    expect(laptop).to.be.a('string');
    // someone with the password guesses codes from many addresses until the account's count locks
    let locked = false;
    for (let i = 0; i < 12 && !locked; i++) {
      const first = await api()
        .post('/api/auth/login')
        .set('X-Forwarded-For', `203.0.113.${100 + i}`)
        .send({ username: 'mira', password: mira.password })
        .expect(200);
      expect(deviceOf(first)).to.equal(undefined);
      const res = await api()
        .post('/api/auth/login/mfa')
        .set('X-Forwarded-For', `203.0.113.${100 + i}`)
        .send({ mfa_token: first.body.mfa_token, code: '000000' });
      locked = res.status === 429;
    }
    expect(locked, "the account's count locks the guessers").to.equal(true);
    // the owner's known device still passes, with its own budget
    const again = await api()
      .post('/api/auth/login')
      .set('X-Forwarded-For', '192.0.2.10')
      .set('Cookie', `svc.device=${laptop}`)
      .send({ username: 'mira', password: mira.password })
      .expect(200);
    await api()
      .post('/api/auth/login/mfa')
      .set('X-Forwarded-For', '192.0.2.10')
      .set('Cookie', `svc.device=${laptop}`)
      // (the app's codes of this minute are spent: a recovery code)
      .send({ mfa_token: again.body.mfa_token, code: recovery[0] })
      .expect(200);
    // and a guesser is still locked out afterwards
    const late = await api().post('/api/auth/login').set('X-Forwarded-For', '203.0.113.200').send({ username: 'mira', password: mira.password }).expect(200);
    await api().post('/api/auth/login/mfa').set('X-Forwarded-For', '203.0.113.200').send({ mfa_token: late.body.mfa_token, code: '000000' }).expect(429);
  });

  it("a device cookie the password got before the first factor is not the owner's device: its code guesses meet the account's count", async () => {
    const omar = await newUser('omar');
    // the attacker signs in with the password while the account has no factor: a device cookie
    const early = await api().post('/api/auth/login').set('X-Forwarded-For', '203.0.113.230').send({ username: 'omar', password: omar.password }).expect(200);
    const stolen = deviceOf(early);
    expect(stolen).to.be.a('string');
    await enrol(await session(omar));
    // then alternates the right password and wrong codes with that cookie
    let locked = false;
    for (let i = 0; i < 14 && !locked; i++) {
      const first = await api()
        .post('/api/auth/login')
        .set('X-Forwarded-For', `203.0.113.${231 + (i % 3)}`)
        .set('Cookie', `svc.device=${stolen}`)
        .send({ username: 'omar', password: omar.password })
        .expect(200);
      const res = await api()
        .post('/api/auth/login/mfa')
        .set('X-Forwarded-For', `203.0.113.${231 + (i % 3)}`)
        .set('Cookie', `svc.device=${stolen}`)
        .send({ mfa_token: first.body.mfa_token, code: '000000' });
      locked = res.status === 429;
    }
    expect(locked, 'the account-wide count holds a cookie older than the factor').to.equal(true);
  });

  it('removing the app takes its code through the attempt gate: guesses end in 429 and are in the trail; without a code it needs step-up', async () => {
    const lena = await newUser('lena');
    const token = await session(lena);
    const { secret } = await enrol(token);
    // from addresses of its own: the per-address budget is not the earlier tests' to share
    const bearer = { Authorization: `Bearer ${token}`, 'X-Forwarded-For': '198.51.100.40' };
    const elsewhere = { Authorization: `Bearer ${token}`, 'X-Forwarded-For': '198.51.100.41' };
    const before = (await svc.service.db('audit_events').max({ n: 'seq' }).first())?.n ?? 0;
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      statuses.push(
        (
          await api()
            .delete('/api/me/mfa/totp')
            .set(bearer)
            .send({ code: String(100000 + i) })
        ).status,
      );
    }
    // five wrong from this address within a minute, then the lockout answers (no more guesses are checked)
    expect(statuses.slice(0, 5)).to.deep.equal([400, 400, 400, 400, 400]);
    expect(new Set(statuses.slice(5))).to.deep.equal(new Set([429]));
    const locked = await api()
      .delete('/api/me/mfa/totp')
      .set(bearer)
      .send({ code: codeAt(secret, stepsAway(1)) });
    expect(locked.status).to.equal(429);
    expect(Number(locked.headers['retry-after'])).to.be.greaterThan(0);
    expect((await api().get('/api/me/mfa').set(bearer).expect(200)).body.totp).to.equal(true);
    await svc.service.iam.audit.flush();
    const events = await svc.service
      .db('audit_events')
      .where('seq', '>', before)
      .andWhere({ target_name: 'lena' })
      .whereIn('action', ['auth.login_failed', 'auth.locked']);
    const count = (rows: Array<{ details: string }>) => rows.reduce((n, r) => n + ((JSON.parse(r.details) as { count?: number }).count ?? 1), 0);
    expect(count(events.filter((e) => e.action === 'auth.login_failed'))).to.equal(5);
    expect(count(events.filter((e) => e.action === 'auth.locked'))).to.equal(8);
    expect(events.every((e) => JSON.parse(e.details).via === 'factor_removal')).to.equal(true);

    // without a code, removal needs a factor verified within the step-up window
    await svc.service.db('login_failures').where({ username: 'lena' }).delete();
    await svc.service
      .db('api_keys')
      .where({ user_id: lena.id, kind: 'session' })
      .update({ mfa_at: Date.now() - 24 * 3_600_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' });
    const stale = await api().delete('/api/me/mfa/totp').set(elsewhere).send({});
    expect(stale.status, JSON.stringify(stale.body)).to.equal(403);
    expect(stale.body.error.code).to.equal('step_up_required');
    await api()
      .post('/api/auth/step-up')
      .set(elsewhere)
      .send({ code: codeAt(secret, stepsAway(1)) })
      .expect(204);
    await api().delete('/api/me/mfa/totp').set(elsewhere).expect(204);
    expect((await api().get('/api/me/mfa').set(elsewhere).expect(200)).body.totp).to.equal(false);
  });
});
