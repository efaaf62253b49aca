import { expect } from 'chai';
import request from 'supertest';
import { startService, adminAuth, basic, testEnv, type TestService } from '../support/service.js';
import { cli } from '../cli/helpers.js';

/**
 * No self-escalation: an administrator hands out a group or a permission only when their own
 * permissions cover every permission it gives, on every path that changes memberships, extra
 * permissions, a group's permissions or the groups a login hands out.
 */
describe('no self-escalation', function () {
  this.timeout(30_000);
  let svc: TestService;
  const api = () => request(svc.url);

  before(async () => {
    svc = await startService();
    // a helpdesk group: it administers users, groups and the login settings, and reads
    await api()
      .post('/api/groups')
      .set('Authorization', adminAuth())
      .send({ name: 'helpdesk', permissions: ['feature:admin.users', 'feature:admin.groups', 'feature:admin.settings', 'feature:dashboard.view', 'api:read'] })
      .expect(201);
    for (const name of ['desk', 'victim']) {
      await api()
        .post('/api/users')
        .set('Authorization', adminAuth())
        .send({ username: name, password: `${name}-password-long`, groups: name === 'desk' ? ['helpdesk'] : ['INT_VIEWER'] })
        .expect(201);
    }
  });
  after(async () => svc.destroy());

  const desk = () => basic('desk', 'desk-password-long');
  /** The login settings changed by the helpdesk user. */
  const deskSettings = (body: object) => api().patch('/api/settings/auth').set('Authorization', desk()).send(body);
  const idOf = async (username: string) =>
    (await api().get('/api/users').set('Authorization', adminAuth()).expect(200)).body.users.find((u: { username: string }) => u.username === username).id;
  const refused = (res: { body: { error: { code: string; message: string } } }, lacks: RegExp) => {
    expect(res.body.error.code).to.equal('forbidden');
    expect(res.body.error.message)
      .to.match(/within your own permissions: you lack/)
      .and.to.match(lacks);
  };

  it('a user administrator cannot put themself or anyone into a group that gives more than they hold', async () => {
    const me = await idOf('desk');
    refused(
      await api()
        .patch(`/api/users/${me}`)
        .set('Authorization', desk())
        .send({ groups: ['helpdesk', 'INT_ADMIN'] })
        .expect(403),
      /feature:\*/,
    );
    const victim = await idOf('victim');
    refused(
      await api()
        .patch(`/api/users/${victim}`)
        .set('Authorization', desk())
        .send({ groups: ['INT_ADMIN'] })
        .expect(403),
      /api:write/,
    );
    refused(
      await api()
        .post('/api/users')
        .set('Authorization', desk())
        .send({ username: 'minion', password: 'minion-password-long', groups: ['INT_ADMIN'] })
        .expect(403),
      /feature:\*/,
    );
    refused(
      await api()
        .patch(`/api/users/${victim}`)
        .set('Authorization', desk())
        .send({ extra_permissions: ['api:write'] })
        .expect(403),
      /you lack api:write$/,
    );
    // what they hold themselves, they may hand out; taking away is always open
    await api()
      .patch(`/api/users/${victim}`)
      .set('Authorization', desk())
      .send({ groups: ['INT_VIEWER', 'helpdesk'] })
      .expect(200);
    await api()
      .patch(`/api/users/${victim}`)
      .set('Authorization', desk())
      .send({ groups: ['INT_VIEWER'] })
      .expect(200);
    // each refusal is in the trail
    await svc.service.iam.audit.flush();
    const denied = await svc.service.db('audit_events').where({ action: 'user.updated', outcome: 'denied', actor_username: 'desk' }).count({ n: '*' }).first();
    expect(Number(denied?.n)).to.be.greaterThan(0);
  });

  it('a group administrator cannot give a group (their own or another) a permission they lack', async () => {
    refused(
      await api()
        .patch('/api/groups/helpdesk')
        .set('Authorization', desk())
        .send({ permissions: ['feature:admin.users', 'feature:admin.groups', 'feature:admin.settings', 'feature:dashboard.view', 'api:read', 'feature:*'] })
        .expect(403),
      /you lack feature:\*$/,
    );
    refused(
      await api()
        .post('/api/groups')
        .set('Authorization', desk())
        .send({ name: 'writers', permissions: ['api:write'] })
        .expect(403),
      /api:write/,
    );
    await api()
      .post('/api/groups')
      .set('Authorization', desk())
      .send({ name: 'readers', permissions: ['api:read'] })
      .expect(201);
  });

  it('a settings administrator cannot have a login hand out a group that gives more than they hold', async () => {
    refused(await deskSettings({ ldap_group_mapping: { 'cn=desk,ou=groups,dc=example,dc=org': ['INT_ADMIN'] } }).expect(403), /feature:\*/);
    refused(await deskSettings({ sso_default_groups: ['INT_USER'] }).expect(403), /api:write/);
    await deskSettings({ sso_default_groups: ['readers'] }).expect(200);
  });

  it('moving what a login already hands out to other people is handing it out: per directory group, and to every new account', async () => {
    // a superadmin-free setup: the system key is not configured here, the CLI is the trusted actor
    const env = testEnv(svc.dataDir, svc.databaseUrl);
    const mapped = await cli(env, ['settings', 'set', 'oidc_group_mapping', JSON.stringify({ 'idp-admins': ['INT_ADMIN'], 'idp-devs': ['readers'] })]);
    expect(mapped.code, mapped.stderr).to.equal(0);
    try {
      refused(await deskSettings({ oidc_group_mapping: { 'idp-admins': ['INT_ADMIN'], 'idp-devs': ['INT_ADMIN'] } }).expect(403), /feature:\*/);
      refused(await deskSettings({ sso_default_groups: ['INT_ADMIN'] }).expect(403), /feature:\*/);
      // what the mapping already hands to the same directory group stays changeable
      await deskSettings({ oidc_group_mapping: { 'idp-admins': ['INT_ADMIN'], 'idp-devs': [] } }).expect(200);
    } finally {
      expect((await cli(env, ['settings', 'unset', 'oidc_group_mapping'])).code).to.equal(0);
    }
  });

  it("renaming a group hands its permissions to whoever holds the new name: within the renamer's own; a group that must use a second factor keeps its name", async () => {
    await api()
      .post('/api/groups')
      .set('Authorization', adminAuth())
      .send({ name: 'superops', permissions: ['feature:*', 'api:write'] })
      .expect(201);
    refused(await api().patch('/api/groups/superops').set('Authorization', desk()).send({ name: 'readers-2' }).expect(403), /feature:\*/);
    await api()
      .patch('/api/settings/auth')
      .set('Authorization', adminAuth())
      .send({ mfa_required_groups: ['readers'] })
      .expect(200);
    try {
      const res = await api().patch('/api/groups/readers').set('Authorization', desk()).send({ name: 'readers-old' }).expect(403);
      expect(res.body.error.message).to.match(/only a superadmin may rename readers: its members must use a second factor/);
    } finally {
      await api().patch('/api/settings/auth').set('Authorization', adminAuth()).send({ mfa_required_groups: null }).expect(200);
    }
    // a group within the renamer's own permissions may be renamed
    await api().patch('/api/groups/readers').set('Authorization', desk()).send({ name: 'readers-2' }).expect(200);
    await api().patch('/api/groups/readers-2').set('Authorization', desk()).send({ name: 'readers' }).expect(200);
  });

  it('taking an account over hands out what it holds: a user administrator cannot set the password of, change or delete an account with more', async () => {
    const boss = (
      await api()
        .post('/api/users')
        .set('Authorization', adminAuth())
        .send({ username: 'boss', password: 'boss-password-long', groups: ['INT_ADMIN'] })
        .expect(201)
    ).body;
    refused(
      await api().post(`/api/users/${boss.id}/password`).set('Authorization', desk()).send({ new_password: 'Hx7#takeover-Quasar-2291' }).expect(403),
      /feature:\*/,
    );
    refused(await api().patch(`/api/users/${boss.id}`).set('Authorization', desk()).send({ email: 'desk@example.org' }).expect(403), /feature:\*/);
    refused(await api().delete(`/api/users/${boss.id}`).set('Authorization', desk()).expect(403), /feature:\*/);
    // taking access away stays open to every administrator of users
    await api().patch(`/api/users/${boss.id}`).set('Authorization', desk()).send({ disabled: true }).expect(200);
    await api().get('/api/me').set('Authorization', basic('boss', 'boss-password-long')).expect(401);
    // an account within the administrator's own permissions is theirs to manage
    const victim = await idOf('victim');
    await api().post(`/api/users/${victim}/password`).set('Authorization', desk()).send({ new_password: 'victim-password-renewed' }).expect(204);
  });

  it('trusted actors are not limited by it: the CLI hands out INT_ADMIN', async () => {
    const run = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['user', 'add-group', 'victim', 'INT_ADMIN']);
    expect(run.code, run.stderr).to.equal(0);
    await api()
      .patch(`/api/users/${await idOf('victim')}`)
      .set('Authorization', adminAuth())
      .send({ groups: ['INT_VIEWER'] })
      .expect(200);
  });
});
