import { expect } from 'chai';
import request from 'supertest';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { startSambaDc, type AdUser, type SambaDc } from '../support/samba.js';
import { capturingLogger } from '../sockets/helpers.js';
import { patchAuthSettings, unusedPort } from './helpers.js';

/**
 * Active Directory (a real Samba AD DC) as an operator runs it: two domain controllers in the
 * URL list (the first one away or presenting a certificate for another name), a certificate
 * that is not trusted, and the settings page's tests.
 */

const AD_FILTER = '(&(objectCategory=person)(objectClass=user)(|(sAMAccountName={username})(userPrincipalName={username})))';

describe('LDAP directory operations against Active Directory through the service (real Samba AD DC)', function () {
  this.timeout(60_000);
  let dc: SambaDc;
  let svc: TestService;
  let ivy: AdUser;
  let platform: string;
  const logs = capturingLogger('info');
  const api = () => request(svc.url);
  const admin = () => ({ Authorization: adminAuth() });
  const testConnection = (settings?: Record<string, unknown>) =>
    api()
      .post('/api/settings/auth/ldap/test-connection')
      .set(admin())
      .send(settings ? { settings } : {})
      .expect(200)
      .then((r) => r.body);

  before(async function () {
    this.timeout(240_000);
    dc = await startSambaDc();
    await dc.addOu('OU=People');
    await dc.addOu('OU=Groups');
    ivy = await dc.addUser('ivy', 'Ivy-Pass-1!', { ou: 'OU=People', given: 'Ivy', surname: 'Test' });
    await dc.addUser('jon', 'Jon-Pass-1!', { ou: 'OU=People' });
    await dc.disable('jon');
    platform = await dc.addGroup('Platform', 'OU=Groups');
    await dc.addGroup('Ops', 'OU=Groups');
    await dc.addMembers('Platform', ['Ops']);
    await dc.addMembers('Ops', ['ivy']);
    svc = await startService({ logger: logs.logger });
    await patchAuthSettings(svc.url, {
      auth_providers: 'ldap,local',
      ldap_url: `ldaps://127.0.0.1:${await unusedPort()} ${dc.ldapsUrl}`,
      ldap_ca_cert: dc.caPem,
      ldap_bind_dn: dc.bindDN,
      ldap_bind_password: dc.bindPassword,
      ldap_base_dn: dc.baseDN,
      ldap_user_filter: AD_FILTER,
      ldap_username_attr: 'sAMAccountName',
      ldap_group_mapping: { [platform]: ['INT_USER'] },
    }).expect(200);
  });

  after(async () => {
    try {
      await svc?.destroy();
    } finally {
      await dc?.stop();
    }
  });

  it('the second domain controller answers when the first is away; test connection says which, that it is AD, and why the first was skipped', async () => {
    const res = await api().post('/api/auth/login').send({ username: 'CORP\\ivy', password: ivy.password }).expect(200);
    expect(res.body.user.username).to.equal('ivy');
    const t = await testConnection();
    expect(t).to.include({ ok: true, url: dc.ldapsUrl, server: 'active_directory' });
    expect(t.failures).to.have.length(1);
    expect(t.failures[0]).to.include({ kind: 'refused' });
    expect(t.warnings).to.deep.equal([]);
  });

  it('a domain controller whose certificate names another host is skipped for the next (TLS failure, the reason named)', async () => {
    const t = await testConnection({ ldap_url: `ldaps://${dc.otherAddress} ${dc.ldapsUrl}`, ldap_bind_password: dc.bindPassword });
    expect(t).to.include({ ok: true, url: dc.ldapsUrl });
    expect(t.failures).to.deep.equal([
      {
        url: `ldaps://${dc.otherAddress}`,
        kind: 'tls',
        reason: 'TLS failed: the certificate does not name this host (connect by a name the certificate holds) [ERR_TLS_CERT_ALTNAME_INVALID]',
      },
    ]);
  });

  it('a certificate that is not trusted, verification on: the person reads "unavailable", the operator the precise reason', async () => {
    // saved: the CA removed (the bind password goes with a change of what is trusted)
    await patchAuthSettings(svc.url, { ldap_url: dc.ldapsUrl, ldap_ca_cert: null, ldap_bind_password: dc.bindPassword }).expect(200);
    try {
      const res = await api().post('/api/auth/login').send({ username: 'ivy', password: ivy.password }).expect(401);
      expect(res.body.error.details.reason).to.equal('directory_unavailable');
      expect(res.body.error.message).to.match(/directory is unavailable/);
      const line = logs.lines
        .flatMap((l) => l.split('\n').filter(Boolean))
        .map((l) => JSON.parse(l))
        .filter((l) => l.event === 'ldap_unavailable')
        .pop();
      expect(line.kind).to.equal('tls');
      expect(line.reason).to.include('[UNABLE_TO_VERIFY_LEAF_SIGNATURE]').and.include('SERVICE_LDAP_CA_CERT');
      const t = await testConnection();
      expect(t).to.include({ ok: false, kind: 'tls', url: null });
      expect(t.reason).to.include(dc.ldapsUrl).and.include('not trusted (set SERVICE_LDAP_CA_CERT)');
      // tried before saving: with the CA it works
      expect(await testConnection({ ldap_ca_cert: dc.caPem, ldap_bind_password: dc.bindPassword })).to.include({ ok: true, server: 'active_directory' });
    } finally {
      await patchAuthSettings(svc.url, { ldap_ca_cert: dc.caPem, ldap_bind_password: dc.bindPassword }).expect(200);
    }
    await api().post('/api/auth/login').send({ username: 'ivy', password: ivy.password }).expect(200);
  });

  it('test login on AD: nested groups mapped; a disabled account says so; verification off is warned of', async () => {
    const test = (username: string, password: string, settings?: Record<string, unknown>) =>
      api()
        .post('/api/settings/auth/ldap/test-login')
        .set(admin())
        .send({ username, password, ...(settings ? { settings } : {}) })
        .expect(200)
        .then((r) => r.body);
    const yes = await test('ivy@corp.example', ivy.password);
    expect(yes).to.include({ would_sign_in: true, username: 'ivy', dn: ivy.dn });
    expect(yes.groups).to.deep.equal(['INT_USER']);
    expect(yes.directory_groups).to.include(platform);
    expect(await test('jon', 'Jon-Pass-1!')).to.include({ would_sign_in: false, outcome: 'account_disabled' });
    expect(await test('ivy', 'Not-Her-Pass-1!')).to.include({ would_sign_in: false, outcome: 'invalid_credentials' });

    const insecure = await testConnection({ ldap_tls_verify: false, ldap_bind_password: dc.bindPassword });
    expect(insecure.ok).to.equal(true);
    expect(insecure.warnings.map((w: { env: string }) => w.env)).to.deep.equal(['SERVICE_LDAP_TLS_VERIFY']);
  });
});
