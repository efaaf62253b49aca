import { expect } from 'chai';
import request from 'supertest';
import { startService, adminAuth, basic, testEnv, SYSTEM_KEY, type TestService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';
import { cli } from '../cli/helpers.js';
import { DomainError } from '../../src/errors.js';
import { WsClient, sleep } from '../gateway/helpers.js';
import { totpCode } from '../auth/helpers.js';

/**
 * The host boundary (docs/security.md, "Who may hand out the host"): only a trusted actor (the
 * system key, a superadmin) makes any account, key or connection gain a permission that reaches
 * the host, or trust itself. Every path that changes a permission, a group, a membership, a
 * credential or a login mapping is walked as a plain administrator (INT_ADMIN, no superadmin
 * role) and must answer 403 where it would hand out host access, changing nothing; the same
 * paths stay open to trusted actors and the CLI, and taking access away stays open to all
 * administrators.
 */
describe('IAM host boundary: every path, as a plain administrator', function () {
  this.timeout(60_000);
  let svc: TestService;
  const logs = capturingLogger('info');
  const superadmin = () => adminAuth(); // SERVICE_ADMIN_FORCE_SUPERADMIN below
  const plain = basic('plainadmin', 'plainadmin-password');
  const ids: Record<string, string> = {};
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };

  before(async () => {
    svc = await startService({ logger: logs.logger, env: { SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    // the system key through the API (a key set in the environment would be locked)
    await api().put('/api/settings/system-api-key').set('Authorization', superadmin()).send({ key: SYSTEM_KEY }).expect(204);
    ids.plain = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'plainadmin', password: 'plainadmin-password', groups: ['INT_ADMIN'] })
        .expect(201)
    ).body.id;
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'runners', permissions: ['socket:container:spawn'] })
      .expect(201);
    ids.operator = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'operator', password: 'operator-password', email: 'operator@example.org', groups: ['INT_VIEWER', 'runners'] })
        .expect(201)
    ).body.id;
    ids.sleeper = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'sleeper', password: 'sleeper-password', extra_permissions: ['socket:mounts:repair'] })
        .expect(201)
    ).body.id;
    await api().patch(`/api/users/${ids.sleeper}`).set(sys).send({ disabled: true }).expect(200);
    const users = (await api().get('/api/users').set(sys).expect(200)).body.users as Array<{ id: string; username: string }>;
    ids.bot = users.find((u) => u.username === 'bot')!.id;
    ids.admin = users.find((u) => u.username === 'admin')!.id;
  });
  after(async () => svc?.destroy());

  type Row = [what: string, method: 'post' | 'patch' | 'put' | 'delete', path: () => string, body: Record<string, unknown>];

  const PASSWORD = 'taken-over-password';
  /** Each hands out host access (or trust): 403 for a plain administrator. */
  const handsOutHost: Row[] = [
    [
      'create a user with a host permission',
      'post',
      () => '/api/users',
      { username: 'acc1', password: PASSWORD, extra_permissions: ['socket:container:spawn'] },
    ],
    ['create a user with the socket wildcard', 'post', () => '/api/users', { username: 'acc2', password: PASSWORD, extra_permissions: ['socket:*'] }],
    ['create a user in a group that reaches the host', 'post', () => '/api/users', { username: 'acc3', password: PASSWORD, groups: ['runners'] }],
    ['create a superadmin', 'post', () => '/api/users', { username: 'acc4', password: PASSWORD, roles: ['superadmin'] }],
    ['give oneself a host permission', 'patch', () => `/api/users/${ids.plain}`, { extra_permissions: ['socket:mounts:repair'] }],
    ['join a group that reaches the host', 'patch', () => `/api/users/${ids.plain}`, { groups: ['INT_ADMIN', 'runners'] }],
    ['make oneself a superadmin', 'patch', () => `/api/users/${ids.plain}`, { roles: ['superadmin'] }],
    ['set the password of an account that reaches the host', 'patch', () => `/api/users/${ids.operator}`, { password: PASSWORD }],
    ['set it through the password route', 'post', () => `/api/users/${ids.operator}/password`, { new_password: PASSWORD }],
    ['change its e-mail (a login mapping)', 'patch', () => `/api/users/${ids.operator}`, { email: 'attacker@example.org' }],
    ['change its profile and permissions together', 'patch', () => `/api/users/${ids.operator}`, { display_name: 'x', groups: ['INT_VIEWER'] }],
    ['re-enable a disabled account that reaches the host', 'patch', () => `/api/users/${ids.sleeper}`, { disabled: false }],
    ['delete an account that reaches the host', 'delete', () => `/api/users/${ids.operator}`, {}],
    ["set the bot's password", 'post', () => `/api/users/${ids.bot}/password`, { new_password: PASSWORD }],
    ["change a superadmin's groups", 'patch', () => `/api/users/${ids.admin}`, { groups: ['INT_ADMIN', 'INT_USER'] }],
    ['create a group with a host permission', 'post', () => '/api/groups', { name: 'escalate', permissions: ['socket:container:cleanup'] }],
    [
      'add a host permission to a built-in group',
      'patch',
      () => '/api/groups/INT_VIEWER',
      { permissions: ['feature:dashboard.view', 'api:read', 'socket:container:spawn'] },
    ],
    ['rename a group that reaches the host (onto a name a mapping points at)', 'patch', () => '/api/groups/runners', { name: 'directory-ops' }],
    ['hand a host group to every new SSO user', 'patch', () => '/api/settings/auth', { sso_default_groups: ['INT_VIEWER', 'runners'] }],
    ['map an LDAP group onto a host group', 'patch', () => '/api/settings/auth', { ldap_group_mapping: { 'cn=ops,dc=example,dc=org': ['runners'] } }],
    ['map an OIDC claim onto a host group', 'patch', () => '/api/settings/auth', { oidc_group_mapping: { staff: ['runners'] } }],
    ['set the system key', 'put', () => '/api/settings/system-api-key', { key: 'attacker-chosen-system-key-0123456789abcdef' }],
    ['clear the system key', 'delete', () => '/api/settings/system-api-key', {}],
  ];

  it('answers 403 to each path that would hand out host access, and changes nothing', async () => {
    const before = logs.lines.length;
    for (const [what, method, path, body] of handsOutHost) {
      const res = await (api() as any)[method](path()).set('Authorization', plain).send(body);
      expect(res.status, `${what}: ${JSON.stringify(res.body)}`).to.equal(403);
      expect(res.body.error.code, what).to.equal('forbidden');
      expect(res.body.error.message, what).to.match(/only a superadmin may/);
    }
    // nothing was handed out
    const access = (await api().get('/api/me/access').set('Authorization', plain).expect(200)).body;
    expect(access.permissions.filter((p: string) => p.startsWith('socket:'))).to.deep.equal([]);
    expect(access.is_superadmin).to.equal(false);
    await api().get('/api/me').set('Authorization', basic('operator', 'operator-password')).expect(200);
    await api().get('/api/me').set('Authorization', basic('bot', 'bot-test-password')).expect(200);
    await api().get('/api/me').set(sys).expect(200);
    const operator = (await api().get(`/api/users/${ids.operator}`).set(sys).expect(200)).body;
    expect(operator).to.deep.include({ email: 'operator@example.org', display_name: null, disabled: false });
    expect(operator.groups).to.deep.equal(['INT_VIEWER', 'runners']);
    expect((await api().get(`/api/users/${ids.sleeper}`).set(sys).expect(200)).body.disabled).to.equal(true);
    expect((await api().get('/api/groups/INT_VIEWER').set(sys).expect(200)).body.permissions).not.to.include('socket:container:spawn');
    await api().get('/api/groups/runners').set(sys).expect(200);
    await api().get('/api/groups/escalate').set(sys).expect(404);
    const settings = (await api().get('/api/settings/auth').set(sys).expect(200)).body.settings;
    expect(settings.sso_default_groups.value).to.deep.equal(['INT_VIEWER']);
    expect(settings.ldap_group_mapping.value).to.deep.equal({});
    expect(settings.oidc_group_mapping.value).to.deep.equal({});
    const users = (await api().get('/api/users').set(sys).expect(200)).body.users.map((u: { username: string }) => u.username);
    expect(users.filter((u: string) => u.startsWith('acc'))).to.deep.equal([]);
    expect(logs.lines.slice(before).join('')).not.to.include('host_permissions');
  });

  it('a key for an account that reaches the host is issued by itself or a trusted actor only', async () => {
    const iam = svc.service.iam;
    const operator = await iam.users.find({ username: 'operator' });
    const plainActor = { username: 'plainadmin', userId: ids.plain, isSystem: false, isSuperadmin: false };
    const refused = await svc.service.auth.keys.issue(plainActor, operator, { label: 'stolen' }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).to.be.instanceOf(DomainError);
    expect((refused as DomainError).code).to.equal('forbidden');
    expect((await api().get(`/api/users/${ids.operator}/api-keys`).set(sys).expect(200)).body.keys).to.deep.equal([]);
    // itself, over the API
    await api().post('/api/me/api-keys').set('Authorization', basic('operator', 'operator-password')).send({ label: 'own' }).expect(201);
  });

  it('while a login mapping hands a host group out, only a trusted actor changes the login settings', async () => {
    await api()
      .patch('/api/settings/auth')
      .set('Authorization', superadmin())
      .send({ oidc_group_mapping: { 'ops-team': ['runners'] } })
      .expect(200);
    for (const body of [
      { oidc_label: 'Company SSO' },
      { ldap_url: 'ldap://127.0.0.1:1' },
      { auth_providers: ['local', 'oidc'] },
      { oidc_group_mapping: null },
    ]) {
      const res = await api().patch('/api/settings/auth').set('Authorization', plain).send(body).expect(403);
      expect(res.body.error.message).to.match(/only a superadmin may change the login settings/);
    }
    await api().patch('/api/settings/auth').set(sys).send({ oidc_group_mapping: null }).expect(200);
    // with no host group named, a plain administrator runs the login settings again
    await api()
      .patch('/api/settings/auth')
      .set('Authorization', plain)
      .send({ oidc_label: 'Company SSO', oidc_group_mapping: { staff: ['INT_USER'] } })
      .expect(200);
  });

  it('weakening what protects host accounts is for trusted actors: the second factor of host groups, the directory re-check', async () => {
    await api()
      .patch('/api/settings/auth')
      .set(sys)
      .send({ mfa_required_groups: ['runners', 'INT_VIEWER'] })
      .expect(200);
    await svc.service.iam.store.linkIdentity(ids.operator, 'ldap', 'uid=operator,ou=people,dc=example,dc=org');
    try {
      const refused = await api()
        .patch('/api/settings/auth')
        .set('Authorization', plain)
        .send({ mfa_required_groups: ['INT_VIEWER'] })
        .expect(403);
      expect(refused.body.error.message).to.match(/only a superadmin may stop requiring a second factor of a group that reaches the host \(runners\)/);
      for (const interval of ['0', '2h']) {
        const res = await api().patch('/api/settings/auth').set('Authorization', plain).send({ ldap_recheck_interval: interval }).expect(403);
        expect(res.body.error.message).to.match(/only a superadmin may turn the directory re-check off or make it less frequent.*the ldap login of operator/);
      }
      // requiring more, checking more often, and a group that does not reach the host stay open
      await api()
        .patch('/api/settings/auth')
        .set('Authorization', plain)
        .send({ mfa_required_groups: ['runners'] })
        .expect(200);
      await api().patch('/api/settings/auth').set('Authorization', plain).send({ ldap_recheck_interval: '5m' }).expect(200);
      await api().patch('/api/settings/auth').set(sys).send({ ldap_recheck_interval: '0' }).expect(200);
      const events = await svc.service.db('audit_events').where({ action: 'settings.changed', outcome: 'denied', actor_username: 'plainadmin' });
      expect(events.length).to.be.greaterThan(0);
    } finally {
      await svc.service.db('user_identities').where({ user_id: ids.operator, provider: 'ldap' }).delete();
      await api().patch('/api/settings/auth').set(sys).send({ mfa_required_groups: null, ldap_recheck_interval: null }).expect(200);
    }
  });

  it("a plugin's login provider passes the host boundary as a mapping does: groups that reach the host are left out, and recorded", async () => {
    svc.service.bus.emit('auth:register_provider', {
      provider: {
        id: 'badge',
        kind: 'credentials',
        label: 'Badge',
        authenticate: async (username: string, password: string) =>
          password === `${username}-badge-pass`
            ? { provider: 'badge', provider_user_id: `badge:${username}`, username, groups: ['runners', 'INT_VIEWER'] }
            : null,
      },
      plugin_name: 'badge-plugin',
    });
    try {
      // the first sign-in creates the account, the second maps again: never into runners
      for (let i = 0; i < 2; i++) {
        const res = await api().post('/api/auth/login').send({ username: 'badger', password: 'badger-badge-pass' }).expect(200);
        expect(res.body.user.groups).to.deep.equal(['INT_VIEWER']);
      }
      await svc.service.iam.audit.flush();
      const refusals = await svc.service.db('audit_events').where({ action: 'user.updated', outcome: 'denied', target_name: 'badger' });
      expect(refusals.length).to.be.greaterThan(0);
      expect(JSON.stringify(refusals[0].details)).to.include('runners');
      expect(logs.text()).to.include("a plugin's login provider named groups that reach the host");
    } finally {
      svc.service.auth.chain.unregister('badge');
    }
  });

  it('while an account that reaches the host signs in through a provider, only a trusted actor repoints that provider', async () => {
    // operator (in runners) has a directory identity: a directory of the attacker's own with
    // the same DN would sign in as operator
    await svc.service.iam.store.linkIdentity(ids.operator, 'ldap', 'uid=operator,ou=people,dc=example,dc=org');
    try {
      for (const body of [
        { ldap_url: 'ldap://attacker.example.test', ldap_bind_password: 'attacker-bind-password' },
        { ldap_base_dn: 'dc=attacker,dc=test' },
        { ldap_user_filter: '(cn={username})' },
      ]) {
        const res = await api().patch('/api/settings/auth').set('Authorization', plain).send(body).expect(403);
        expect(res.body.error.message).to.match(/only a superadmin may repoint the ldap provider.*the ldap login of operator/);
      }
      // another provider, and the LDAP settings that do not decide who someone is, stay open
      await api()
        .patch('/api/settings/auth')
        .set('Authorization', plain)
        .send({ oidc_issuer: 'https://idp.example.test', ldap_link_by_email: false })
        .expect(200);
      await api().patch('/api/settings/auth').set('Authorization', superadmin()).send({ ldap_base_dn: 'dc=example,dc=org' }).expect(200);
    } finally {
      await svc.service.db('user_identities').where({ user_id: ids.operator, provider: 'ldap' }).delete();
      await api().patch('/api/settings/auth').set(sys).send({ oidc_issuer: null, ldap_base_dn: null, ldap_link_by_email: null }).expect(200);
    }
  });

  it("a superadmin's scoped key is not trusted; a scoped key never changes its owner's password or e-mail", async () => {
    const settingsKey = (
      await api()
        .post('/api/me/api-keys')
        .set('Authorization', superadmin())
        .send({ label: 's', scopes: ['feature:admin.settings'] })
        .expect(201)
    ).body.token;
    const refused = await api()
      .put('/api/settings/system-api-key')
      .set('X-API-Key', settingsKey)
      .send({ key: 'attacker-chosen-system-key-0123456789abcdef' })
      .expect(403);
    expect(refused.body.error.message).to.match(/^only a superadmin may set, rotate or clear it \(the system key\); see docs\/sockets\.md/);
    const usersKey = (
      await api()
        .post('/api/me/api-keys')
        .set('Authorization', superadmin())
        .send({ label: 'u', scopes: ['feature:admin.users'] })
        .expect(201)
    ).body.token;
    await api()
      .post('/api/users')
      .set('X-API-Key', usersKey)
      .send({ username: 'minted', password: PASSWORD, roles: ['superadmin'] })
      .expect(403);
    await api()
      .post('/api/users')
      .set('X-API-Key', usersKey)
      .send({ username: 'minted', password: PASSWORD, extra_permissions: ['socket:*'] })
      .expect(403);
    // an operator's own key, scoped to user administration: not the operator, for their password
    const opadmin = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'opadmin', password: 'opadmin-password', groups: ['INT_ADMIN', 'runners'] })
        .expect(201)
    ).body.id;
    const own = (
      await api()
        .post('/api/me/api-keys')
        .set('Authorization', basic('opadmin', 'opadmin-password'))
        .send({ label: 'o', scopes: ['feature:admin.users'] })
        .expect(201)
    ).body.token;
    await api().patch(`/api/users/${opadmin}`).set('X-API-Key', own).send({ password: PASSWORD }).expect(403);
    await api().patch(`/api/users/${opadmin}`).set('X-API-Key', own).send({ email: 'attacker@example.org' }).expect(403);
    await api().get('/api/me').set('Authorization', basic('opadmin', 'opadmin-password')).expect(200);
  });

  it('a key minted with a key expires no later than it and ends with it', async () => {
    const soon = new Date(Date.now() + 60_000).toISOString();
    const parent = (
      await api()
        .post('/api/me/api-keys')
        .set('Authorization', plain)
        .send({ label: 'p', scopes: ['api:read', 'api:write'], expires_at: soon })
        .expect(201)
    ).body;
    const child = (
      await api()
        .post('/api/me/api-keys')
        .set('X-API-Key', parent.token)
        .send({ label: 'c', scopes: ['api:read'] })
        .expect(201)
    ).body;
    expect(Date.parse(child.expires_at)).to.be.at.most(Date.parse(soon));
    await api().get('/api/me').set('X-API-Key', child.token).expect(200);
    await api().delete(`/api/me/api-keys/${parent.id}`).set('Authorization', plain).expect(204);
    await api().get('/api/me').set('X-API-Key', child.token).expect(401);
    // each is a revocation in the trail: the minted key's names the key it ended with
    await svc.service.iam.audit.flush();
    const trail = await api().get('/api/audit').query({ action: 'key.revoked' }).set(sys).expect(200);
    const of = (id: string) => trail.body.events.find((e: { target: { id: string } }) => e.target.id === id);
    expect(of(parent.id)).to.deep.include({ target: { type: 'key', id: parent.id, name: 'p' } });
    expect(of(parent.id).details).to.not.have.property('with');
    expect(of(child.id)).to.deep.include({ target: { type: 'key', id: child.id, name: 'c' } });
    expect(of(child.id).details).to.include({ with: parent.id });
  });

  it('an account a login mapping can give host access to is protected even while it holds none', async () => {
    // op signs in by OIDC; the mapping gives 'ops' members the runners group at each sign-in
    await api()
      .patch('/api/settings/auth')
      .set(sys)
      .send({ oidc_group_mapping: { ops: ['runners'] } })
      .expect(200);
    const op = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'op', password: 'op-password-1', groups: ['INT_VIEWER'] })
        .expect(201)
    ).body.id;
    await svc.service.iam.store.linkIdentity(op, 'oidc', 'sub-op');
    try {
      // taking runners away first would not make its password anyone's: the next sign-on gives it back
      const res = await api().post(`/api/users/${op}/password`).set('Authorization', plain).send({ new_password: PASSWORD }).expect(403);
      expect(res.body.error.message).to.match(/take over op/);
      await api().patch(`/api/users/${op}`).set('Authorization', plain).send({ email: 'attacker@example.org' }).expect(403);
    } finally {
      await api().patch('/api/settings/auth').set(sys).send({ oidc_group_mapping: null }).expect(200);
    }
    // a login never joins, by e-mail, an account made ready for it if the login would make it an operator
    const ready = (
      await api()
        .post('/api/users')
        .set('Authorization', plain)
        .send({ username: 'newop', password: PASSWORD, email: 'newop@example.test', groups: ['INT_VIEWER'] })
        .expect(201)
    ).body.id;
    const linked = await svc.service.auth.linker.link({
      provider: 'oidc',
      provider_user_id: 'sub-newop',
      username: 'newop',
      email: 'newop@example.test',
      email_verified: true,
      groups: ['runners'],
    });
    expect(linked.user.id).not.to.equal(ready);
  });

  it('a host group the login settings name is deleted by a trusted actor only; a re-made name grants no stale membership', async () => {
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'deployers', permissions: ['socket:container:spawn'] })
      .expect(201);
    await api()
      .patch('/api/settings/auth')
      .set(sys)
      .send({ ldap_group_mapping: { 'cn=deploy,dc=example,dc=org': ['deployers'] } })
      .expect(200);
    try {
      expect((await api().delete('/api/groups/deployers').set('Authorization', plain).expect(403)).body.error.message).to.match(
        /only a superadmin may delete a group/,
      );
    } finally {
      await api().patch('/api/settings/auth').set(sys).send({ ldap_group_mapping: null }).expect(200);
    }
    await api().delete('/api/groups/deployers').set('Authorization', plain).expect(204);
    // a membership of a name that is no group (written while the group was being deleted)
    const me = await svc.service.iam.store.userById(ids.plain);
    await svc.service.iam.store.updateUser(ids.plain, { groups: [...me!.groups, 'ghost'] });
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'ghost', permissions: ['socket:container:spawn'] })
      .expect(201);
    expect((await api().get('/api/groups/ghost').set(sys).expect(200)).body.members).to.deep.equal([]);
    expect((await api().get('/api/me/access').set('Authorization', plain).expect(200)).body.permissions).not.to.include('socket:container:spawn');
  });

  it('an account first reaching the host starts afresh: nothing a plain administrator made on it carries the host', async () => {
    const events = async (action: string, name: string) =>
      ((await api().get('/api/audit').query({ action, limit: 50 }).set(sys).expect(200)).body.events as any[]).filter((e) => e.target?.name === name);
    const keyFor = async (id: string) =>
      (await api().post(`/api/users/${id}/api-keys`).set('Authorization', plain).send({ label: 'made by plainadmin' }).expect(201)).body.token as string;
    const me = (auth: Record<string, string>) => api().get('/api/me').set(auth);
    // olga: password and key made by a plain administrator, who also signs in as her and makes one as her
    const olga = (
      await api()
        .post('/api/users')
        .set('Authorization', plain)
        .send({ username: 'olga', password: 'olga-password-1', groups: ['INT_USER'] })
        .expect(201)
    ).body.id;
    const olgaKey = await keyFor(olga);
    const asOlga = basic('olga', 'olga-password-1');
    const ownKey = (await api().post('/api/me/api-keys').set('Authorization', asOlga).send({ label: 'olga herself?' }).expect(201)).body.token;
    await api()
      .post(`/api/users/${olga}/password`)
      .set('Authorization', asOlga)
      .send({ current_password: 'olga-password-1', new_password: 'olga-password-2' })
      .expect(204);
    // and, signed in as her, enrols an authenticator app
    const session = (await api().post('/api/auth/login').send({ username: 'olga', password: 'olga-password-2' }).expect(200)).body.token;
    const secret = (await api().post('/api/me/mfa/totp').set('Authorization', `Bearer ${session}`).expect(200)).body.secret;
    await api()
      .post('/api/me/mfa/totp/confirm')
      .set('Authorization', `Bearer ${session}`)
      .send({ code: totpCode(secret) })
      .expect(200);
    // trusty: password set by a trusted actor, a key by the plain administrator
    const trusty = (await api().post('/api/users').set(sys).send({ username: 'trusty', password: 'trusty-password-1' }).expect(201)).body.id;
    const trustyKey = await keyFor(trusty);
    await me({ 'X-API-Key': olgaKey }).expect(200);

    const granted = await api()
      .patch(`/api/users/${olga}`)
      .set(sys)
      .send({ groups: ['INT_USER', 'runners'] })
      .expect(200);
    // the answer says what the grant cleared, and what to do
    expect(granted.body.warnings).to.have.length(1);
    expect(granted.body.warnings[0]).to.match(/^olga now reaches the host, and its password, which no superadmin had set, was cleared .*: set a new one/);
    const kept = await api()
      .patch(`/api/users/${trusty}`)
      .set(sys)
      .send({ extra_permissions: ['socket:mounts:repair'] })
      .expect(200);
    expect(kept.body).not.to.have.property('warnings');
    // every key and session of olga ended, and the password (set by the plain administrator, then changed with it) went
    for (const token of [olgaKey, ownKey]) await me({ 'X-API-Key': token }).expect(401);
    await me({ Authorization: `Bearer ${session}` }).expect(401);
    expect((await svc.service.db('mfa_factors').where({ user_id: olga })).length).to.equal(0);
    await me({ Authorization: basic('olga', 'olga-password-2') }).expect(401);
    const [olgaEvent] = await events('user.updated', 'olga');
    expect(olgaEvent.details.started_afresh).to.deep.equal({ credentials_revoked: 3, factors_removed: 1, password_cleared: true });
    // trusty keeps the password a trusted actor set; the key the plain administrator made ended
    await me({ 'X-API-Key': trustyKey }).expect(401);
    expect((await api().get('/api/me/access').set('Authorization', basic('trusty', 'trusty-password-1')).expect(200)).body.permissions).to.include(
      'socket:mounts:repair',
    );
    // a trusted actor gives olga a password: hers to use now, and the account, already reaching the host, keeps its credentials from here on
    await api().post(`/api/users/${olga}/password`).set(sys).send({ new_password: 'olga-password-3' }).expect(204);
    const keptKey = (await api().post('/api/me/api-keys').set('Authorization', basic('olga', 'olga-password-3')).send({ label: 'own' }).expect(201)).body.token;
    await api()
      .patch(`/api/users/${olga}`)
      .set(sys)
      .send({ extra_permissions: ['socket:mounts:repair'] })
      .expect(200);
    expect((await me({ 'X-API-Key': keptKey }).expect(200)).body.username).to.equal('olga');

    // a password a trusted actor sets with the grant stays, but no factor enrolled under the one before it does
    const vic = (
      await api()
        .post('/api/users')
        .set('Authorization', plain)
        .send({ username: 'vic', password: 'vic-password-1', groups: ['INT_USER'] })
        .expect(201)
    ).body.id;
    const vicSession = (await api().post('/api/auth/login').send({ username: 'vic', password: 'vic-password-1' }).expect(200)).body.token;
    const vicSecret = (await api().post('/api/me/mfa/totp').set('Authorization', `Bearer ${vicSession}`).expect(200)).body.secret;
    await api()
      .post('/api/me/mfa/totp/confirm')
      .set('Authorization', `Bearer ${vicSession}`)
      .send({ code: totpCode(vicSecret) })
      .expect(200);
    const vicGrant = await api()
      .patch(`/api/users/${vic}`)
      .set(sys)
      .send({ password: 'vic-password-from-the-superadmin', groups: ['INT_USER', 'runners'] })
      .expect(200);
    expect(vicGrant.body).not.to.have.property('warnings');
    const [vicEvent] = await events('user.updated', 'vic');
    expect(vicEvent.details.started_afresh).to.deep.equal({ credentials_revoked: 1, factors_removed: 1, password_cleared: false });
    expect((await api().post('/api/auth/login').send({ username: 'vic', password: 'vic-password-from-the-superadmin' }).expect(200)).body.token).to.be.a(
      'string',
    );

    // a group gaining a host permission: each member it first brings there starts afresh
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'quiet', permissions: ['feature:dashboard.view'] })
      .expect(201);
    const member = (
      await api()
        .post('/api/users')
        .set('Authorization', plain)
        .send({ username: 'member', password: 'member-password-1', groups: ['quiet'] })
        .expect(201)
    ).body.id;
    const memberKey = await keyFor(member);
    const quiet = await api()
      .patch('/api/groups/quiet')
      .set(sys)
      .send({ permissions: ['feature:dashboard.view', 'socket:container:spawn'] })
      .expect(200);
    expect(quiet.body.warnings).to.have.length(1);
    expect(quiet.body.warnings[0]).to.match(/^member now reaches the host, and its password, which no superadmin had set, was cleared/);
    await me({ 'X-API-Key': memberKey }).expect(401);
    await me({ Authorization: basic('member', 'member-password-1') }).expect(401);
    // the CLI says it too
    await api()
      .post('/api/users')
      .set('Authorization', plain)
      .send({ username: 'clio', password: 'clio-password-1', groups: ['INT_USER'] })
      .expect(201);
    const added = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['user', 'add-group', 'clio', 'runners']);
    expect(added.code, added.stderr).to.equal(0);
    expect(added.stderr).to.match(
      /^warning: clio now reaches the host, and its password, which no superadmin had set, was cleared .*service-core user set-password clio/m,
    );
    const [groupEvent] = await events('group.updated', 'quiet');
    expect(groupEvent.details.members_started_afresh).to.deep.equal([
      { username: 'member', credentials_revoked: 1, factors_removed: 0, password_cleared: true },
    ]);
  });

  it('taking access away stays open to administrators', async () => {
    const key = (await api().post('/api/me/api-keys').set('Authorization', basic('operator', 'operator-password')).send({ label: 'to revoke' }).expect(201))
      .body;
    await api().delete(`/api/users/${ids.operator}/api-keys/${key.id}`).set('Authorization', plain).expect(204);
    await api()
      .patch(`/api/users/${ids.operator}`)
      .set('Authorization', plain)
      .send({ groups: ['INT_VIEWER'] })
      .expect(200);
    // no longer reaching the host, the account is an ordinary one again
    await api().patch(`/api/users/${ids.operator}`).set('Authorization', plain).send({ display_name: 'Operator' }).expect(200);
    await api().patch(`/api/users/${ids.sleeper}`).set('Authorization', plain).send({ extra_permissions: [] }).expect(200);
    await api().delete('/api/groups/runners').set('Authorization', plain).expect(204);
  });

  it('trusted actors and the CLI hand host access out through the same services, each grant an audit line', async () => {
    const before = logs.lines.length;
    await api()
      .post('/api/groups')
      .set('Authorization', superadmin())
      .send({ name: 'runners', permissions: ['socket:container:spawn'] })
      .expect(201);
    await api().patch('/api/groups/runners').set(sys).send({ name: 'runner-ops' }).expect(200);
    await api()
      .patch(`/api/users/${ids.operator}`)
      .set('Authorization', superadmin())
      .send({ groups: ['INT_VIEWER', 'runner-ops'] })
      .expect(200);
    await api().post(`/api/users/${ids.operator}/password`).set(sys).send({ new_password: 'operator-password-2' }).expect(204);
    const env = testEnv(svc.dataDir, svc.databaseUrl, { SERVICE_LOG_LEVEL: 'info' });
    const add = await cli(env, ['user', 'add-group', 'plainadmin', 'runner-ops']);
    expect(add.code, add.stderr).to.equal(0);
    // the CLI's audit line, as text on stderr (JSON with --json)
    expect(add.stderr).to.match(/^info: .* audit=true .*"host_permissions":\["socket:container:spawn"\]/m);
    const issued = await cli(env, ['key', 'issue', '--user', 'operator', '--json']);
    expect(issued.code, issued.stderr).to.equal(0);
    const pw = await cli(env, ['user', 'set-password', 'operator'], 'operator-password-3\n');
    expect(pw.code, pw.stderr).to.equal(0);
    const mapped = await cli(env, ['settings', 'set', 'sso_default_groups', 'INT_VIEWER,runner-ops']);
    expect(mapped.code, mapped.stderr).to.equal(0);
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' });
    expect((await api().get('/api/me/access').set('Authorization', plain).expect(200)).body.permissions).to.include('socket:container:spawn');
    expect((await api().get('/api/me/access').set('X-API-Key', issued.json().token).expect(200)).body.permissions).to.include('socket:container:spawn');
    const audit = logs.lines
      .slice(before)
      .map((l) => JSON.parse(l))
      .filter((l) => l.audit === true && l.details?.host_permissions);
    expect(audit.map((a) => a.actor.username)).to.deep.equal(['admin', 'admin']);
  });
});

