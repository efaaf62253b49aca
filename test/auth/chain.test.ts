import { expect } from 'chai';
import request from 'supertest';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { LDAP_GROUPS, LDAP_PEOPLE, startSlapd, type Slapd } from '../support/slapd.js';
import { createUser, getUser, patchAuthSettings, unusedPort, userNamed } from './helpers.js';

/** Logs in through the API; returns the token and which provider the session was issued by. */
async function login(url: string, username: string, password: string): Promise<{ token: string; provider: string; userId: string }> {
  const res = await request(url).post('/api/auth/login').send({ username, password });
  expect(res.status, `login ${username}: ${JSON.stringify(res.body)}`).to.equal(200);
  const keys = await request(url).get('/api/me/api-keys').set('Authorization', `Bearer ${res.body.token}`).expect(200);
  const label: string = keys.body.keys.find((k: any) => k.current).label;
  return { token: res.body.token, provider: /\((.+)\)$/.exec(label)![1]!, userId: res.body.user.id };
}

describe('provider chain with a real LDAP server (slapd)', function () {
  let slapd: Slapd;
  let svc: TestService;

  before(async function () {
    slapd = await startSlapd();
    svc = await startService({
      env: {
        SERVICE_LDAP_URL: slapd.url,
        SERVICE_LDAP_BIND_DN: slapd.bindDN,
        SERVICE_LDAP_BIND_PASSWORD: slapd.bindPassword,
        SERVICE_LDAP_BASE_DN: slapd.baseDN,
        SERVICE_LDAP_GROUP_MAPPING: JSON.stringify({ [LDAP_GROUPS.admins]: ['INT_ADMIN'], [LDAP_GROUPS.developers]: ['INT_USER'] }),
        // bob and carol are one person locally and in the directory (off by default)
        SERVICE_LDAP_LINK_BY_EMAIL: 'true',
      },
    });
    // bob exists locally with the same password as in the directory; carol with a different one
    await createUser(svc.url, { username: 'bob', password: LDAP_PEOPLE.bob.password, email: LDAP_PEOPLE.bob.mail });
    await createUser(svc.url, { username: 'carol', password: 'carol-local-password', email: LDAP_PEOPLE.carol.mail });
    await request(svc.url).post('/api/groups').set('Authorization', adminAuth()).send({ name: 'LOCAL_TEAM', permissions: [] }).expect(201);
  });

  after(async function () {
    await svc?.destroy();
    await slapd?.stop();
  });

  it('honours the configured order: local,ldap lets local win, ldap,local lets LDAP win', async function () {
    await patchAuthSettings(svc.url, { auth_providers: 'local,ldap' }).expect(200);
    const viaLocal = await login(svc.url, 'bob', LDAP_PEOPLE.bob.password);
    expect(viaLocal.provider).to.equal('local');
    let bob = await getUser(svc.url, viaLocal.userId);
    expect(bob.identities.map((i: any) => i.provider)).to.deep.equal(['local']);
    expect(bob.groups).to.deep.equal([]);

    await patchAuthSettings(svc.url, { auth_providers: 'ldap,local' }).expect(200);
    const providers = await request(svc.url).get('/api/auth/providers').expect(200);
    expect(providers.body.providers.map((p: any) => p.id)).to.deep.equal(['ldap', 'local']);
    const viaLdap = await login(svc.url, 'bob', LDAP_PEOPLE.bob.password);
    expect(viaLdap.provider).to.equal('ldap');
    expect(viaLdap.userId, 'same person, same user (linked by the directory mail)').to.equal(viaLocal.userId);
    bob = await getUser(svc.url, viaLdap.userId);
    expect(bob.identities).to.deep.include({ provider: 'ldap', provider_user_id: LDAP_PEOPLE.bob.dn });
    expect(bob.groups).to.deep.equal(['INT_USER']);
  });

  it("goes on to the next provider when the first says no: both of carol's passwords work, as one user", async function () {
    await patchAuthSettings(svc.url, { auth_providers: 'ldap,local' }).expect(200);
    const viaLdap = await login(svc.url, 'carol', LDAP_PEOPLE.carol.password);
    const viaLocal = await login(svc.url, 'carol', 'carol-local-password');
    expect([viaLdap.provider, viaLocal.provider]).to.deep.equal(['ldap', 'local']);
    expect(viaLdap.userId).to.equal(viaLocal.userId);
    await request(svc.url).post('/api/auth/login').send({ username: 'carol', password: 'neither-of-them' }).expect(401);
  });

  it('creates a user for a directory-only person with default and mapped groups; the SID is the identity', async function () {
    await patchAuthSettings(svc.url, { auth_providers: 'ldap,local' }).expect(200);
    const alice = await login(svc.url, 'alice', LDAP_PEOPLE.alice.password);
    const user = await getUser(svc.url, alice.userId);
    expect(user).to.include({ username: 'alice', email: LDAP_PEOPLE.alice.mail, display_name: LDAP_PEOPLE.alice.displayName });
    expect(user.groups).to.have.members(['INT_VIEWER', 'INT_ADMIN', 'INT_USER']);
    expect(user.identities).to.deep.equal([{ provider: 'ldap', provider_user_id: LDAP_PEOPLE.alice.dn }]);

    const dave = await login(svc.url, 'dave', LDAP_PEOPLE.dave.password);
    const d = await getUser(svc.url, dave.userId);
    expect(d.identities).to.deep.equal([{ provider: 'ldap', provider_user_id: LDAP_PEOPLE.dave.objectSid }]);
    expect(d.groups).to.have.members(['INT_VIEWER', 'INT_ADMIN']);
  });

  it('keeps mapped groups in step with the directory and leaves local grants alone', async function () {
    await patchAuthSettings(svc.url, { auth_providers: 'ldap,local' }).expect(200);
    const alice = await userNamed(svc.url, 'alice');
    // an admin strips INT_ADMIN and adds a local team: the directory restores the former, the latter stays
    await request(svc.url)
      .patch(`/api/users/${alice.id}`)
      .set('Authorization', adminAuth())
      .send({ groups: ['INT_VIEWER', 'LOCAL_TEAM'] })
      .expect(200);
    await login(svc.url, 'alice', LDAP_PEOPLE.alice.password);
    expect((await getUser(svc.url, alice.id)).groups).to.have.members(['INT_VIEWER', 'LOCAL_TEAM', 'INT_ADMIN', 'INT_USER']);

    // bob is not in the directory's admins: a locally granted INT_ADMIN is a mapped group and goes
    const bob = await userNamed(svc.url, 'bob');
    await request(svc.url)
      .patch(`/api/users/${bob.id}`)
      .set('Authorization', adminAuth())
      .send({ groups: ['INT_ADMIN', 'LOCAL_TEAM'] })
      .expect(200);
    const token = (await login(svc.url, 'bob', LDAP_PEOPLE.bob.password)).token;
    expect((await getUser(svc.url, bob.id)).groups).to.have.members(['LOCAL_TEAM', 'INT_USER']);
    // and the permission cache follows at once
    await request(svc.url).get('/api/users').set('Authorization', `Bearer ${token}`).expect(403);
  });

  it('escapes the login name in the LDAP filter (no injection, no wildcard login)', async function () {
    await patchAuthSettings(svc.url, { auth_providers: 'ldap' }).expect(200);
    try {
      for (const username of ['*)(uid=*', '*', 'a*', `alice)(|(uid=*`]) {
        await request(svc.url).post('/api/auth/login').send({ username, password: LDAP_PEOPLE.alice.password }).expect(401);
      }
      const q = await login(svc.url, 'q*bert', LDAP_PEOPLE.qbert.password);
      expect((await getUser(svc.url, q.userId)).identities).to.deep.equal([{ provider: 'ldap', provider_user_id: LDAP_PEOPLE.qbert.dn }]);
      // local is not in the chain now
      await request(svc.url).post('/api/auth/login').send({ username: 'carol', password: 'carol-local-password' }).expect(401);
    } finally {
      await patchAuthSettings(svc.url, { auth_providers: 'ldap,local' }).expect(200);
    }
  });

  it('refuses to change LDAP fields that the environment sets (409) and never returns the bind password', async function () {
    const res = await patchAuthSettings(svc.url, { ldap_url: 'ldap://127.0.0.1:1' }).expect(409);
    expect(res.body.error.code).to.equal('conflict');
    expect(res.body.error.details.locked).to.deep.equal([{ field: 'ldap_url', env: 'SERVICE_LDAP_URL' }]);
    await patchAuthSettings(svc.url, { ldap_bind_password: 'x' }).expect(409);
    const view = await request(svc.url).get('/api/settings/auth').set('Authorization', adminAuth()).expect(200);
    expect(view.body.settings.ldap_bind_password).to.deep.equal({
      label: 'LDAP bind password',
      kind: 'secret',
      value: '********',
      source: 'env',
      locked: true,
      secret: true,
      configured: true,
    });
    expect(view.text).not.to.include(slapd.bindPassword);
  });
});

