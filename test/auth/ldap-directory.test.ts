import { expect } from 'chai';
import request from 'supertest';
import { adminAuth, ADMIN, basic, startService, testEnv, type TestService } from '../support/service.js';
import { cli } from '../cli/helpers.js';
import { relayTo } from '../support/tcp-relay.js';
import { LDAP_GROUPS, LDAP_PEOPLE, startSlapd, type Slapd } from '../support/slapd.js';
import { capturingLogger } from '../sockets/helpers.js';
import { loadConfig } from '../../src/config.js';
import { REFUSAL_TEXT } from '../../src/auth/providers/refusal.js';
import { createUser, patchAuthSettings, previousStepCode, totpCode, unusedPort } from './helpers.js';

/**
 * What an operator does with the directory through the service (a real OpenLDAP slapd): a list of
 * servers with a dead one first, the settings' warnings at boot and in the API, test connection
 * and test login (permission, step-up, audit, nothing signed in or counted).
 */

const log = (logs: ReturnType<typeof capturingLogger>) =>
  logs.lines.flatMap((l) => l.split('\n').filter(Boolean)).map((l) => JSON.parse(l) as Record<string, any>);

describe('LDAP directory operations through the service (real slapd)', function () {
  this.timeout(60_000);
  let slapd: Slapd;
  let svc: TestService;
  let dead: string;
  const logs = capturingLogger('info');
  const api = () => request(svc.url);
  const admin = () => ({ Authorization: adminAuth() });

  before(async function () {
    this.timeout(120_000);
    slapd = await startSlapd();
    dead = `ldap://127.0.0.1:${await unusedPort()}`;
    svc = await startService({
      logger: logs.logger,
      env: { SERVICE_AUTH_PROVIDERS: 'ldap,local', SERVICE_LDAP_URL: `${dead} ${slapd.url}`, SERVICE_LDAP_TLS_VERIFY: 'false' },
    });
    await patchAuthSettings(svc.url, {
      ldap_bind_dn: slapd.bindDN,
      ldap_bind_password: slapd.bindPassword,
      ldap_base_dn: slapd.baseDN,
      ldap_group_mapping: { [LDAP_GROUPS.admins]: ['INT_ADMIN'], [LDAP_GROUPS.developers]: ['developers'] },
    }).expect(200);
  });

  after(async () => {
    try {
      await svc?.destroy();
    } finally {
      await slapd?.stop();
    }
  });

  it('warns at boot, once, of certificate checks off and a plain ldap:// server, naming the settings; the settings API says so too', async () => {
    const warned = () => log(logs).filter((l) => l.event === 'ldap_insecure_setting');
    expect(warned().map((l) => [l.field, l.env])).to.have.deep.members([
      ['ldap_url', 'SERVICE_LDAP_URL'],
      ['ldap_tls_verify', 'SERVICE_LDAP_TLS_VERIFY'],
    ]);
    expect(warned().find((l) => l.field === 'ldap_url')!.msg)
      .to.include(dead)
      .and.include(slapd.url)
      .and.include('SERVICE_LDAP_STARTTLS');
    // the chain is rebuilt by a change: nothing said again
    await patchAuthSettings(svc.url, { ldap_user_filter: '(uid={username})' }).expect(200);
    expect(warned()).to.have.length(2);
    const view = (await api().get('/api/settings/auth').set(admin()).expect(200)).body;
    expect(view.warnings.map((w: any) => [w.field, w.env])).to.deep.equal([
      ['ldap_url', 'SERVICE_LDAP_URL'],
      ['ldap_tls_verify', 'SERVICE_LDAP_TLS_VERIFY'],
    ]);
    expect(view.warnings[1].message).to.match(/^certificate verification is off \(ldap_tls_verify, SERVICE_LDAP_TLS_VERIFY\)/);
  });

  it('signs in through the second server when the first refuses connections, and remembers the one that answered', async () => {
    const before = log(logs).filter((l) => l.event === 'ldap_server_skipped').length;
    const res = await api().post('/api/auth/login').send({ username: 'alice', password: LDAP_PEOPLE.alice.password }).expect(200);
    expect(res.body.user.username).to.equal('alice');
    const skipped = log(logs).filter((l) => l.event === 'ldap_server_skipped');
    expect(skipped).to.have.length(before + 1);
    expect(skipped.at(-1)!.url).to.equal(slapd.url);
    expect(skipped.at(-1)!.failures).to.deep.equal([{ url: dead, kind: 'refused', reason: 'connection refused (nothing listens on that port)' }]);
    // a wrong password is not a reason to try another server, and the dead one is not tried first any more
    await api().post('/api/auth/login').send({ username: 'bob', password: 'not-bobs-password' }).expect(401);
    await api().post('/api/auth/login').send({ username: 'bob', password: LDAP_PEOPLE.bob.password }).expect(200);
    expect(log(logs).filter((l) => l.event === 'ldap_server_skipped')).to.have.length(before + 1);
  });

  it('a URL list is checked entry by entry: the field and each bad URL are named (API and environment)', async () => {
    const res = await api()
      .post('/api/settings/auth/ldap/test-connection')
      .set(admin())
      .send({ settings: { ldap_url: `${slapd.url} http://dc2.example ldaps:// ${slapd.url}x` } })
      .expect(400);
    const detail = res.body.error.details.find((d: any) => d.field === 'settings.ldap_url' || d.field === 'ldap_url');
    expect(detail, JSON.stringify(res.body)).to.not.equal(undefined);
    expect(detail.message).to.include('"http://dc2.example"').and.include('"ldaps://"');
    expect(() => loadConfig({ SERVICE_LDAP_URL: 'ldap://dc1.example ftp://dc2.example', SERVICE_DATA_DIR: '/tmp/unused' }, { writeFiles: false })).to.throw(
      /SERVICE_LDAP_URL.*"ftp:\/\/dc2\.example"/,
    );
    expect(
      loadConfig({ SERVICE_LDAP_URL: ' ldaps://dc1.example   ldaps://dc2.example:636 ', SERVICE_DATA_DIR: '/tmp/unused' }, { writeFiles: false }).ldap.url,
    ).to.equal('ldaps://dc1.example ldaps://dc2.example:636');
  });

  it('test connection: which server answered, what it is, how long, each server that could not be used; settings tried before saving', async () => {
    const ok = (await api().post('/api/settings/auth/ldap/test-connection').set(admin()).send({}).expect(200)).body;
    expect(ok).to.include({ ok: true, server: 'openldap', kind: null, reason: null });
    expect(ok.url).to.equal(slapd.url);
    expect(ok.ms).to.be.a('number').and.be.below(5000);
    expect(ok.warnings.map((w: any) => w.field)).to.deep.equal(['ldap_url', 'ldap_tls_verify']);

    const noBase = (
      await api()
        .post('/api/settings/auth/ldap/test-connection')
        .set(admin())
        .send({ settings: { ldap_base_dn: 'dc=nowhere,dc=test' } })
        .expect(200)
    ).body;
    expect(noBase).to.include({ ok: false, kind: 'base_dn' });
    expect(noBase.reason).to.match(/base DN dc=nowhere,dc=test does not exist.*SERVICE_LDAP_BASE_DN/);

    // a new account needs its password given again; a wrong one is named as such, not as a dead server
    const refused = await api()
      .post('/api/settings/auth/ldap/test-connection')
      .set(admin())
      .send({ settings: { ldap_bind_dn: `cn=nobody,${slapd.baseDN}` } })
      .expect(400);
    expect(refused.body.error.details[0].field).to.equal('ldap_bind_password');
    const wrongBind = (
      await api()
        .post('/api/settings/auth/ldap/test-connection')
        .set(admin())
        .send({ settings: { ldap_bind_dn: slapd.bindDN, ldap_bind_password: 'wrong-bind-password' } })
        .expect(200)
    ).body;
    expect(wrongBind).to.include({ ok: false, kind: 'service_bind' });
    expect(wrongBind.reason).to.match(/wrong bind DN or password/);
    // nothing was saved
    const saved = (await api().get('/api/settings/auth').set(admin()).expect(200)).body.settings;
    expect(saved.ldap_base_dn.value).to.equal(slapd.baseDN);
    // a locked field cannot be tried either (the environment decides it)
    await api()
      .post('/api/settings/auth/ldap/test-connection')
      .set(admin())
      .send({ settings: { ldap_tls_verify: true } })
      .expect(409);
  });

  it('test login: would sign in, with the mapped groups; no user, session or lockout; the password never logged or recorded; its own audit event', async () => {
    const test = (username: string, password: string) => api().post('/api/settings/auth/ldap/test-login').set(admin()).send({ username, password });
    const carolBefore = await svc.service.db('users').where({ username: 'carol' }).first();
    expect(carolBefore).to.equal(undefined);
    const keysBefore = (await svc.service.db('api_keys').count({ n: '*' }))[0]!.n;

    const yes = (await test('carol', LDAP_PEOPLE.carol.password).expect(200)).body;
    expect(yes).to.include({ would_sign_in: true, outcome: 'signed_in', username: 'carol', dn: LDAP_PEOPLE.carol.dn, url: slapd.url, in_chain: true });
    expect(yes.groups).to.deep.equal([]);
    expect(yes.directory_groups).to.deep.equal([LDAP_GROUPS.staff]);
    const alice = (await test('alice', LDAP_PEOPLE.alice.password).expect(200)).body;
    expect(alice.groups).to.have.members(['INT_ADMIN', 'developers']);

    // more wrong passwords than the lockout allows: carol is not locked out
    for (let i = 0; i < 7; i++)
      expect((await test('carol', `wrong-${i}`).expect(200)).body).to.include({ would_sign_in: false, outcome: 'invalid_credentials' });
    expect((await test('nobody-here', 'whatever-1').expect(200)).body.outcome).to.equal('invalid_credentials');
    expect(await svc.service.db('users').where({ username: 'carol' }).first()).to.equal(undefined);
    expect((await svc.service.db('api_keys').count({ n: '*' }))[0]!.n).to.equal(keysBefore);
    await api().post('/api/auth/login').send({ username: 'carol', password: LDAP_PEOPLE.carol.password }).expect(200);

    await svc.service.iam.audit.flush();
    const events = await svc.service
      .db('audit_events')
      .where({ action: 'auth.ldap_test_login' })
      .orderBy('seq')
      .select('actor_username', 'target_name', 'outcome', 'details');
    // (repeated failures are coalesced by the trail, as every refusal is)
    expect(events.map((e: any) => [e.target_name, e.outcome]).slice(0, 3)).to.deep.equal([
      ['carol', 'success'],
      ['alice', 'success'],
      ['carol', 'failure'],
    ]);
    expect(events.map((e: any) => e.target_name)).to.include('nobody-here');
    expect(events[0]).to.include({ actor_username: ADMIN.username, target_name: 'carol', outcome: 'success' });
    expect(JSON.parse(events[0].details)).to.include({ outcome: 'signed_in', url: slapd.url });
    expect(events[2]).to.include({ target_name: 'carol', outcome: 'failure' });
    const everything = JSON.stringify(events) + logs.text();
    expect(everything).to.not.include(LDAP_PEOPLE.carol.password);
    expect(everything).to.not.include(LDAP_PEOPLE.alice.password);
    expect(everything).to.not.include('wrong-3');
  });

  it('test login and test connection need feature:admin.settings; test login needs step-up from a session with a second factor', async function () {
    await createUser(svc.url, { username: 'plain', password: 'Plain-user-Password-9', groups: ['INT_USER'] });
    const plain = { Authorization: basic('plain', 'Plain-user-Password-9') };
    await api().post('/api/settings/auth/ldap/test-connection').set(plain).send({}).expect(403);
    await api().post('/api/settings/auth/ldap/test-login').set(plain).send({ username: 'alice', password: 'x' }).expect(403);
    // bad input names the field
    const bad = await api().post('/api/settings/auth/ldap/test-login').set(admin()).send({ username: 'alice' }).expect(400);
    expect(bad.body.error.details.map((d: any) => d.field)).to.include('password');

    // the administrator enrols an authenticator app and signs in with it; its session's verification ages
    const first = await api().post('/api/auth/login').send({ username: ADMIN.username, password: ADMIN.password }).expect(200);
    const secret = (await api().post('/api/me/mfa/totp').set('Authorization', `Bearer ${first.body.token}`).expect(200)).body.secret;
    const recovery: string[] = (
      await api()
        .post('/api/me/mfa/totp/confirm')
        .set('Authorization', `Bearer ${first.body.token}`)
        .send({ code: await previousStepCode(secret) })
        .expect(200)
    ).body.recovery_codes;
    const again = await api().post('/api/auth/login').send({ username: ADMIN.username, password: ADMIN.password }).expect(200);
    const done = await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: again.body.mfa_token, code: totpCode(secret) })
      .expect(200);
    const bearer = { Authorization: `Bearer ${done.body.token}` };
    await svc.service
      .db('api_keys')
      .where({ kind: 'session', user_id: done.body.user.id })
      .update({ mfa_at: Date.now() - 16 * 60_000 });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' });

    await api().post('/api/settings/auth/ldap/test-connection').set(bearer).send({}).expect(200);
    // unsaved settings point the service at servers of the caller's choosing: step-up, as for the change
    const elsewhere = { settings: { ldap_base_dn: 'dc=elsewhere,dc=test' } };
    const unsaved = await api().post('/api/settings/auth/ldap/test-connection').set(bearer).send(elsewhere).expect(403);
    expect(unsaved.body.error.code).to.equal('step_up_required');
    const refused = await api()
      .post('/api/settings/auth/ldap/test-login')
      .set(bearer)
      .send({ username: 'alice', password: LDAP_PEOPLE.alice.password })
      .expect(403);
    expect(refused.body.error.code).to.equal('step_up_required');
    await api().post('/api/auth/step-up').set(bearer).send({ code: recovery[0] }).expect(204);
    const ok = await api().post('/api/settings/auth/ldap/test-login').set(bearer).send({ username: 'alice', password: LDAP_PEOPLE.alice.password }).expect(200);
    expect(ok.body.would_sign_in).to.equal(true);
    expect((await api().post('/api/settings/auth/ldap/test-connection').set(bearer).send(elsewhere).expect(200)).body.kind).to.equal('base_dn');
  });

  it('after SERVICE_LDAP_RETRY_AFTER one sign-in probes the directory; the others in flight wait for its answer (a hung directory, then one back)', async () => {
    const relay = await relayTo(slapd.port);
    // long enough that waiting for one timeout is told from an answer at once on a loaded machine
    const TIMEOUT_MS = 1500;
    const probing = await startService({
      logger: logs.logger,
      env: {
        SERVICE_AUTH_PROVIDERS: 'ldap,local',
        SERVICE_LDAP_URL: relay.url,
        SERVICE_LDAP_BIND_DN: slapd.bindDN,
        SERVICE_LDAP_BIND_PASSWORD: slapd.bindPassword,
        SERVICE_LDAP_BASE_DN: slapd.baseDN,
        SERVICE_LDAP_CONNECT_TIMEOUT_MS: String(TIMEOUT_MS),
        SERVICE_LDAP_TIMEOUT_MS: String(TIMEOUT_MS),
        SERVICE_LDAP_RETRY_AFTER: '1s',
      },
    });
    const signIn = (name: keyof typeof LDAP_PEOPLE) =>
      request(probing.url).post('/api/auth/login').send({ username: LDAP_PEOPLE[name].uid, password: LDAP_PEOPLE[name].password });
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    try {
      relay.mode = 'silent';
      expect((await signIn('alice').expect(401)).body.error.details.reason).to.equal('directory_unavailable');
      // the pause: refused at once, the directory not asked
      let accepted = relay.accepted;
      let started = Date.now();
      expect((await signIn('bob').expect(401)).body.error.details.reason).to.equal('directory_unavailable');
      expect(Date.now() - started, 'no timeout waited').to.be.below(TIMEOUT_MS / 2);
      expect(relay.accepted).to.equal(accepted);

      await sleep(1100);
      accepted = relay.accepted;
      started = Date.now();
      const still = await Promise.all((['carol', 'dave', 'twin1', 'twin2'] as const).map((n) => signIn(n)));
      expect(still.map((r) => [r.status, r.body.error?.details?.reason])).to.deep.equal(Array(4).fill([401, 'directory_unavailable']));
      expect(relay.accepted - accepted, 'one probe asked the directory').to.equal(1);
      // about one operation timeout for all of them, not one each after the other
      expect(Date.now() - started).to.be.below(2 * TIMEOUT_MS);

      relay.mode = 'forward';
      await sleep(1100);
      const back = await Promise.all((['alice', 'bob', 'carol'] as const).map((n) => signIn(n)));
      expect(back.map((r) => r.status)).to.deep.equal([200, 200, 200]);
      expect(log(logs).some((l) => l.event === 'ldap_probe')).to.equal(true);
      expect(log(logs).some((l) => l.event === 'ldap_back')).to.equal(true);
    } finally {
      await probing.destroy();
      await relay.close();
    }
  });

  it('a directory that cannot be used reads as "unavailable" to the person, never as a wrong password', async () => {
    const other = await startService({
      logger: logs.logger,
      env: { SERVICE_AUTH_PROVIDERS: 'ldap,local', SERVICE_LDAP_URL: dead, SERVICE_LDAP_BASE_DN: slapd.baseDN, SERVICE_LDAP_RETRY_AFTER: '0' },
    });
    try {
      const res = await request(other.url).post('/api/auth/login').send({ username: 'alice', password: LDAP_PEOPLE.alice.password }).expect(401);
      expect(res.body.error.details.reason).to.equal('directory_unavailable');
      expect(res.body.error.message).to.equal(REFUSAL_TEXT.directory_unavailable);
      // the chain still goes on to the local accounts
      await request(other.url).post('/api/auth/login').send({ username: ADMIN.username, password: ADMIN.password }).expect(200);
      const test = (await request(other.url).post('/api/settings/auth/ldap/test-connection').set(admin()).send({}).expect(200)).body;
      expect(test).to.include({ ok: false, kind: 'refused' });
      expect(test.reason).to.include(dead).and.include('connection refused');

      // the CLI takes the same list, checked the same way (the field and each bad URL named)
      const env = testEnv(other.dataDir, other.databaseUrl);
      const bad = await cli(env, ['settings', 'set', 'ldap_url', `${slapd.url} ftp://dc2.example`]);
      expect(bad.code).to.equal(2);
      // (the CLI names the argument: `settings set ldap_url <value>`)
      expect(bad.stderr).to.match(/value: must be ldap:\/\/ or ldaps:\/\/ URLs separated by spaces, not "ftp:\/\/dc2\.example"/);
      const good = await cli(env, ['settings', 'set', 'ldap_url', `  ldaps://dc1.example   ${slapd.url} `]);
      expect(good.code, good.stderr).to.equal(0);
      expect((await cli(env, ['--json', 'settings', 'get', 'ldap_url'])).json().settings.ldap_url.value).to.equal(`ldaps://dc1.example ${slapd.url}`);
    } finally {
      await other.destroy();
    }
  });
});