describe('IAM host boundary: a group change reaches live connections at once', function () {
  this.timeout(30_000);
  let svc: TestService;
  before(async () => {
    svc = await startService();
    // the periodic sweep is far away: only the change itself may update the connection
    svc.service.gateway.gateway.options.revalidateMs = 600_000;
  });
  after(async () => svc?.destroy());

  it('re-resolves every connection when a group, not a user, changed', async () => {
    const api = () => request(svc.url);
    await api()
      .post('/api/groups')
      .set('Authorization', adminAuth())
      .send({ name: 'senders', permissions: ['feature:notifications.send'] })
      .expect(201);
    await api()
      .post('/api/users')
      .set('Authorization', adminAuth())
      .send({ username: 'member', password: 'member-password', groups: ['INT_VIEWER', 'senders'] })
      .expect(201);
    const ws = await WsClient.connect(svc, { headers: { Authorization: basic('member', 'member-password') } });
    try {
      const gateway = svc.service.gateway.gateway;
      const push = (n: number) =>
        gateway.push({ event: 'system:notify', payload: { title: `probe ${n}`, message: 'm' }, audience: { permission: 'feature:notifications.send' } });
      push(1);
      await ws.next('system:notify', (f) => f.payload.title === 'probe 1');
      await api().patch('/api/groups/senders').set('Authorization', adminAuth()).send({ permissions: [] }).expect(200);
      await sleep(300);
      push(2);
      await sleep(300);
      expect(ws.all('system:notify').map((f) => f.payload.title)).to.deep.equal(['probe 1']);
      await api()
        .patch('/api/groups/senders')
        .set('Authorization', adminAuth())
        .send({ permissions: ['feature:notifications.send'] })
        .expect(200);
      await sleep(300);
      push(3);
      await ws.next('system:notify', (f) => f.payload.title === 'probe 3');
    } finally {
      await ws.close();
    }
  });
});

