import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { startService, basic, SYSTEM_KEY, type TestService } from '../support/service.js';
import { WsClient } from '../gateway/helpers.js';
import { previousStepCode, totpCode as codeAt } from './helpers.js';

/**
 * Step-up: a web session of an account with a second factor verifies it again before an action
 * that reaches the host or changes who is trusted, then not again for the window.
 */
describe('second factor: step-up before what reaches the host', function () {
  this.timeout(60_000);
  let svc: TestService;
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };
  let secret: string;
  let token: string;
  let sessionId: string;
  /**
   * A code for each verification: TOTP codes are taken once and in order, so within the three
   * steps of the drift window the enrolment and the sign-in have used two; the rest of the
   * verifications use recovery codes, which step-up takes as well.
   */
  let recovery: string[] = [];
  const nextCode = () => recovery.shift()!;
  let targetId: string;
  let operatorId: string;

  before(async () => {
    svc = await startService({ env: { SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    await api().put('/api/settings/system-api-key').set('Authorization', basic('admin', 'admin-test-password')).send({ key: SYSTEM_KEY }).expect(204);
    targetId = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'target', password: 'target-password', groups: ['INT_USER'] })
        .expect(201)
    ).body.id;
    // an account whose group reaches the host (the system key needs no step-up to set it up)
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'hostops', permissions: ['socket:mounts:repair'] })
      .expect(201);
    operatorId = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'operator', password: 'operator-password', groups: ['INT_USER', 'hostops'] })
        .expect(201)
    ).body.id;
    // the superadmin enrols an authenticator app from a session, then signs in with both factors
    const first = await api().post('/api/auth/login').send({ username: 'admin', password: 'admin-test-password' }).expect(200);
    const bearer = { Authorization: `Bearer ${first.body.token}` };
    secret = (await api().post('/api/me/mfa/totp').set(bearer).expect(200)).body.secret;
    recovery = (
      await api()
        .post('/api/me/mfa/totp/confirm')
        .set(bearer)
        .send({ code: await previousStepCode(secret) })
        .expect(200)
    ).body.recovery_codes;
    const again = await api().post('/api/auth/login').send({ username: 'admin', password: 'admin-test-password' }).expect(200);
    const done = await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: again.body.mfa_token, code: codeAt(secret, Date.now()) })
      .expect(200);
    token = done.body.token;
    sessionId = (await api().get('/api/me/api-keys').set('Authorization', `Bearer ${token}`).expect(200)).body.keys.find(
      (k: { current: boolean }) => k.current,
    ).id;
    fs.mkdirSync(path.join(svc.dataDir, 'managed', 'work'), { recursive: true });
  });
  after(async () => svc?.destroy());

  /**
   * The session's last verification moved out of the window, as 16 minutes passing would (the
   * identities resolved before, which carry when it was, are forgotten as time would expire them).
   */
  const age = async () => {
    await svc.service
      .db('api_keys')
      .where({ id: sessionId })
      .update({ mfa_at: Date.now() - 16 * 60_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' });
  };

  type Action = [
    what: string,
    method: 'post' | 'put' | 'patch' | 'delete',
    path: () => string,
    body: Record<string, unknown> | (() => Record<string, unknown>),
    ok: number,
  ];
  const bodyOf = (b: Action[3]) => (typeof b === 'function' ? b() : b);
  const actions: Action[] = [
    ['rotate the system key', 'put', () => '/api/settings/system-api-key', { key: `${SYSTEM_KEY}-rotated` }, 204],
    ['change the login provider settings', 'patch', () => '/api/settings/auth', { oidc_label: 'Company SSO' }, 200],
    ['grant a host permission through a group', 'post', () => '/api/groups', { name: 'repairers', permissions: ['socket:mounts:repair'] }, 201],
    ['grant a host permission to a user', 'patch', () => `/api/users/${targetId}`, { extra_permissions: ['socket:container:cleanup'] }, 200],
    ['grant the superadmin role', 'patch', () => `/api/users/${targetId}`, { roles: ['superadmin'] }, 200],
    ['set the password of an account that reaches the host', 'post', () => `/api/users/${operatorId}/password`, { new_password: 'operator-password-2' }, 204],
    ['rename a group that reaches the host', 'patch', () => '/api/groups/hostops', { name: 'hostops-renamed' }, 200],
    ["remove another user's factors", 'delete', () => `/api/users/${targetId}/mfa`, {}, 204],
    ['issue an API key (it needs no second factor afterwards)', 'post', () => '/api/me/api-keys', { label: 'made after step-up' }, 201],
    [
      'repair a managed directory (a host operation)',
      'post',
      () => '/api/socket/repair',
      () => ({ target_dir: path.join(svc.dataDir, 'managed', 'work'), mode: '0750' }),
      200,
    ],
  ];

  it('each listed action answers 403 step_up_required without a fresh verification, and succeeds after one', async () => {
    await age();
    const bearer = { Authorization: `Bearer ${token}` };
    for (const [what, method, url, body] of actions) {
      const res = await (api() as any)[method](url()).set(bearer).send(bodyOf(body));
      expect(res.status, `${what}: ${JSON.stringify(res.body)}`).to.equal(403);
      expect(res.body.error.code, what).to.equal('step_up_required');
    }
    // nothing happened
    expect((await api().get(`/api/users/${targetId}`).set(sys).expect(200)).body).to.deep.include({ roles: [], extra_permissions: [] });
    await api().get('/api/groups/repairers').set(sys).expect(404);
    await api().get('/api/groups/hostops').set(sys).expect(200);
    await api().post('/api/auth/login').send({ username: 'operator', password: 'operator-password' }).expect(200);

    await api().post('/api/auth/step-up').set(bearer).send({ code: '000000' }).expect(401);
    await api().post('/api/auth/step-up').set(bearer).send({ code: nextCode() }).expect(204);
    for (const [what, method, url, body, ok] of actions) {
      const res = await (api() as any)[method](url()).set(bearer).send(bodyOf(body));
      expect(res.status, `${what}: ${JSON.stringify(res.body)}`).to.equal(ok);
    }
  });

  it('a ws connection of the session needs the step-up for a host operation too', async () => {
    await age();
    const ws = await WsClient.connect(svc, { headers: { Authorization: `Bearer ${token}` } });
    try {
      const repair = { request_id: 'r1', operation: 'mounts:repair', args: { target_dir: path.join(svc.dataDir, 'managed', 'work'), mode: '0755' } };
      ws.send({ event: 'socket:request', payload: repair });
      const refused = await ws.next('socket:response', (f) => f.payload.request_id === 'r1');
      expect(refused.payload.error.code).to.equal('step_up_required');
      await api().post('/api/auth/step-up').set('Authorization', `Bearer ${token}`).send({ code: nextCode() }).expect(204);
      ws.send({ event: 'socket:request', payload: { ...repair, request_id: 'r2' } });
      const done = await ws.next('socket:response', (f) => f.payload.request_id === 'r2');
      expect(done.payload.ok, JSON.stringify(done.payload)).to.equal(true);
    } finally {
      await ws.close();
    }
  });

  it('API keys, the system key and accounts without a factor need no step-up; step-up itself needs a session', async () => {
    // issuing the key is itself a step-up action; using it needs none
    await api().post('/api/auth/step-up').set('Authorization', `Bearer ${token}`).send({ code: nextCode() }).expect(204);
    const key = (await api().post('/api/me/api-keys').set('Authorization', `Bearer ${token}`).send({ label: 'automation' }).expect(201)).body.token;
    await age();
    await api().patch('/api/settings/auth').set('X-API-Key', key).send({ oidc_label: 'Via key' }).expect(200);
    // (the first test rotated the system key)
    await api().patch('/api/settings/auth').set('X-API-Key', `${SYSTEM_KEY}-rotated`).send({ oidc_label: 'Via system key' }).expect(200);
    await api().post('/api/auth/step-up').set('X-API-Key', key).send({ code: '123456' }).expect(403);
    // the session itself still needs it
    expect((await api().patch('/api/settings/auth').set('Authorization', `Bearer ${token}`).send({ oidc_label: 'x' }).expect(403)).body.error.code).to.equal(
      'step_up_required',
    );
  });

  it('documents step-up in the API document', async () => {
    const doc = (await api().get('/openapi.json').expect(200)).body;
    expect(doc.paths['/api/settings/auth'].patch['x-step-up']).to.equal(true);
    expect(doc.paths['/api/settings/system-api-key'].put['x-step-up']).to.equal(true);
    expect(doc.paths['/api/users/{id}/mfa'].delete['x-step-up']).to.equal(true);
    expect(doc.paths['/api/me/api-keys'].post['x-step-up']).to.equal(true);
    expect(doc.paths['/api/socket/repair'].post['x-step-up']).to.equal(true);
    expect(doc.components.schemas.Error.properties.error.properties.code.enum).to.include.members([
      'step_up_required',
      'mfa_required',
      'mfa_enrollment_required',
    ]);
  });
});
