import { expect } from 'chai';
import { createUser } from '../auth/helpers.js';
import request from 'supertest';
import { startService, adminAuth, basic, testEnv, ADMIN, SYSTEM_KEY, type TestService, promoteToSuperadmin } from '../support/service.js';
import { cli } from '../cli/helpers.js';
import { isUniqueViolation } from '../../src/db/knex.js';
import { capturingLogger } from '../sockets/helpers.js';

describe('IAM model and admin API', () => {
  let svc: TestService;
  before(async () => {
    svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY } });
  });
  after(async () => svc.destroy());

  const admin = () => adminAuth();

  it('seeds the default groups with the spec grants and the bootstrap users', async () => {
    const res = await request(svc.url).get('/api/groups').set('Authorization', admin()).expect(200);
    const byName = Object.fromEntries(res.body.groups.map((g: any) => [g.name, g]));
    expect(byName.INT_VIEWER.permissions).to.have.members(['feature:dashboard.view', 'api:read']);
    expect(byName.INT_USER.permissions).to.have.members(['feature:dashboard.view', 'api:read', 'api:write', 'feature:dashboard.admin_sections']);
    expect(byName.INT_ADMIN.permissions).to.have.members(['feature:*', 'api:read', 'api:write']);
    const users = (await request(svc.url).get('/api/users').set('Authorization', admin()).expect(200)).body.users;
    const a = users.find((u: any) => u.username === 'admin');
    const b = users.find((u: any) => u.username === 'bot');
    expect(a).to.include({ disabled: false });
    expect(a.groups).to.deep.equal(['INT_ADMIN']);
    expect(a.roles).to.deep.equal([]);
    expect(a.id).to.match(/^[0-9a-f-]{36}$/);
    expect(a).not.to.have.property('hashed_password');
    expect(b.roles).to.deep.equal(['bot']);
    expect(b.groups).to.deep.equal(['INT_USER']);
    const access = (await request(svc.url).get('/api/me/access').set('Authorization', admin()).expect(200)).body;
    expect(access.is_superadmin).to.equal(false);
    expect(access.permissions).to.include.members([
      'feature:admin.users',
      'feature:admin.groups',
      'feature:admin.settings',
      'feature:admin.plugins',
      'api:read',
      'api:write',
    ]);
    expect(access.permissions).not.to.include('socket:container:cleanup');
  });

  it('roles are never read as groups', async () => {
    const u = (
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', admin())
        .send({ username: 'sneaky', password: 'sneaky-password', groups: ['INT_VIEWER'] })
        .expect(201)
    ).body;
    // even a role string that names a group grants nothing
    await svc.service
      .db('users')
      .where({ id: u.id })
      .update({ roles: JSON.stringify(['INT_ADMIN']) });
    svc.service.bus.emit('iam:permissions_changed', { scope: 'user', user_id: u.id });
    const access = (await request(svc.url).get('/api/me/access').set('Authorization', basic('sneaky', 'sneaky-password')).expect(200)).body;
    expect(access.permissions).to.deep.equal(['api:read', 'feature:dashboard.view']);
  });

  it('effective permissions = union of groups plus extra_permissions', async () => {
    await request(svc.url)
      .post('/api/groups')
      .set('Authorization', admin())
      .send({ name: 'ops', permissions: ['feature:notifications.broadcast'] })
      .expect(201);
    const u = (
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', admin())
        .send({ username: 'opsy', password: 'opsy-password-long', groups: ['INT_VIEWER', 'ops'], extra_permissions: ['feature:notifications.send'] })
        .expect(201)
    ).body;
    expect(u.identities).to.deep.equal([{ provider: 'local', provider_user_id: 'opsy' }]);
    const access = (await request(svc.url).get('/api/me/access').set('Authorization', basic('opsy', 'opsy-password-long')).expect(200)).body;
    expect(access.permissions).to.deep.equal(['api:read', 'feature:dashboard.view', 'feature:notifications.broadcast', 'feature:notifications.send']);
    expect(access.groups).to.deep.equal(['INT_VIEWER', 'ops']);
  });

  it('validates admin writes, naming the field; unknown names are 400, duplicates 409', async () => {
    const cases: [string, string, any, number, string][] = [
      ['post', '/api/users', { username: 'bad name!' }, 400, 'username'],
      ['post', '/api/users', { username: 'x1', password: 'short' }, 400, 'password'],
      ['post', '/api/users', { username: 'x1', email: 'not-an-email' }, 400, 'email'],
      ['post', '/api/users', { username: 'x1', groups: ['NOPE'] }, 400, 'groups'],
      ['post', '/api/users', { username: 'x1', extra_permissions: ['feature:made.up'] }, 400, 'extra_permissions'],
      ['post', '/api/users', { username: 'x1', groups: 'INT_USER' }, 400, 'groups'],
      ['post', '/api/users', { username: 'x1', surprise: true }, 400, 'surprise'],
      ['post', '/api/groups', { name: '' }, 400, 'name'],
      ['post', '/api/groups', { name: 'g1', permissions: ['nope'] }, 400, 'permissions'],
      ['post', '/api/groups', { name: 'g1', permissions: ['feature:made.up'] }, 400, 'permissions'],
      ['patch', '/api/groups/INT_USER', {}, 400, 'body'],
    ];
    for (const [method, path, body, status, field] of cases) {
      const res = await (request(svc.url) as any)[method](path).set('Authorization', admin()).send(body);
      expect(res.status, `${method} ${path} ${JSON.stringify(body)}`).to.equal(status);
      expect(res.body.error.code).to.equal('validation_failed');
      const named = JSON.stringify(res.body.error);
      expect(named, `${path} names ${field}`).to.contain(field === 'body' ? 'validation' : field);
    }
    // a name's refusal states its rule
    const badName = await request(svc.url).post('/api/users').set('Authorization', admin()).send({ username: 'İstanbul' }).expect(400);
    expect(badName.body.error.details).to.deep.equal([
      { field: 'username', message: 'must be 1 to 64 characters: letters A-Z and a-z, digits and . _ @ - (no spaces)' },
    ]);
    const badGroup = await request(svc.url).post('/api/groups').set('Authorization', admin()).send({ name: '-ops' }).expect(400);
    expect(badGroup.body.error.details[0].message).to.match(/^must be a group name of 1 to 64 characters: .*starting with a letter or digit/);
    // an item of a list is named as clients write it, the same form a batch's and a host service's problems take
    const item = await request(svc.url)
      .post('/api/users')
      .set('Authorization', admin())
      .send({ username: 'x1', groups: ['INT_USER', 5] })
      .expect(400);
    expect(item.body.error.details).to.deep.equal([{ field: 'groups[1]', message: 'must be a string' }]);
    expect((await request(svc.url).post('/api/users').set('Authorization', admin()).send({ username: 'admin' }).expect(409)).body.error.code).to.equal(
      'conflict',
    );
    expect((await request(svc.url).post('/api/groups').set('Authorization', admin()).send({ name: 'INT_USER' }).expect(409)).body.error.code).to.equal(
      'conflict',
    );
    // a group name differs from every other in more than case, made or renamed; a group may change its own case
    const twin = await request(svc.url).post('/api/groups').set('Authorization', admin()).send({ name: 'int_user' }).expect(409);
    expect(twin.body.error.message).to.equal('group INT_USER exists: group names must differ in more than case');
    await request(svc.url).post('/api/groups').set('Authorization', admin()).send({ name: 'night-shift' }).expect(201);
    await request(svc.url).patch('/api/groups/night-shift').set('Authorization', admin()).send({ name: 'Int_User' }).expect(409);
    await request(svc.url).patch('/api/groups/night-shift').set('Authorization', admin()).send({ name: 'Night-Shift' }).expect(200);
    await request(svc.url).get('/api/groups/Night-Shift').set('Authorization', admin()).expect(200);
    await request(svc.url).delete('/api/groups/Night-Shift').set('Authorization', admin()).expect(204);
    await request(svc.url).get('/api/users/not-a-uuid').set('Authorization', admin()).expect(400);
    await request(svc.url).get('/api/users/00000000-0000-4000-8000-000000000000').set('Authorization', admin()).expect(404);
    await request(svc.url).get('/api/groups/NOPE').set('Authorization', admin()).expect(404);
  });

  it('only a superadmin sets roles or changes a superadmin account', async () => {
    const res = await request(svc.url)
      .post('/api/users')
      .set('Authorization', admin())
      .send({ username: 'wannabe', roles: ['superadmin'] })
      .expect(403);
    expect(res.body.error.code).to.equal('forbidden');
    // the root account, made through the database as an operator would with the system key
    const root = (
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', admin())
        .send({ username: 'root1', password: 'root1-password', groups: ['INT_VIEWER'] })
        .expect(201)
    ).body;
    await promoteToSuperadmin(svc, root.id);
    await request(svc.url).patch(`/api/users/${root.id}`).set('Authorization', admin()).send({ password: 'taken-over-password' }).expect(403);
    await request(svc.url).post(`/api/users/${root.id}/password`).set('Authorization', admin()).send({ new_password: 'taken-over-password' }).expect(403);
    await request(svc.url).delete(`/api/users/${root.id}`).set('Authorization', admin()).expect(403);
    // the superadmin itself may
    await request(svc.url).patch(`/api/users/${root.id}`).set('Authorization', basic('root1', 'root1-password')).send({ display_name: 'Root' }).expect(200);
  });

  it("one's own password and second factors are not the administrators' routes' to change: every credential of the account is refused there", async () => {
    // an administrator of users (not of INT_ADMIN: the tests below count its members)
    await createUser(svc.url, { username: 'frank', password: 'frank-password-1', groups: ['INT_USER'], extra_permissions: ['feature:admin.users'] });
    const frank = basic('frank', 'frank-password-1');
    const me = (await request(svc.url).get('/api/me').set('Authorization', frank).expect(200)).body;
    const key = (await request(svc.url).post('/api/me/api-keys').set('Authorization', frank).send({ label: 'frank ci' }).expect(201)).body.token;
    for (const credential of [{ Authorization: frank }, { 'X-API-Key': key }]) {
      const patched = await request(svc.url).patch(`/api/users/${me.id}`).set(credential).send({ password: 'frank-new-password-2' }).expect(400);
      expect(patched.body.error.details).to.deep.equal([
        {
          field: 'password',
          message: 'your own password is changed with your current one: POST /api/users/{id}/password with current_password (the account page)',
        },
      ]);
      const reset = await request(svc.url).delete(`/api/users/${me.id}/mfa`).set(credential).expect(403);
      expect(reset.body.error.message).to.match(/^your own second factors are removed on the account page/);
    }
    // the password is the one it was; other fields of one's own account stay one's own to change
    await request(svc.url).get('/api/me').set('Authorization', frank).expect(200);
    await request(svc.url).patch(`/api/users/${me.id}`).set('Authorization', frank).send({ display_name: 'Frank' }).expect(200);
    await request(svc.url).delete(`/api/users/${me.id}`).set('X-API-Key', SYSTEM_KEY).expect(204);
  });

  it("the bootstrap admin's superadmin flag is the environment's: a change the next start would undo is refused, with the way that lasts", async () => {
    const sys = { 'X-API-Key': SYSTEM_KEY };
    const admin = (await request(svc.url).get('/api/users').query({ username: ADMIN.username }).set(sys).expect(200)).body.users[0];
    expect(admin.roles).to.not.include('superadmin');
    const res = await request(svc.url)
      .patch(`/api/users/${admin.id}`)
      .set(sys)
      .send({ roles: ['superadmin'] })
      .expect(409);
    expect(res.body.error.code).to.equal('conflict');
    expect(res.body.error.message).to.include('follows SERVICE_ADMIN_FORCE_SUPERADMIN at every start').and.include('make another account superadmin');
    // what the boot would set anyway is no conflict; another account's flag is the administrators'
    await request(svc.url).patch(`/api/users/${admin.id}`).set(sys).send({ roles: [] }).expect(200);
    const other = (
      await request(svc.url)
        .post('/api/users')
        .set(sys)
        .send({ username: 'own-root', password: 'own-root-password', groups: ['INT_VIEWER'] })
        .expect(201)
    ).body;
    await request(svc.url)
      .patch(`/api/users/${other.id}`)
      .set(sys)
      .send({ roles: ['superadmin'] })
      .expect(200);
    await request(svc.url).patch(`/api/users/${other.id}`).set(sys).send({ roles: [] }).expect(200);
  });

  it('the bootstrap accounts are disabled, not deleted: every start would make them again', async () => {
    const sys = { 'X-API-Key': SYSTEM_KEY };
    const users = (await request(svc.url).get('/api/users').set(sys).expect(200)).body.users as Array<{ id: string; username: string }>;
    for (const name of [ADMIN.username, 'bot']) {
      const { id } = users.find((u) => u.username === name)!;
      const res = await request(svc.url).delete(`/api/users/${id}`).set(sys).expect(409);
      expect(res.body.error.message).to.include(`${name} is a bootstrap account`).and.include(`service-core user disable ${name}`);
    }
    // disabling lasts, and is undone the same way
    const bot = users.find((u) => u.username === 'bot')!;
    await request(svc.url).patch(`/api/users/${bot.id}`).set(sys).send({ disabled: true }).expect(200);
    await request(svc.url).patch(`/api/users/${bot.id}`).set(sys).send({ disabled: false }).expect(200);
  });

  it('the last enabled superadmin cannot lose the role, be disabled or deleted, through the API or the CLI; the answer says why', async () => {
    const sys = { 'X-API-Key': SYSTEM_KEY };
    const solo = (
      await request(svc.url)
        .post('/api/users')
        .set(sys)
        .send({ username: 'solo-root', password: 'solo-root-password', roles: ['superadmin'], groups: ['INT_VIEWER'] })
        .expect(201)
    ).body;
    // every other superadmin steps down first: solo-root is the last
    for (const u of (await request(svc.url).get('/api/users').set(sys).expect(200)).body.users) {
      if (u.id !== solo.id && u.roles.includes('superadmin')) await request(svc.url).patch(`/api/users/${u.id}`).set(sys).send({ roles: [] }).expect(200);
    }
    const self = basic('solo-root', 'solo-root-password');
    const said = /solo-root is the last enabled superadmin: make another account superadmin first/;
    for (const [req, why] of [
      [request(svc.url).patch(`/api/users/${solo.id}`).set('Authorization', self).send({ roles: [] }), 'demoted'],
      [request(svc.url).patch(`/api/users/${solo.id}`).set(sys).send({ disabled: true }), 'disabled'],
      [request(svc.url).delete(`/api/users/${solo.id}`).set(sys), 'deleted'],
    ] as const) {
      const res = await req.expect(409);
      expect(res.body.error.code).to.equal('conflict');
      expect(res.body.error.message)
        .to.match(said)
        .and.to.match(new RegExp(`can be ${why}$`));
    }
    const run = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['user', 'disable', 'solo-root']);
    expect(run.code).to.equal(1);
    expect(run.stderr).to.match(said);
    // with a second superadmin, the first may step down
    await request(svc.url)
      .post('/api/users')
      .set(sys)
      .send({ username: 'solo-root-2', password: 'solo-root-2-password', roles: ['superadmin'], groups: ['INT_VIEWER'] })
      .expect(201);
    await request(svc.url).patch(`/api/users/${solo.id}`).set('Authorization', self).send({ roles: [] }).expect(200);
  });

  it('two changes at once cannot leave no enabled superadmin: they are judged one after the other', async () => {
    const sys = { 'X-API-Key': SYSTEM_KEY };
    const make = async (username: string) =>
      (
        await request(svc.url)
          .post('/api/users')
          .set(sys)
          .send({ username, password: `${username}-password-long`, roles: ['superadmin'], groups: ['INT_VIEWER'] })
          .expect(201)
      ).body.id as string;
    const [a, b] = [await make('race-root-a'), await make('race-root-b')];
    for (const u of (await request(svc.url).get('/api/users').set(sys).expect(200)).body.users) {
      if (u.id !== a && u.id !== b && u.roles.includes('superadmin'))
        await request(svc.url).patch(`/api/users/${u.id}`).set(sys).send({ roles: [] }).expect(200);
    }
    // a new password makes each request wait on its hash: the two overlap
    const [ra, rb] = await Promise.all(
      [a, b].map((id, i) =>
        request(svc.url)
          .patch(`/api/users/${id}`)
          .set(sys)
          .send({ disabled: true, password: `race-renewed-${i}-password-long` }),
      ),
    );
    expect([ra.status, rb.status].sort()).to.deep.equal([200, 409]);
    const enabled = (await request(svc.url).get('/api/users').set(sys).expect(200)).body.users.filter(
      (u: { roles: string[]; disabled: boolean }) => u.roles.includes('superadmin') && !u.disabled,
    );
    expect(enabled).to.have.length(1);
  });

  it('refuses a common or easily guessed password wherever one is set: creating, changing, setting it, and the CLI', async () => {
    const field = (res: request.Response) => res.body.error.details[0] as { field: string; message: string };
    const created = await request(svc.url).post('/api/users').set('Authorization', admin()).send({ username: 'weakling', password: 'password123' }).expect(400);
    expect(field(created)).to.deep.include({ field: 'password' });
    expect(field(created).message).to.match(/is a common password/);
    // the account's own name is among the first guesses
    const named = await request(svc.url)
      .post('/api/users')
      .set('Authorization', admin())
      .send({ username: 'marguerite', password: 'marguerite2024' })
      .expect(400);
    expect(field(named).message).to.match(/too easy to guess/);
    const u = (
      await request(svc.url).post('/api/users').set('Authorization', admin()).send({ username: 'weakling', password: 'tidal-orbit-lantern-97' }).expect(201)
    ).body;
    expect(
      field(await request(svc.url).patch(`/api/users/${u.id}`).set('Authorization', admin()).send({ password: 'Summer2024!' }).expect(400)),
    ).to.deep.include({
      field: 'password',
      message: 'is too easy to guess (strength 2 of 4, 3 needed): a longer passphrase of unrelated words works well',
    });
    const own = await request(svc.url)
      .post(`/api/users/${u.id}/password`)
      .set('Authorization', basic('weakling', 'tidal-orbit-lantern-97'))
      .send({ current_password: 'tidal-orbit-lantern-97', new_password: 'qwertyuiop' })
      .expect(400);
    expect(field(own)).to.deep.include({ field: 'new_password' });
    const run = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['user', 'set-password', 'weakling'], 'iloveyou2\n');
    expect(run.code, run.stderr).to.equal(2);
    expect(run.stderr).to.match(/password: (is a common password|is too easy to guess)/);
    // the old password still works: nothing was changed
    await request(svc.url).get('/api/me').set('Authorization', basic('weakling', 'tidal-orbit-lantern-97')).expect(200);
  });

  it('an account created without a password, with no single sign-on to sign in through, is made and the answer says nobody can use it yet', async () => {
    const bare = await request(svc.url).post('/api/users').set('Authorization', admin()).send({ username: 'nopass.nosso' }).expect(201);
    expect(bare.body.warnings).to.deep.equal([
      'nopass.nosso has no password and no single sign-on provider is configured: they cannot sign in until a password is set',
    ]);
    const withPassword = await request(svc.url)
      .post('/api/users')
      .set('Authorization', admin())
      .send({ username: 'pass.nosso', password: 'pass-nosso-password-1' })
      .expect(201);
    expect(withPassword.body).not.to.have.property('warnings');
    // a directory configured but not complete (no base DN) is not in the login chain: the same warning
    const ldap = { SERVICE_AUTH_PROVIDERS: 'local,ldap', SERVICE_LDAP_URL: 'ldap://ldap.example.org' };
    // one service per configuration: each start costs seconds on a loaded machine
    const warned = async (env: Record<string, string>, bodies: Record<string, unknown>[]) => {
      const other = await startService({ env });
      try {
        const answers: (string[] | null)[] = [];
        for (const body of bodies) {
          const res = await request(other.url).post('/api/users').set('Authorization', adminAuth()).send(body).expect(201);
          answers.push((res.body.warnings as string[] | undefined) ?? null);
        }
        return answers;
      } finally {
        await other.destroy();
      }
    };
    expect(await warned(ldap, [{ username: 'half.ldap' }])).to.deep.equal([
      ['half.ldap has no password and no single sign-on provider is configured: they cannot sign in until a password is set'],
    ]);
    // a directory in the chain links an account made in advance only by its e-mail, when that is on, and never a privileged one
    const full = { ...ldap, SERVICE_LDAP_BASE_DN: 'dc=example,dc=org' };
    const unreachable = (name: string, why: string) =>
      `${name} has no password, and a first single sign-on would make a new account rather than sign in to this one (${why}): they cannot sign in until a password is set`;
    expect(await warned(full, [{ username: 'no.linking', email: 'no.linking@example.org' }])).to.deep.equal([
      [unreachable('no.linking', 'ldap links an existing account only by e-mail, and that is off')],
    ]);
    const linking = { ...full, SERVICE_LDAP_LINK_BY_EMAIL: 'true' };
    expect(
      await warned(linking, [
        { username: 'no.email' },
        { username: 'an.admin', email: 'an.admin@example.org', groups: ['INT_ADMIN'] },
        // made ready for the directory's first sign-on: nothing said
        { username: 'ready.user', email: 'ready.user@example.org', groups: ['INT_USER'] },
      ]),
    ).to.deep.equal([
      [unreachable('no.email', 'it links an existing account only by e-mail, and this one has none')],
      [unreachable('an.admin', 'a privileged account is never linked by e-mail')],
      null,
    ]);
  });

  it('a username another user holds in another case is taken (409): the lockout counts names without case', async () => {
    await request(svc.url).post('/api/users').set('Authorization', admin()).send({ username: 'vic.case', password: 'vic-password-12345' }).expect(201);
    for (const username of ['VIC.case', 'Vic.Case']) {
      const res = await request(svc.url).post('/api/users').set('Authorization', admin()).send({ username, password: 'twin-password-12345' }).expect(409);
      expect(res.body.error).to.deep.include({ code: 'conflict', message: `username ${username} is taken (as vic.case: names must differ in more than case)` });
    }
    // and the database holds it for every instance: two creations at the same instant cannot both land
    const db = svc.service.db;
    const row = await db('users').where({ username: 'vic.case' }).first();
    const twin = { ...row, id: '00000000-0000-4000-8000-00000000c45e', username: 'VIC.CASE' };
    const refused = await db('users')
      .insert(twin)
      .then(
        () => null,
        (err: unknown) => err,
      );
    expect(isUniqueViolation(refused), String(refused)).to.equal(true);
    // and a client finds a user by name, in any case, without listing them all
    const found = async (username: string) =>
      (await request(svc.url).get('/api/users').query({ username }).set('Authorization', admin()).expect(200)).body.users.map(
        (u: { username: string }) => u.username,
      );
    expect(await found('VIC.Case')).to.deep.equal(['vic.case']);
    expect(await found('vic')).to.deep.equal([]);
    const bad = await request(svc.url)
      .get('/api/users')
      .query({ username: 'v'.repeat(65) })
      .set('Authorization', admin())
      .expect(400);
    expect(bad.body.error.details[0].field).to.equal('username');
  });

  it('refuses to delete, demote or disable the last enabled member of INT_ADMIN (409)', async () => {
    const users = (await request(svc.url).get('/api/users').set('Authorization', admin()).expect(200)).body.users;
    const a = users.find((u: any) => u.username === 'admin');
    await request(svc.url).delete(`/api/users/${a.id}`).set('Authorization', admin()).expect(409);
    await request(svc.url)
      .patch(`/api/users/${a.id}`)
      .set('Authorization', admin())
      .send({ groups: ['INT_USER'] })
      .expect(409);
    await request(svc.url).patch(`/api/users/${a.id}`).set('Authorization', admin()).send({ disabled: true }).expect(409);
    // with a second admin, the first may go
    const second = (
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', admin())
        .send({ username: 'admin2', password: 'admin2-password', groups: ['INT_ADMIN'] })
        .expect(201)
    ).body;
    await request(svc.url)
      .patch(`/api/users/${a.id}`)
      .set('Authorization', admin())
      .send({ groups: ['INT_ADMIN', 'INT_USER'] })
      .expect(200);
    await request(svc.url).delete(`/api/users/${second.id}`).set('Authorization', basic('admin2', 'admin2-password')).expect(204);
  });

  it('renaming or deleting a group updates every member; built-in groups stay', async () => {
    await request(svc.url)
      .post('/api/groups')
      .set('Authorization', admin())
      .send({ name: 'devs', description: 'developers', permissions: ['api:write'] })
      .expect(201);
    const u = (
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', admin())
        .send({ username: 'dev1', password: 'dev1-password-long', groups: ['INT_VIEWER', 'devs'] })
        .expect(201)
    ).body;
    const renamed = await request(svc.url).patch('/api/groups/devs').set('Authorization', admin()).send({ name: 'developers' }).expect(200);
    expect(renamed.body).to.deep.include({ name: 'developers', description: 'developers', permissions: ['api:write'], members: ['dev1'] });
    expect((await request(svc.url).get(`/api/users/${u.id}`).set('Authorization', admin()).expect(200)).body.groups).to.deep.equal([
      'INT_VIEWER',
      'developers',
    ]);
    await request(svc.url).get('/api/groups/devs').set('Authorization', admin()).expect(404);
    const access = (await request(svc.url).get('/api/me/access').set('Authorization', basic('dev1', 'dev1-password-long')).expect(200)).body;
    expect(access.permissions).to.include('api:write');
    await request(svc.url).post('/api/groups').set('Authorization', admin()).send({ name: 'other' }).expect(201);
    await request(svc.url).patch('/api/groups/developers').set('Authorization', admin()).send({ name: 'other' }).expect(409);
    await request(svc.url).delete('/api/groups/developers').set('Authorization', admin()).expect(204);
    expect((await request(svc.url).get(`/api/users/${u.id}`).set('Authorization', admin()).expect(200)).body.groups).to.deep.equal(['INT_VIEWER']);
    await request(svc.url).delete('/api/groups/INT_VIEWER').set('Authorization', admin()).expect(409);
    await request(svc.url).patch('/api/groups/INT_ADMIN').set('Authorization', admin()).send({ name: 'ADMINS' }).expect(409);
  });

  it('lists the permission catalog to any authenticated caller', async () => {
    await request(svc.url).get('/api/permissions').expect(401);
    const res = await request(svc.url).get('/api/permissions').set('Authorization', basic('opsy', 'opsy-password-long')).expect(200);
    const ids = res.body.permissions.map((p: any) => p.id);
    expect(ids).to.include.members(['feature:dashboard.view', 'feature:admin.plugins', 'api:read', 'socket:container:cleanup', 'socket:mounts:repair']);
  });

  it('ledger: baseline and role grants are applied once; a revoked grant stays revoked', async () => {
    const iam = svc.service.iam;
    iam.ledger.setPlugin({ id: 'demo', roles: [{ id: 'operator', permissions: ['plugin:demo:run'], auto_map_groups: ['INT_USER'] }] });
    const booted = svc.service.bus.waitFor('iam:permissions_changed');
    svc.service.bus.emit('plugin:state_changed', { plugin_id: 'demo', state: 'loaded', enabled: true });
    await booted;
    await new Promise((r) => setTimeout(r, 100));
    const groups = async () =>
      Object.fromEntries(
        (await request(svc.url).get('/api/groups').set('Authorization', admin()).expect(200)).body.groups.map((g: any) => [g.name, g.permissions]),
      );
    let g = await groups();
    expect(g.INT_VIEWER).to.include.members(['plugin:demo', 'plugin:demo:api:read']).and.not.include('plugin:demo:api:write');
    expect(g.INT_USER).to.include.members(['plugin:demo', 'plugin:demo:api:read', 'plugin:demo:api:write', 'plugin:demo:run']);
    expect(g.INT_ADMIN).to.include.members(['plugin:demo', 'plugin:demo:api:read', 'plugin:demo:api:write']);
    // an administrator revokes one grant
    iam.setPluginCatalog(
      'demo',
      [
        { id: 'plugin:demo:run', description: 'run', plugin: 'demo' },
        { id: 'plugin:demo', description: '', plugin: 'demo' },
        { id: 'plugin:demo:api:read', description: '', plugin: 'demo' },
        { id: 'plugin:demo:api:write', description: '', plugin: 'demo' },
      ],
      [],
    );
    const kept = g.INT_USER.filter((p: string) => p !== 'plugin:demo:run');
    await request(svc.url).patch('/api/groups/INT_USER').set('Authorization', admin()).send({ permissions: kept }).expect(200);
    for (let i = 0; i < 2; i++) {
      svc.service.bus.emit('plugin:state_changed', { plugin_id: 'demo', state: i ? 'loaded' : 'disabled', enabled: Boolean(i) });
      await iam.ledger.applyAll();
    }
    g = await groups();
    expect(g.INT_USER).not.to.include('plugin:demo:run');
    expect(g.INT_USER.filter((p: string) => p === 'plugin:demo').length).to.equal(1);
    const rows = await svc.service.db('role_grants').where({ plugin_id: 'demo' });
    expect(rows.length).to.equal(9);
  });
});

