import { expect } from 'chai';
import request from 'supertest';
import { startService, SYSTEM_KEY, type TestService } from '../support/service.js';
import { previousStepCode } from './helpers.js';
import { keysBeforeFactor } from '../../src/auth/routes/me.js';

interface KeyRow {
  id: string;
  kind: string;
  label: string;
  prefix: string;
}

/**
 * API keys and the second factor: a key issued before the account had a factor keeps working,
 * but no key of an account with a factor issues a key (a narrower one neither); a web session
 * that verified its factor lately does. Enrolling lists the keys issued before the factor, and
 * one call revokes them all.
 */
describe('second factor: keys issued before it', function () {
  this.timeout(60_000);
  let svc: TestService;
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };

  before(async () => {
    svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY } });
  });
  after(async () => svc?.destroy());

  /** The audit events of `action` about `username`'s keys, oldest first (the recorder flushed first). */
  async function events(action: string, username: string) {
    await svc.service.iam.audit.flush();
    return (await svc.service.db('audit_events').where({ action, actor_username: username }).orderBy('seq')).map((r) => ({
      outcome: r.outcome as string,
      method: r.actor_method as string | null,
      target: r.target_name as string | null,
      targetId: r.target_id as string | null,
      details: JSON.parse(r.details) as Record<string, unknown>,
    }));
  }

  it('a key issued before enrolment reads on, but issues no key afterwards; a session that stepped up does', async () => {
    const password = 'kim-password-1';
    const kimId = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'kim', password, groups: ['INT_USER'] })
        .expect(201)
    ).body.id as string;
    const token = (await api().post('/api/auth/login').send({ username: 'kim', password }).expect(200)).body.token as string;
    const session = { Authorization: `Bearer ${token}` };
    const issue = (auth: Record<string, string>, body: Record<string, unknown>) => api().post('/api/me/api-keys').set(auth).send(body);

    // no factor yet: a session and a key issue keys (a scoped one, narrower ones)
    const early = (await issue(session, { label: 'early automation' }).expect(201)).body;
    const scoped = (await issue(session, { label: 'early scoped', scopes: ['api:read', 'api:write'] }).expect(201)).body;
    const minted = (await issue({ 'X-API-Key': early.token }, { label: 'minted with a key' }).expect(201)).body;

    // the enrolment answer lists the three (a key minted with another before it), never a token
    const started = (await api().post('/api/me/mfa/totp').set(session).expect(200)).body;
    const confirmed = (
      await api()
        .post('/api/me/mfa/totp/confirm')
        .set(session)
        .send({ code: await previousStepCode(started.secret) })
        .expect(200)
    ).body;
    expect(confirmed.recovery_codes).to.have.length(10);
    const listed = confirmed.keys_before_factor as KeyRow[];
    expect(listed.map((k) => k.id)).to.have.members([minted.id, scoped.id, early.id]);
    expect(listed.findIndex((k) => k.id === minted.id)).to.be.below(listed.findIndex((k) => k.id === early.id));
    expect(listed.find((k) => k.id === early.id)).to.include({ kind: 'key', label: 'early automation', prefix: early.prefix });
    expect(JSON.stringify(listed)).not.to.include(early.token);

    // automation goes on: the keys read as before
    expect((await api().get('/api/me').set('X-API-Key', early.token).expect(200)).body).to.include({ username: 'kim', method: 'api_key' });
    await api().get('/api/me').set('Authorization', `Bearer ${scoped.token}`).expect(200);

    // but none issues a key now, a narrower one neither, whatever header carries it
    const start = (await events('key.issued', 'kim')).length;
    const refused = await issue({ 'X-API-Key': early.token }, { label: 'after the factor' }).expect(403);
    expect(refused.body.error.code).to.equal('forbidden');
    expect(refused.body.error.message).to.include('signed-in session').and.include('step-up');
    await issue({ Authorization: `Bearer ${scoped.token}` }, { label: 'narrower', scopes: ['api:read'] }).expect(403);
    await issue({ 'X-API-Key': minted.token }, { label: 'from the minted one' }).expect(403);
    expect((await api().get('/api/me/api-keys').set(session).expect(200)).body.keys.filter((k: KeyRow) => k.kind === 'key')).to.have.length(3);
    // each refusal is one denied event by the key, naming why; none is also a route's denial
    const denied = (await events('key.issued', 'kim')).slice(start);
    expect(denied.map((e) => [e.outcome, e.method, e.target])).to.deep.equal([
      ['denied', 'api_key', 'after the factor'],
      ['denied', 'api_key', 'narrower'],
      ['denied', 'api_key', 'from the minted one'],
    ]);
    expect(denied[0]!.details).to.include({ code: 'forbidden' });
    expect(await events('request.denied', 'kim')).to.deep.equal([]);

    // the session that enrolled verified the factor: it issues one; once that is old, after step-up
    const later = (await issue(session, { label: 'after the factor' }).expect(201)).body;
    // the session's verification moved out of the window, as 16 minutes would (its identity forgotten too)
    await svc.service
      .db('api_keys')
      .where({ kind: 'session', user_id: kimId })
      .update({ mfa_at: Date.now() - 16 * 60_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'user', user_id: kimId });
    expect((await issue(session, { label: 'stale session' }).expect(403)).body.error.code).to.equal('step_up_required');
    await api().post('/api/auth/step-up').set(session).send({ code: confirmed.recovery_codes[0] }).expect(204);
    await issue(session, { label: 'stepped up' }).expect(201);
    // keys issued after the factor are not listed again; the early ones still are
    expect((await keysBeforeFactor(svc.service.auth, kimId)).map((k) => k.id)).to.have.members([minted.id, scoped.id, early.id]);

    // one step revokes them, from the session (not with a key), each its own key.revoked event
    // (the minted key first: revoked with its parent, it would have none)
    await api().post('/api/me/api-keys/revoke-before-factor').set('X-API-Key', later.token).expect(403);
    const revokedBefore = (await events('key.revoked', 'kim')).length;
    expect((await api().post('/api/me/api-keys/revoke-before-factor').set(session).expect(200)).body).to.deep.equal({ revoked: 3 });
    const revokedEvents = (await events('key.revoked', 'kim')).slice(revokedBefore);
    expect(revokedEvents.map((e) => [e.outcome, e.targetId])).to.have.deep.members([
      ['success', minted.id],
      ['success', scoped.id],
      ['success', early.id],
    ]);
    for (const t of [early.token, scoped.token, minted.token]) await api().get('/api/me').set('X-API-Key', t).expect(401);
    // what was issued after the factor stays; nothing is left to revoke
    await api().get('/api/me').set('X-API-Key', later.token).expect(200);
    expect((await api().post('/api/me/api-keys/revoke-before-factor').set(session).expect(200)).body).to.deep.equal({ revoked: 0 });
  });

  it('a key of an account with a factor mints no credential by any route: no account with a password or a role, no password or factor reset of another', async () => {
    // a superadmin with a factor, and a key made before it (or stolen): the chain it tried was to
    // make an account of its own that then resets the owner's factor and password
    const password = 'sue-password-1';
    const sueId = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'sue', password, roles: ['superadmin'], groups: ['INT_ADMIN'] })
        .expect(201)
    ).body.id as string;
    const token = (await api().post('/api/auth/login').send({ username: 'sue', password }).expect(200)).body.token as string;
    const session = { Authorization: `Bearer ${token}` };
    const key = { 'X-API-Key': (await api().post('/api/me/api-keys').set(session).send({ label: 'early' }).expect(201)).body.token as string };
    const started = (await api().post('/api/me/mfa/totp').set(session).expect(200)).body;
    await api()
      .post('/api/me/mfa/totp/confirm')
      .set(session)
      .send({ code: await previousStepCode(started.secret) })
      .expect(200);
    const otherId = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'otto', password: 'otto-password-1', groups: ['INT_USER'] })
        .expect(201)
    ).body.id as string;
    const refusals = [
      await api()
        .post('/api/users')
        .set(key)
        .send({ username: 'evil', password: 'evil-password-1', groups: ['INT_ADMIN'] }),
      await api()
        .post('/api/users')
        .set(key)
        .send({ username: 'evil2', roles: ['superadmin'], groups: ['INT_VIEWER'] }),
      await api().post(`/api/users/${otherId}/password`).set(key).send({ new_password: 'otto-password-2' }),
      await api().patch(`/api/users/${otherId}`).set(key).send({ password: 'otto-password-3' }),
      await api()
        .patch(`/api/users/${otherId}`)
        .set(key)
        .send({ roles: ['superadmin'] }),
      await api().delete(`/api/users/${otherId}/mfa`).set(key),
      await api().post(`/api/users/${otherId}/api-keys`).set(key).send({ label: 'for otto' }),
      // host access is trust handed out as well: a permission that reaches the host, or a group holding one
      await api()
        .patch(`/api/users/${otherId}`)
        .set(key)
        .send({ extra_permissions: ['socket:container:spawn'] }),
      await api()
        .post('/api/groups')
        .set(key)
        .send({ name: 'key-runners', permissions: ['socket:container:spawn'] }),
    ];
    for (const res of refusals) {
      expect(res.status, JSON.stringify(res.body)).to.equal(403);
      expect(res.body.error.message).to.match(/^an API key of an account with a second factor cannot .+: do it from a signed-in session/);
    }
    // what mints nothing stays the key's to do: an account without a password (single sign-on), a profile change
    await api()
      .post('/api/users')
      .set(key)
      .send({ username: 'sso-only', groups: ['INT_VIEWER'] })
      .expect(201);
    await api().patch(`/api/users/${otherId}`).set(key).send({ display_name: 'Otto' }).expect(200);
    await api().get('/api/me').set(key).expect(200);
    expect((await api().get(`/api/users/${sueId}`).set(sys).expect(200)).body.mfa).to.equal(true);
  });

  it('an account without a factor: its keys issue keys, nothing is listed, nothing revoked', async () => {
    const password = 'lou-password-1';
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'lou', password, groups: ['INT_USER'] })
      .expect(201);
    const token = (await api().post('/api/auth/login').send({ username: 'lou', password }).expect(200)).body.token as string;
    const key = (await api().post('/api/me/api-keys').set('Authorization', `Bearer ${token}`).send({ label: 'k' }).expect(201)).body;
    await api().post('/api/me/api-keys').set('X-API-Key', key.token).send({ label: 'from the key' }).expect(201);
    expect((await api().post('/api/me/api-keys/revoke-before-factor').set('Authorization', `Bearer ${token}`).expect(200)).body).to.deep.equal({ revoked: 0 });
    await api().get('/api/me').set('X-API-Key', key.token).expect(200);
  });
});