describe('provider chain when the LDAP server is down', function () {
  let svc: TestService;

  before(async function () {
    const port = await unusedPort();
    svc = await startService({
      env: {
        SERVICE_AUTH_PROVIDERS: 'ldap,local',
        SERVICE_LDAP_URL: `ldap://127.0.0.1:${port}`,
        SERVICE_LDAP_BASE_DN: 'dc=example,dc=org',
      },
    });
  });

  after(async function () {
    await svc?.destroy();
  });

  it('logs the failure and goes on to local: a right password logs in, a wrong one is 401, never a 500', async function () {
    const started = Date.now();
    const ok = await request(svc.url).post('/api/auth/login').send({ username: 'admin', password: 'admin-test-password' }).expect(200);
    expect(ok.body.user.username).to.equal('admin');
    const bad = await request(svc.url).post('/api/auth/login').send({ username: 'admin', password: 'wrong-one' }).expect(401);
    expect(bad.body.error.code).to.equal('unauthorized');
    await request(svc.url).post('/api/auth/login').send({ username: 'someone', password: 'whatever' }).expect(401);
    expect(Date.now() - started, 'a refused connection fails fast').to.be.below(5000);
  });

  it('locks auth_providers set in the environment', async function () {
    const res = await patchAuthSettings(svc.url, { auth_providers: 'local' }).expect(409);
    expect(res.body.error.details.locked[0]).to.deep.equal({ field: 'auth_providers', env: 'SERVICE_AUTH_PROVIDERS' });
    const view = await request(svc.url).get('/api/settings/auth').set('Authorization', adminAuth()).expect(200);
    expect(view.body.settings.auth_providers).to.deep.include({ value: ['ldap', 'local'], locked: true, source: 'env' });
    expect(view.body.chain.map((e: any) => e.id)).to.deep.equal(['ldap', 'local']);
  });
});
