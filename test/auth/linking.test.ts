import { expect } from 'chai';
import request from 'supertest';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { LDAP_GROUPS, LDAP_PEOPLE, startSlapd, type Slapd } from '../support/slapd.js';
import { followToCallback, startIdp, type RunningIdp } from '../support/oidc-idp.js';
import { createUser, getUser, ORIGIN, patchAuthSettings } from './helpers.js';
import { usernameBase } from '../../src/auth/linking.js';

const CLIENT_ID = 'service-core';
const CLIENT_SECRET = 'linking-client-secret-0123456789';

describe('identity linking across local, LDAP and OIDC (real slapd and IdP)', function () {
  let slapd: Slapd;
  let idp: RunningIdp;
  let svc: TestService;

  before(async function () {
    [slapd, idp] = await Promise.all([
      startSlapd(),
      startIdp({
        clients: [{ client_id: CLIENT_ID, client_secret: CLIENT_SECRET, redirect_uris: [`${ORIGIN}/auth/callback/oidc`] }],
        accounts: {
          // alice at the IdP: another sub, the directory's address, verified
          'idp-alice': { email: LDAP_PEOPLE.alice.mail, email_verified: true, preferred_username: 'alice.l', groups: ['idp-staff'] },
          // same address but unverified: must not join alice
          'idp-eve': { email: LDAP_PEOPLE.alice.mail, email_verified: false, preferred_username: 'alice' },
          // the verified address of a local administrator: must never join that account
          'idp-mallory': { email: 'ops-lead@example.org', email_verified: true, preferred_username: 'ops-lead' },
        },
      }),
    ]);
    svc = await startService();
    await patchAuthSettings(svc.url, {
      auth_providers: 'local,ldap,oidc',
      ldap_url: slapd.url,
      ldap_bind_dn: slapd.bindDN,
      ldap_bind_password: slapd.bindPassword,
      ldap_base_dn: slapd.baseDN,
      // joining by e-mail is off for LDAP unless turned on (and never onto an administrator)
      ldap_link_by_email: true,
      ldap_group_mapping: { [LDAP_GROUPS.admins]: 'INT_USER' },
      oidc_issuer: idp.issuer,
      oidc_client_id: CLIENT_ID,
      oidc_client_secret: CLIENT_SECRET,
      oidc_group_mapping: { 'idp-staff': ['INT_VIEWER'] },
    }).expect(200);
  });

  after(async function () {
    await svc?.destroy();
    await Promise.all([slapd?.stop(), idp?.stop()]);
  });

  async function oidcLogin(sub: string): Promise<string> {
    const agent = request.agent(svc.url);
    const start = await agent.get('/api/auth/oidc/start').expect(302);
    const cb = await followToCallback(start.headers.location, { login: sub });
    const callback = await agent.get(cb.pathname + cb.search).expect(302);
    expect(callback.headers.location).to.match(/^\/auth\/complete\?/);
    await agent.get(callback.headers.location).expect(302);
    return (await agent.get('/api/me').expect(200)).body.id;
  }

  it('one person through local, LDAP and OIDC ends as one user with three identities', async function () {
    const id = await createUser(svc.url, { username: 'alice', password: 'alice-local-password', email: LDAP_PEOPLE.alice.mail });
    const local = await request(svc.url).post('/api/auth/login').send({ username: 'alice', password: 'alice-local-password' }).expect(200);
    expect(local.body.user.id).to.equal(id);
    // local is first in the chain and says no to the directory password; LDAP says yes
    const ldap = await request(svc.url).post('/api/auth/login').send({ username: 'alice', password: LDAP_PEOPLE.alice.password }).expect(200);
    expect(ldap.body.user.id).to.equal(id);
    expect(await oidcLogin('idp-alice')).to.equal(id);

    const user = await getUser(svc.url, id);
    expect(user.identities).to.have.deep.members([
      { provider: 'local', provider_user_id: 'alice' },
      { provider: 'ldap', provider_user_id: LDAP_PEOPLE.alice.dn },
      { provider: 'oidc', provider_user_id: 'idp-alice' },
    ]);
    // each provider's mapping added its group; nothing else was taken away
    expect(user.groups).to.have.members(['INT_USER', 'INT_VIEWER']);
    // each joining is an event of the login mapping, naming the provider and how it was joined
    await svc.service.iam.audit.flush();
    const linked = await svc.service.db('audit_events').where({ action: 'user.linked', target_id: id }).orderBy('seq').select('actor_username', 'details');
    expect(linked.map((e) => [e.actor_username, JSON.parse(e.details)])).to.deep.equal([
      ['login-mapping', { provider: 'ldap', via: 'email' }],
      ['login-mapping', { provider: 'oidc', via: 'email' }],
    ]);
    const all = await request(svc.url).get('/api/users').set('Authorization', adminAuth()).expect(200);
    expect(all.body.users.filter((u: any) => u.username.startsWith('alice'))).to.have.length(1);
  });

  it('an unverified address of the same person gets a separate, non-colliding user', async function () {
    const eveId = await oidcLogin('idp-eve');
    const eve = await getUser(svc.url, eveId);
    expect(eve.username).to.equal('alice-2');
    expect(eve.email).to.equal(null);
    expect(eve.identities).to.deep.equal([{ provider: 'oidc', provider_user_id: 'idp-eve' }]);
    expect(eve.groups).to.deep.equal(['INT_VIEWER']);
  });

  it('never joins a login to an administrator by e-mail, and joins LDAP logins by e-mail only when turned on', async function () {
    // a directory or IdP address is only as trustworthy as whoever edits it: an administrator's
    // address at the IdP or in the directory gets a separate account, never the administrator's
    const leadId = await createUser(svc.url, { username: 'ops-lead', password: 'ops-lead-password', email: 'ops-lead@example.org', groups: ['INT_ADMIN'] });
    const malloryId = await oidcLogin('idp-mallory');
    expect(malloryId).not.to.equal(leadId);
    const mallory = await getUser(svc.url, malloryId);
    expect(mallory.groups).to.deep.equal(['INT_VIEWER']);
    const carolAdmin = await createUser(svc.url, {
      username: 'carol-admin',
      password: 'carol-admin-password',
      email: LDAP_PEOPLE.carol.mail,
      groups: ['INT_VIEWER', 'INT_ADMIN'],
    });
    const carol = await request(svc.url).post('/api/auth/login').send({ username: 'carol', password: LDAP_PEOPLE.carol.password }).expect(200);
    expect(carol.body.user.id).not.to.equal(carolAdmin);
    expect((await getUser(svc.url, carolAdmin)).identities).to.deep.equal([{ provider: 'local', provider_user_id: 'carol-admin' }]);
    expect((await getUser(svc.url, leadId)).identities).to.deep.equal([{ provider: 'local', provider_user_id: 'ops-lead' }]);

    // LDAP with e-mail linking off (the default): bob's directory login does not join bobby
    await patchAuthSettings(svc.url, { ldap_link_by_email: null }).expect(200);
    const bobby = await createUser(svc.url, { username: 'bobby', password: 'bobby-local-password', email: LDAP_PEOPLE.bob.mail, groups: ['INT_VIEWER'] });
    const bob = await request(svc.url).post('/api/auth/login').send({ username: 'bob', password: LDAP_PEOPLE.bob.password }).expect(200);
    expect(bob.body.user.id).not.to.equal(bobby);
    expect(bob.body.user.username).to.equal('bob');
  });

  it('makes usable usernames out of whatever a provider calls someone', function () {
    expect(usernameBase('Alice')).to.equal('alice');
    expect(usernameBase('José Müller')).to.equal('jose-muller');
    expect(usernameBase('a/b\\c')).to.equal('a-b-c');
    expect(usernameBase('...')).to.equal('user');
    expect(usernameBase('x'.repeat(200))).to.have.length(56);
  });
});
