import { expect } from 'chai';
import request from 'supertest';
import { startService, testEnv, basic, ADMIN, type TestService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';
import { SecretsStore } from '../../src/iam/secrets.js';
import { ENV_PASSWORD_NAMESPACE } from '../../src/iam/seed.js';
import { cli } from '../cli/helpers.js';
import { totpCode } from '../auth/helpers.js';

const KEY = 'test-secret-key-0123456789abcdef0123456789';
const adminWith = (password: string) => basic(ADMIN.username, password);

/** The admin's own password change through the API (as the settings page makes it). */
async function changeOwnPassword(svc: TestService, current: string, next: string): Promise<void> {
  const me = (await request(svc.url).get('/api/me').set('Authorization', adminWith(current)).expect(200)).body;
  const res = await request(svc.url)
    .post(`/api/users/${me.id}/password`)
    .set('Authorization', adminWith(current))
    .send({ current_password: current, new_password: next });
  expect(res.status, JSON.stringify(res.body)).to.equal(204);
}

/** The log lines (parsed) of a capturing logger that say the environment set a password. */
const envApplied = (lines: string[]) => lines.map((l) => JSON.parse(l)).filter((l) => /^password set from the environment/.test(l.msg));

describe('bootstrap passwords across restarts', function () {
  this.timeout(60_000);
  let first: TestService;
  const restart = (env: Record<string, string> = {}, logger = capturingLogger('info')) =>
    startService({ dataDir: first.dataDir, databaseUrl: first.databaseUrl, env, logger: logger.logger }).then((svc) => ({ svc, log: logger }));

  beforeEach(async () => {
    first = await startService();
  });
  afterEach(async () => {
    await first.destroy();
  });

  it('a password changed in the UI stays at the next start; a new value of the variable replaces it, logged', async () => {
    await changeOwnPassword(first, ADMIN.password, 'changed-in-the-ui-1');
    await first.stop();

    // the same environment (SERVICE_ADMIN_PASSWORD unchanged): the change is not undone
    const second = await restart();
    try {
      await request(second.svc.url).get('/api/me').set('Authorization', adminWith('changed-in-the-ui-1')).expect(200);
      await request(second.svc.url).get('/api/me').set('Authorization', adminWith(ADMIN.password)).expect(401);
      expect(envApplied(second.log.lines)).to.deep.equal([]);
      // the API says which variable still holds the password
      const me = (await request(second.svc.url).get('/api/me').set('Authorization', adminWith('changed-in-the-ui-1')).expect(200)).body;
      const shown = (await request(second.svc.url).get(`/api/users/${me.id}`).set('Authorization', adminWith('changed-in-the-ui-1')).expect(200)).body;
      expect(shown.password_pinned_by).to.equal('SERVICE_ADMIN_PASSWORD');
      const bot = (await request(second.svc.url).get('/api/users').set('Authorization', adminWith('changed-in-the-ui-1')).expect(200)).body.users.find(
        (u: { username: string }) => u.username === 'bot',
      );
      const botShown = (await request(second.svc.url).get(`/api/users/${bot.id}`).set('Authorization', adminWith('changed-in-the-ui-1')).expect(200)).body;
      expect(botShown.password_pinned_by).to.equal('SERVICE_BOT_PASSWORD');
    } finally {
      await second.svc.stop();
    }

    // the operator sets a new value: it is applied, and the log says so
    const third = await restart({ SERVICE_ADMIN_PASSWORD: 'rotated-by-the-operator' });
    try {
      await request(third.svc.url).get('/api/me').set('Authorization', adminWith('rotated-by-the-operator')).expect(200);
      await request(third.svc.url).get('/api/me').set('Authorization', adminWith('changed-in-the-ui-1')).expect(401);
      expect(envApplied(third.log.lines).map((l) => ({ user: l.user, variable: l.variable, level: l.level }))).to.deep.equal([
        { user: 'admin', variable: 'SERVICE_ADMIN_PASSWORD', level: 'warn' },
      ]);
      expect(third.log.text()).not.to.include('rotated-by-the-operator');
    } finally {
      await third.svc.stop();
    }

    // and once applied, it is not applied again
    const fourth = await restart({ SERVICE_ADMIN_PASSWORD: 'rotated-by-the-operator' });
    try {
      expect(envApplied(fourth.log.lines)).to.deep.equal([]);
    } finally {
      await fourth.svc.stop();
    }
  });

  it('a password set with the CLI stays at the next start, and the CLI says the variable holds it', async () => {
    await first.stop();
    const env = testEnv(first.dataDir, first.databaseUrl);
    const run = await cli(env, ['user', 'set-password', 'admin'], 'set-by-the-console-1\n');
    expect(run.code, run.stderr).to.equal(0);
    expect(run.stderr.trim().split('\n')).to.deep.equal([
      'warning: SERVICE_ADMIN_PASSWORD is set: the service applies it to admin again at a start where its value has changed',
    ]);
    const json = await cli(env, ['--json', 'user', 'set-password', 'admin'], 'set-by-the-console-2\n');
    expect(json.code, json.stderr).to.equal(0);
    expect(JSON.parse(json.stderr).warning).to.match(/^SERVICE_ADMIN_PASSWORD is set/);
    // run without the service's environment, the CLI still knows an earlier start set it
    const bare = { ...env };
    delete (bare as Record<string, string>).SERVICE_ADMIN_PASSWORD;
    const blind = await cli(bare, ['user', 'set-password', 'admin'], 'set-by-the-console-3\n');
    expect(blind.code, blind.stderr).to.equal(0);
    expect(blind.stderr).to.match(/^warning: an earlier start set admin's password from SERVICE_ADMIN_PASSWORD/);
    // no warning for an account the environment does not set
    expect((await cli(env, ['user', 'create', 'carol', '--password-stdin'], 'carol-password-1\n')).code).to.equal(0);
    const carol = await cli(env, ['user', 'set-password', 'carol'], 'carol-password-2\n');
    expect(carol.stderr).to.equal('');

    const second = await restart();
    try {
      await request(second.svc.url).get('/api/me').set('Authorization', adminWith('set-by-the-console-3')).expect(200);
      expect(envApplied(second.log.lines)).to.deep.equal([]);
    } finally {
      await second.svc.stop();
    }
  });

  it('a CLI command that reads writes nothing; seed says when it sets a password from a changed variable', async () => {
    await first.stop();
    const env = testEnv(first.dataDir, first.databaseUrl, { SERVICE_ADMIN_PASSWORD: 'rotated-for-the-console' });
    const before = await cli(env, ['--json', 'audit', 'verify']);
    const listed = await cli(env, ['user', 'list']);
    expect(listed.code, listed.stderr).to.equal(0);
    expect(listed.stderr).to.equal('');
    // no event, no password applied: the trail's head is where it was
    expect((await cli(env, ['--json', 'audit', 'verify'])).json()).to.deep.equal(before.json());
    const rotated = await cli(env, ['seed']);
    expect(rotated.code, rotated.stderr).to.equal(0);
    expect(rotated.stderr).to.equal("warning: SERVICE_ADMIN_PASSWORD set admin's password (the variable has a new value)\n");
    const events = (await cli(env, ['--json', 'audit', 'list', '--action', 'user.password_changed'])).json();
    expect(JSON.stringify(events)).to.include('"username":"cli"').and.include('SERVICE_ADMIN_PASSWORD');
    expect((await cli(env, ['seed'])).stderr).to.equal('');
    const seeded = await cli({ ...env, SERVICE_BOT_PASSWORD: 'rotated-bot-password' }, ['--json', 'seed']);
    expect(seeded.code, seeded.stderr).to.equal(0);
    expect(JSON.parse(seeded.stderr)).to.deep.equal({ warning: "SERVICE_BOT_PASSWORD set bot's password (the variable has a new value)" });
  });

  it("the boot's superadmin promotion is an event by the service, naming the credentials it ended; its removal too", async () => {
    const key = (await request(first.url).post('/api/me/api-keys').set('Authorization', adminWith(ADMIN.password)).send({ label: 'before' }).expect(201)).body
      .token as string;
    // a second factor set on the account before the promotion (whoever held the name) is not trusted either: a passkey alone signs in
    const login = (await request(first.url).post('/api/auth/login').send({ username: ADMIN.username, password: ADMIN.password }).expect(200)).body;
    const started = await request(first.url).post('/api/me/mfa/totp').set('Authorization', `Bearer ${login.token}`).expect(200);
    await request(first.url)
      .post('/api/me/mfa/totp/confirm')
      .set('Authorization', `Bearer ${login.token}`)
      .send({ code: totpCode(started.body.secret) })
      .expect(200);
    // and a single sign-on account linked to it (as a login linking by e-mail would have, while the account was not privileged)
    const adminId = login.user.id as string;
    await first.service.db('user_identities').insert({ user_id: adminId, provider: 'oidc', provider_user_id: 'someone-else-sub', created_at: Date.now() });
    await first.stop();
    const promoted = await restart({ SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' });
    let events: Array<{ actor: { username: string; method: string }; action: string; target: { id: string; name: string }; details: Record<string, unknown> }>;
    try {
      await request(promoted.svc.url).get('/api/me').set('X-API-Key', key).expect(401);
      await promoted.svc.service.iam.audit.flush();
      events = (await request(promoted.svc.url).get('/api/audit').query({ action: 'user.updated' }).set('Authorization', adminWith(ADMIN.password)).expect(200))
        .body.events;
      expect(events).to.have.length(1);
      expect(events[0]).to.deep.include({
        actor: { user_id: null, username: 'service', method: 'boot', ip: null },
        target: { type: 'user', id: events[0]!.target.id, name: 'admin' },
      } as object);
      expect(events[0]!.details).to.deep.equal({
        roles_added: ['superadmin'],
        because: 'SERVICE_ADMIN_FORCE_SUPERADMIN',
        credentials_revoked: 2,
        factors_removed: 1,
        identities_unlinked: 1,
      });
      expect((await promoted.svc.service.db('user_identities').where({ user_id: adminId })).map((r) => r.provider)).to.deep.equal(['local']);
      // the password signs in with no second step: the factor and its recovery codes are gone
      const signedIn = await request(promoted.svc.url).post('/api/auth/login').send({ username: ADMIN.username, password: ADMIN.password }).expect(200);
      expect(signedIn.body).to.have.property('token');
      const mfa = await request(promoted.svc.url).get('/api/me/mfa').set('Authorization', `Bearer ${signedIn.body.token}`).expect(200);
      expect(mfa.body).to.deep.include({ totp: false, recovery_codes_left: 0 });
    } finally {
      await promoted.svc.stop();
    }
    const demoted = await restart();
    try {
      await demoted.svc.service.iam.audit.flush();
      events = (await request(demoted.svc.url).get('/api/audit').query({ action: 'user.updated' }).set('Authorization', adminWith(ADMIN.password)).expect(200))
        .body.events;
      expect(events.map((e) => e.details)).to.deep.equal([
        { roles_removed: ['superadmin'], because: 'SERVICE_ADMIN_FORCE_SUPERADMIN' },
        { roles_added: ['superadmin'], because: 'SERVICE_ADMIN_FORCE_SUPERADMIN', credentials_revoked: 2, factors_removed: 1, identities_unlinked: 1 },
      ]);
      // said in the log too, with the way back: nobody else held the role
      const said = demoted.log.lines.map((l) => JSON.parse(l)).filter((l) => /^SERVICE_ADMIN_FORCE_SUPERADMIN is not true/.test(l.msg));
      expect(said.map((l) => [l.level, l.user])).to.deep.equal([['warn', 'admin']]);
      expect(said[0].msg).to.include('no enabled account is a superadmin now').and.include('service-core user promote');
    } finally {
      await demoted.svc.stop();
    }
  });

  it('keeps a keyed fingerprint of the applied value, never the password', async () => {
    const rows: { key: string; ciphertext: string }[] = await first.service
      .db('secrets')
      .where({ namespace: ENV_PASSWORD_NAMESPACE })
      .select('key', 'ciphertext');
    expect(rows.map((r) => r.key).sort()).to.deep.equal(['SERVICE_ADMIN_PASSWORD:admin', 'SERVICE_BOT_PASSWORD:bot']);
    const secrets = new SecretsStore(first.service.db, KEY);
    for (const r of rows) {
      const stored = (await secrets.get(ENV_PASSWORD_NAMESPACE, r.key))!;
      expect(stored).to.match(/^[A-Za-z0-9_-]{43}$/);
      for (const text of [r.ciphertext, stored]) {
        expect(text).not.to.include(ADMIN.password);
        expect(text).not.to.include('bot-test-password');
      }
    }
  });

  it('a database from before (no value recorded) takes a differing variable once, logged; an equal one silently', async () => {
    // an older release applied the variable at every start and recorded nothing
    await first.service.db('secrets').where({ namespace: ENV_PASSWORD_NAMESPACE }).delete();
    await first.stop();
    const same = await restart();
    try {
      expect(envApplied(same.log.lines)).to.deep.equal([]);
      await request(same.svc.url).get('/api/me').set('Authorization', adminWith(ADMIN.password)).expect(200);
      await same.svc.service.db('secrets').where({ namespace: ENV_PASSWORD_NAMESPACE }).delete();
    } finally {
      await same.svc.stop();
    }
    const other = await restart({ SERVICE_BOT_PASSWORD: 'a-new-bot-password' });
    try {
      expect(envApplied(other.log.lines).map((l) => [l.user, l.variable])).to.deep.equal([['bot', 'SERVICE_BOT_PASSWORD']]);
      await request(other.svc.url).get('/api/me').set('Authorization', basic('bot', 'a-new-bot-password')).expect(200);
    } finally {
      await other.svc.stop();
    }
  });
});