describe('IAM across restarts', () => {
  it('keeps operator edits to default groups, applies a configured password, follows FORCE_SUPERADMIN', async function () {
    this.timeout(30000);
    const first = await startService();
    try {
      await request(first.url)
        .patch('/api/groups/INT_VIEWER')
        .set('Authorization', adminAuth())
        .send({ permissions: ['api:read'], description: 'edited' })
        .expect(200);
      await first.stop();
      const second = await startService({
        dataDir: first.dataDir,
        databaseUrl: first.databaseUrl,
        env: { SERVICE_ADMIN_PASSWORD: 'a-rotated-admin-password', SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' },
      });
      try {
        await request(second.url).get('/api/me').set('Authorization', adminAuth()).expect(401);
        const auth = basic(ADMIN.username, 'a-rotated-admin-password');
        const g = (await request(second.url).get('/api/groups/INT_VIEWER').set('Authorization', auth).expect(200)).body;
        expect(g.permissions).to.deep.equal(['api:read']);
        expect(g.description).to.equal('edited');
        const me = (await request(second.url).get('/api/me').set('Authorization', auth).expect(200)).body;
        expect(me.roles).to.include('superadmin');
        expect((await request(second.url).get('/api/me/access').set('Authorization', auth).expect(200)).body.permissions).to.include(
          'socket:container:cleanup',
        );
        await second.stop();
        const third = await startService({
          dataDir: first.dataDir,
          databaseUrl: first.databaseUrl,
          env: { SERVICE_ADMIN_PASSWORD: 'a-rotated-admin-password' },
        });
        try {
          const me3 = (await request(third.url).get('/api/me').set('Authorization', auth).expect(200)).body;
          expect(me3.roles).not.to.include('superadmin');
        } finally {
          await third.stop();
        }
      } finally {
        await second.stop();
      }
    } finally {
      await first.destroy();
    }
  });

  it('a start names accounts and groups an older release let in under one name in two cases', async function () {
    this.timeout(30000);
    const first = await startService();
    try {
      await request(first.url).post('/api/users').set('Authorization', adminAuth()).send({ username: 'ruth' }).expect(201);
      await request(first.url).post('/api/users').set('Authorization', adminAuth()).send({ username: 'ruth-2' }).expect(201);
      await request(first.url).post('/api/groups').set('Authorization', adminAuth()).send({ name: 'night-ops' }).expect(201);
      // as an older release could have left them: no index, the second renamed in another case
      await first.service.db.raw('DROP INDEX users_username_folded');
      await first.service.db('users').where({ username: 'ruth-2' }).update({ username: 'Ruth' });
      await first.service.db.raw('DROP INDEX groups_name_folded');
      await first.service.db('groups').insert({ ...(await first.service.db('groups').where({ name: 'night-ops' }).first()), name: 'Night-Ops' });
      await first.stop();
      const logs = capturingLogger('warn');
      const second = await startService({ dataDir: first.dataDir, databaseUrl: first.databaseUrl, logger: logs.logger });
      try {
        const lines = logs.lines.map((l) => JSON.parse(l));
        const said = lines.find((l) => Array.isArray(l.usernames));
        expect(said).to.deep.include({ level: 'warn', usernames: [['Ruth', 'ruth']] });
        expect(said.msg).to.match(/differ only in case/);
        const groups = lines.find((l) => Array.isArray(l.groups));
        expect(groups).to.deep.include({ level: 'warn', groups: [['Night-Ops', 'night-ops']] });
        expect(groups.msg).to.match(/^groups whose names differ only in case/);
      } finally {
        await second.stop();
      }
    } finally {
      await first.destroy();
    }
  });
});