describe('IAM host boundary: the bootstrap admin made superadmin by the environment', function () {
  this.timeout(60_000);
  let svc: TestService;
  let first: TestService | undefined;
  after(async () => {
    await svc?.stop();
    // the first service made the data dir and the database: its destroy() removes them
    await first?.destroy();
  });

  it('keeps nothing a plain administrator set on it before; a CLI run by hand never takes the flag away', async () => {
    svc = first = await startService();
    const api = () => request(svc.url);
    await api()
      .post('/api/users')
      .set('Authorization', adminAuth())
      .send({ username: 'mallory', password: 'mallory-password-1', groups: ['INT_ADMIN'] })
      .expect(201);
    const admin = (await api().get('/api/users').set('Authorization', adminAuth()).expect(200)).body.users.find(
      (u: { username: string }) => u.username === 'admin',
    );
    // while the admin account is an ordinary administrator, another one may take it over...
    await api()
      .post(`/api/users/${admin.id}/password`)
      .set('Authorization', basic('mallory', 'mallory-password-1'))
      .send({ new_password: 'mallory-owns-admin' })
      .expect(204);
    const key = (await api().post('/api/me/api-keys').set('Authorization', basic('admin', 'mallory-owns-admin')).send({ label: 'kept' }).expect(201)).body
      .token;
    await svc.stop();
    // ...but when the operator makes it superadmin, none of what was set on it is trusted
    svc = await startService({ dataDir: svc.dataDir, databaseUrl: svc.databaseUrl, env: { SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    await request(svc.url).get('/api/me').set('X-API-Key', key).expect(401);
    await request(svc.url).get('/api/me').set('Authorization', basic('admin', 'mallory-owns-admin')).expect(401);
    expect((await request(svc.url).get('/api/me/access').set('Authorization', adminAuth()).expect(200)).body.is_superadmin).to.equal(true);
    // the CLI run without the service's environment leaves the flag as it is
    const run = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['user', 'list']);
    expect(run.code, run.stderr).to.equal(0);
    svc.service.bus.emit('iam:permissions_changed', { scope: 'all' });
    expect((await request(svc.url).get('/api/me/access').set('Authorization', adminAuth()).expect(200)).body.is_superadmin).to.equal(true);
  });
});
