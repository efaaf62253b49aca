import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import request from 'supertest';
import BetterSqlite3 from 'better-sqlite3';
import { VERSION } from '../../src/version.js';
import { basic, freshDatabase, startService, testEnv, SYSTEM_KEY, type TestDb, type TestService } from '../support/service.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { WsClient } from '../gateway/helpers.js';
import { cli } from './helpers.js';
import { serviceCommand } from '../support/process.js';
import { createDb } from '../../src/db/knex.js';
import { createLogger, textDestination } from '../../src/log.js';
import { shownUrl } from '../../src/cli/context.js';
import { parseEnvFile } from '../../src/cli/input.js';
import { unusedPort } from '../auth/helpers.js';

const STACK = /\n\s+at /;

/** Every failure is one line on stderr, nothing on stdout, no stack trace. */
function refused(run: { code: number; stdout: string; stderr: string }, code: 1 | 2, names: RegExp) {
  expect(run.code, run.stderr).to.equal(code);
  expect(run.stdout).to.equal('');
  expect(run.stderr.trimEnd().split('\n'), run.stderr).to.have.length(1);
  expect(run.stderr).to.match(names);
  expect(run.stderr).not.to.match(STACK);
}

/** The database made and seeded as `service-core seed` makes it (only migrate and seed create one; only seed and the service's boot seed). */
async function seeded(env: Record<string, string>) {
  const run = await cli(env, ['seed']);
  expect(run.code, run.stderr).to.equal(0);
}

describe('CLI with the service stopped', function () {
  this.timeout(30_000);
  let dir: string;
  let db: TestDb;
  let env: Record<string, string>;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cli-'));
    db = await freshDatabase();
    env = testEnv(dir, db.url);
  });
  afterEach(async () => {
    await db.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  it('prints its version, as text and as JSON', async () => {
    const text = await cli(env, ['version']);
    expect(text.code).to.equal(0);
    expect(text.stdout.trim()).to.equal(VERSION);
    expect((await cli(env, ['--json', 'version'])).json()).to.deep.equal({ version: VERSION });
    expect((await cli(env, ['--version'])).stdout.trim()).to.equal(VERSION);
  });

  it('migrates and seeds a fresh database, idempotently', async () => {
    const first = await cli(env, ['--json', 'migrate']);
    expect(first.code, first.stderr).to.equal(0);
    expect(first.json().applied).to.have.length.greaterThan(0);
    expect((await cli(env, ['--json', 'migrate'])).json()).to.deep.equal({ applied: [] });
    expect((await cli(env, ['migrate'])).stdout.trim()).to.equal('the database is up to date');
    const seeded = await cli(env, ['--json', 'seed']);
    expect(seeded.json()).to.deep.equal({ applied: [], changed: true });
    expect((await cli(env, ['--json', 'seed'])).json()).to.deep.equal({ applied: [], changed: false });
    const groups = (await cli(env, ['--json', 'group', 'list'])).json().groups.map((g: { name: string }) => g.name);
    expect(groups).to.include.members(['INT_ADMIN', 'INT_USER', 'INT_VIEWER']);
  });

  it('creates, lists, disables and enables users; refuses what the API refuses', async () => {
    await seeded(env);
    const created = await cli(
      env,
      ['--json', 'user', 'create', 'alice', '--group', 'INT_USER', '--email', 'alice@example.org', '--password-stdin'],
      'alice-password-1\n',
    );
    expect(created.code, created.stderr).to.equal(0);
    expect(created.json()).to.include({ username: 'alice', email: 'alice@example.org', disabled: false });
    expect(created.stdout + created.stderr).not.to.include('alice-password-1');
    expect(created.stderr).to.equal('');
    // without a password, and no single sign-on to sign in through: made, and said that nobody can use it yet
    const sso = await cli(env, ['user', 'create', 'erin'], 'erin-password-1\n');
    expect(sso.code, sso.stderr).to.equal(0);
    expect(sso.stdout.trim()).to.match(/^created user erin \(.*\), without a password$/);
    expect(sso.stderr.trim()).to.equal(
      'warning: erin has no password and no single sign-on provider is configured: they cannot sign in until a password is set (--password-stdin, or service-core user set-password erin)',
    );
    // a directory that links the account by its e-mail at the first sign-on: nothing to warn of
    const ldap = { ...env, SERVICE_AUTH_PROVIDERS: 'local,ldap', SERVICE_LDAP_URL: 'ldap://ldap.example.org', SERVICE_LDAP_BASE_DN: 'dc=example,dc=org' };
    const withLdap = await cli({ ...ldap, SERVICE_LDAP_LINK_BY_EMAIL: 'true' }, ['user', 'create', 'finn', '--email', 'finn@example.org']);
    expect(withLdap.code, withLdap.stderr).to.equal(0);
    expect(withLdap.stderr).to.equal('');
    expect(withLdap.stdout.trim()).to.match(/^created user finn \(.*\), single sign-on only until a password is set$/);
    // one that would not link it (linking by e-mail off): the first sign-on would make another account
    const unlinked = await cli(ldap, ['user', 'create', 'gwen', '--email', 'gwen@example.org']);
    expect(unlinked.code, unlinked.stderr).to.equal(0);
    expect(unlinked.stdout.trim()).to.match(/^created user gwen \(.*\), without a password$/);
    expect(unlinked.stderr.trim()).to.equal(
      'warning: gwen has no password, and a first single sign-on would make a new account rather than sign in to this one (ldap links an existing account only by e-mail, and that is off): they cannot sign in until a password is set (--password-stdin, or service-core user set-password gwen)',
    );

    const listed = (await cli(env, ['--json', 'user', 'list'])).json().users;
    expect(listed.map((u: { username: string }) => u.username)).to.include.members(['admin', 'bot', 'alice']);
    // each with its linked sign-ins, as the API shows them: a password is the local one; finn has none yet
    const byName = Object.fromEntries(listed.map((u: { username: string; identities: unknown }) => [u.username, u.identities]));
    expect(byName.alice).to.deep.equal([{ provider: 'local', provider_user_id: 'alice' }]);
    expect(byName.finn).to.deep.equal([]);
    const text = await cli(env, ['user', 'list']);
    expect(text.stdout).to.match(/^USERNAME\s+STATUS\s+GROUPS/);
    expect(text.stdout).to.match(/\nalice\s+active\s+INT_USER/);

    expect((await cli(env, ['--json', 'user', 'disable', 'alice'])).json().disabled).to.equal(true);
    expect((await cli(env, ['user', 'enable', 'alice'])).stdout.trim()).to.equal('enabled alice');
    expect((await cli(env, ['--json', 'user', 'add-group', 'alice', 'INT_VIEWER'])).json().groups).to.deep.equal(['INT_USER', 'INT_VIEWER']);
    expect((await cli(env, ['--json', 'user', 'remove-group', 'alice', 'INT_USER'])).json().groups).to.deep.equal(['INT_VIEWER']);

    refused(await cli(env, ['user', 'create', 'alice']), 1, /username alice is taken/);
    refused(await cli(env, ['user', 'disable', 'admin']), 1, /last enabled member of INT_ADMIN/);
    refused(await cli(env, ['user', 'disable', 'nobody']), 1, /no user named nobody/);
    refused(await cli(env, ['user', 'add-group', 'alice', 'NOPE']), 2, /groups: unknown group NOPE/);
    refused(await cli(env, ['user', 'remove-group', 'alice', 'INT_ADMIN']), 1, /alice is not in INT_ADMIN/);

    // the way to a superadmin that docs/sockets.md names: the role is set, recorded as the cli's, and taken back
    expect((await cli(env, ['user', 'promote', 'alice'])).stdout.trim()).to.equal('alice is a superadmin');
    expect((await cli(env, ['--json', 'user', 'list'])).json().users.find((u: { username: string }) => u.username === 'alice').roles).to.deep.equal([
      'superadmin',
    ]);
    const trail = (await cli(env, ['--json', 'audit', 'list', '--action', 'user.updated'])).json();
    expect(JSON.stringify(trail)).to.include('superadmin');
    const last = await cli(env, ['user', 'demote', 'alice']);
    expect(last.code, last.stdout).to.equal(1);
    expect(last.stderr).to.match(/superadmin/);
    // the bootstrap admin's flag is the environment's (every start sets it from SERVICE_ADMIN_FORCE_SUPERADMIN): refused, with the way that lasts
    // whatever the CLI's own environment says: the service's start decides
    for (const force of ['false', 'true'])
      refused(
        await cli({ ...env, SERVICE_ADMIN_FORCE_SUPERADMIN: force }, ['user', 'promote', 'admin']),
        1,
        /follows SERVICE_ADMIN_FORCE_SUPERADMIN at every start of the service .* or make another account superadmin\n$/,
      );
    expect((await cli(env, ['user', 'create', 'root2', '--group', 'INT_ADMIN'])).code).to.equal(0);
    expect((await cli(env, ['user', 'promote', 'root2'])).stdout.trim()).to.equal('root2 is a superadmin');
    expect((await cli(env, ['user', 'demote', 'alice'])).stdout.trim()).to.equal('alice is no longer a superadmin');
    refused(await cli(env, ['user', 'promote', 'nobody']), 1, /no user named nobody/);
    // a change to what the user holds already says so and is no event
    const updates = async () => (await cli(env, ['--json', 'audit', 'list', '--action', 'user.updated'])).json().events.length;
    const before = await updates();
    expect((await cli(env, ['user', 'demote', 'alice'])).stdout.trim()).to.equal('alice was not a superadmin: nothing changed');
    expect((await cli(env, ['user', 'enable', 'alice'])).stdout.trim()).to.equal('alice was enabled already: nothing changed');
    expect((await cli(env, ['user', 'add-group', 'alice', 'INT_VIEWER'])).stdout.trim()).to.equal('alice was in that group already: nothing changed');
    expect((await cli(env, ['user', 'promote', 'root2'])).stdout.trim()).to.equal('root2 was a superadmin already: nothing changed');
    expect(await updates()).to.equal(before);
  });

  it('refuses bad arguments with exit code 2 and one line naming the argument', async () => {
    await seeded(env);
    refused(await cli(env, ['user', 'create', 'bad name']), 2, /username: must be/);
    refused(await cli(env, ['user', 'create', 'carol', '--email', 'not-an-email']), 2, /email/);
    refused(await cli(env, ['user', 'create', 'carol', '--group', '-x']), 2, /group/);
    refused(await cli(env, ['user', 'create', 'carol', '--password-stdin'], 'short\n'), 2, /password: .*8/);
    refused(await cli(env, ['user', 'create', 'carol', '--password-stdin']), 2, /stdin: no password given/);
    refused(await cli(env, ['user', 'frob']), 2, /unknown command 'frob'/);
    refused(await cli(env, ['user', 'create']), 2, /missing required argument 'username'/);
    refused(await cli(env, ['key', 'issue']), 2, /required option '--user <username>'/);
    refused(await cli(env, ['key', 'issue', '--user', 'admin', '--scope', 'feature:nope']), 2, /--scope: unknown permission feature:nope/);
    refused(
      await cli(env, ['key', 'issue', '--user', 'admin', '--scope', 'bogus']),
      2,
      /--scope: must be a permission, .* such as api:read or feature:admin.users/,
    );
    // a scope the owner does not hold would make a key that silently cannot use it
    expect((await cli(env, ['user', 'create', 'ivy', '--group', 'INT_USER'])).code).to.equal(0);
    refused(
      await cli(env, ['key', 'issue', '--user', 'ivy', '--scope', 'api:read', '--scope', 'feature:admin.users']),
      2,
      /--scope: ivy does not hold feature:admin.users: a key's scopes narrow its owner's permissions and add none/,
    );
    expect((await cli(env, ['key', 'issue', '--user', 'ivy', '--scope', 'api:read'])).code).to.equal(0);
    // several in one option, separated by commas; the list shows them
    const two = await cli(env, ['--json', 'key', 'issue', '--user', 'ivy', '--scope', 'api:read, feature:dashboard.view']);
    expect(two.json().scopes, two.stderr).to.deep.equal(['api:read', 'feature:dashboard.view']);
    expect((await cli(env, ['key', 'list', '--user', 'ivy'])).stdout).to.match(/\bapi:read,feature:dashboard\.view\s/);
    // a wildcard the owner holds some of narrows to that part (api:* over api:read and api:write, feature:* over the dashboard)
    const wide = await cli(env, ['--json', 'key', 'issue', '--user', 'ivy', '--scope', 'api:*', '--scope', 'feature:*']);
    expect(wide.code, wide.stderr).to.equal(0);
    expect(wide.json().scopes).to.deep.equal(['api:*', 'feature:*']);
    refused(await cli(env, ['key', 'issue', '--user', 'ivy', '--scope', 'socket:*']), 2, /--scope: ivy does not hold socket:\*/);
    refused(await cli(env, ['key', 'issue', '--user', 'admin', '--expires', 'soon']), 2, /--expires: must be a duration/);
    refused(await cli(env, ['key', 'issue', '--user', 'admin', '--expires', '9999999d']), 2, /--expires: must be before 9999-12-31/);
    refused(await cli(env, ['key', 'issue', '--user', 'admin', '--expires', '99999999999d']), 2, /--expires: must be before 9999-12-31/);
    refused(await cli(env, ['key', 'issue', '--user', 'admin', '--expires', '2001-01-01']), 2, /--expires: must be in the future/);
    refused(await cli(env, ['key', 'issue', '--user', 'admin', '--label', '']), 2, /--label: /);
    refused(await cli(env, ['key', 'revoke', '../etc']), 2, /id:/);
    // a key id is a UUID: anything else is a mistyped argument, not a key that is gone
    refused(await cli(env, ['key', 'revoke', 'not-an-id']), 2, /id: must be a valid GUID/);
    refused(await cli(env, ['audit', 'list', '--since', 'last week']), 2, /--since: must be a duration back from now such as 7d or 12h, or an ISO 8601 date/);
    refused(await cli(env, ['notify', '--title', 't', '--message', 'm']), 2, /--user\/--broadcast/);
    refused(await cli(env, ['notify', '--broadcast', '--title', 't', '--message', 'm', '--level', 'loud']), 2, /--level: must be one of/);
    refused(await cli(env, ['notify', '--broadcast', '--title', 't', '--message', 'm', '--link', 'javascript:alert(1)']), 2, /--link/);
    refused(await cli(env, ['settings', 'set', 'nope', 'x']), 2, /name: unknown setting nope/);
    refused(await cli(env, ['settings', 'set', 'ldap_bind_password', 'hunter22']), 2, /on stdin, not on the command line/);
    refused(await cli(env, ['settings', 'set', 'auth_providers', 'kerberos']), 2, /value: /);
    // what the settings API refuses, the CLI refuses too: unknown groups, a chain that cannot be built
    refused(await cli(env, ['settings', 'set', 'sso_default_groups', 'NO_SUCH_GROUP']), 2, /sso_default_groups: unknown group NO_SUCH_GROUP/);
    refused(await cli(env, ['settings', 'set', 'auth_providers', 'local,ldap']), 2, /ldap: /);
    const spaced = await cli(env, ['settings', 'set', 'system_api_key'], 'a secret-that-must-not-come-back-0123456789\n');
    refused(spaced, 2, /value: must not contain whitespace/);
    expect(spaced.stderr).not.to.include('must-not-come-back');
    refused(await cli({ ...env, SERVICE_PORT: 'eighty' }, ['user', 'list']), 2, /configuration error: SERVICE_PORT/);
    // a bootstrap password that is easy to guess: refused by seed, which applies it (as the
    // service's start refuses it); a command that does not use it is not held up by it
    const weak = { ...env, SERVICE_ADMIN_PASSWORD: 'password123' };
    refused(await cli(weak, ['seed']), 2, /^service-core: configuration error: SERVICE_ADMIN_PASSWORD: is a common password/);
    const listed = await cli(weak, ['--json', 'user', 'list']);
    expect(listed.code, listed.stderr).to.equal(0);
    expect(listed.json().users.map((u: { username: string }) => u.username)).to.include('admin');
    // with another problem, every command says both at once
    refused(
      await cli({ ...weak, SERVICE_PORT: 'eighty' }, ['user', 'list']),
      2,
      /SERVICE_PORT: .*SERVICE_ADMIN_PASSWORD: is a common password|SERVICE_ADMIN_PASSWORD: is a common password.*SERVICE_PORT: /,
    );
    const json = await cli(env, ['--json', 'user', 'create', 'bad name']);
    expect(json.code).to.equal(2);
    expect(JSON.parse(json.stderr)).to.deep.equal({
      error: { code: 'usage', message: 'username: must be 1 to 64 characters: letters A-Z and a-z, digits and . _ @ - (no spaces)' },
    });
  });

  it('issues a key once, lists it without its token and revokes it', async () => {
    await seeded(env);
    const issued = await cli(env, [
      '--json',
      'key',
      'issue',
      '--user',
      'admin',
      '--scope',
      'api:read',
      '--scope',
      'feature:admin.users',
      '--expires',
      '30d',
      '--label',
      'backup job',
    ]);
    expect(issued.code, issued.stderr).to.equal(0);
    const key = issued.json();
    expect(key.token).to.match(/^svk_/);
    expect(key).to.include({ username: 'admin', label: 'backup job' });
    expect(key.scopes).to.deep.equal(['api:read', 'feature:admin.users']);
    expect(Date.parse(key.expires_at) - Date.now()).to.be.within(29 * 86_400_000, 30 * 86_400_000);
    const listed = await cli(env, ['--json', 'key', 'list', '--user', 'admin']);
    expect(listed.json().keys.map((k: { id: string }) => k.id)).to.deep.equal([key.id]);
    expect(listed.stdout).not.to.include(key.token);
    expect((await cli(env, ['key', 'list', '--user', 'admin'])).stdout).not.to.include(key.token);
    expect((await cli(env, ['key', 'revoke', key.id])).stdout.trim()).to.equal(`revoked key ${key.id}`);
    refused(await cli(env, ['key', 'revoke', key.id]), 1, /no live key/);
    expect((await cli(env, ['--json', 'key', 'list', '--user', 'admin'])).json().keys).to.deep.equal([]);
  });

  it('reads and changes lockable settings; secrets only from stdin and never shown', async () => {
    await seeded(env);
    const set = await cli(env, ['settings', 'set', 'ldap_url', 'ldap://ldap.example.org']);
    expect(set.code, set.stderr).to.equal(0);
    expect((await cli(env, ['settings', 'set', 'ldap_bind_password'], 'bind-secret-1\n')).code).to.equal(0);
    expect((await cli(env, ['settings', 'set', 'system_api_key'], `${'k'.repeat(40)}\n`)).code).to.equal(0);
    expect((await cli(env, ['settings', 'set', 'oidc_group_mapping', '{"admins":["INT_ADMIN"]}'])).code).to.equal(0);
    const all = (await cli(env, ['--json', 'settings', 'get'])).json().settings;
    expect(all.ldap_url).to.include({ value: 'ldap://ldap.example.org', source: 'store', locked: false });
    expect(all.ldap_bind_password).to.include({ value: '********', source: 'store', secret: true });
    expect(all.system_api_key).to.include({ value: '********', source: 'store', secret: true });
    expect(all.oidc_group_mapping.value).to.deep.equal({ admins: ['INT_ADMIN'] });
    const text = await cli(env, ['settings', 'get']);
    expect(text.stdout).not.to.include('bind-secret-1');
    expect(text.stdout).not.to.include('k'.repeat(40));
    expect((await cli(env, ['--json', 'settings', 'get', 'ldap_url'])).json()).to.deep.equal({ settings: { ldap_url: all.ldap_url } });
    expect((await cli(env, ['settings', 'unset', 'oidc_group_mapping'])).stdout.trim()).to.equal('oidc_group_mapping reset to its default');
    expect((await cli(env, ['--json', 'settings', 'get', 'oidc_group_mapping'])).json().settings.oidc_group_mapping).to.include({ source: 'default' });

    const locked = { ...env, SERVICE_LDAP_URL: 'ldap://from-env.example.org', SERVICE_SCM_WEBHOOK_SECRET: 'env-webhook-secret-1' };
    refused(await cli(locked, ['settings', 'set', 'ldap_url', 'ldap://other.example.org']), 1, /locked: ldap_url/);
    refused(
      await cli(locked, ['settings', 'set', 'scm_webhook_secret'], 'another-secret-123\n'),
      1,
      /locked: scm_webhook_secret \(SERVICE_SCM_WEBHOOK_SECRET\)/,
    );
    const shown = (await cli(locked, ['--json', 'settings', 'get'])).json().settings;
    expect(shown.ldap_url).to.include({ value: 'ldap://from-env.example.org', source: 'env', locked: true });
    expect(shown.scm_webhook_secret).to.include({ value: '********', source: 'env', locked: true });
    // moving the bind account without entering its password again is refused, as in the API
    refused(
      await cli(env, ['settings', 'set', 'ldap_url', 'ldap://moved.example.org']),
      2,
      /ldap_bind_password: must be entered again when ldap_url changes \(give it in the same change: --with-secret ldap_bind_password, read from stdin\)/,
    );
    // ... and taken with it in one change, the password from stdin
    const moved = await cli(env, ['settings', 'set', 'ldap_bind_dn', 'cn=moved,dc=example,dc=org', '--with-secret', 'ldap_bind_password'], 'bind-secret-2\n');
    expect(moved.code, moved.stderr).to.equal(0);
    expect(moved.stdout.trim()).to.equal('ldap_bind_dn and ldap_bind_password set');
    expect(moved.stdout + moved.stderr).not.to.include('bind-secret-2');
    expect((await cli(env, ['--json', 'settings', 'get', 'ldap_bind_dn'])).json().settings.ldap_bind_dn.value).to.equal('cn=moved,dc=example,dc=org');
    refused(
      await cli(env, ['settings', 'set', 'ldap_url', 'ldap://x.example.org', '--with-secret', 'ldap_base_dn'], 's\n'),
      2,
      /--with-secret: ldap_base_dn is not/,
    );
    // unsetting the URL leaves the password nowhere to go: it is unset in the same change, and said
    const unset = await cli(env, ['settings', 'unset', 'ldap_url']);
    expect(unset.code, unset.stderr).to.equal(0);
    expect(unset.stdout.trim()).to.equal('ldap_url reset to its default, and with it ldap_bind_password');
    const after = (await cli(env, ['--json', 'settings', 'get'])).json().settings;
    expect(after.ldap_url).to.include({ source: 'default' });
    expect(after.ldap_bind_password).to.include({ value: null, source: 'default', configured: false });
  });

  it('makes the master key only when a secret is stored, never for anything else', async () => {
    const noKey = { ...env };
    delete (noKey as Record<string, string>).SERVICE_SECRET_KEY;
    await seeded(noKey);
    expect((await cli(noKey, ['user', 'list'])).code).to.equal(0);
    expect((await cli(noKey, ['seed'])).code).to.equal(0);
    expect((await cli(noKey, ['settings', 'get'])).code).to.equal(0);
    expect(fs.existsSync(path.join(dir, 'secret.key'))).to.equal(false);
    expect((await cli(noKey, ['settings', 'set', 'scm_webhook_secret'], 'webhook-secret-1234\n')).code).to.equal(0);
    expect(fs.statSync(path.join(dir, 'secret.key')).mode & 0o777).to.equal(0o600);
  });

  it('sends a notification that the history shows', async () => {
    await seeded(env);
    const sent = await cli(env, ['--json', 'notify', '--user', 'admin', '--title', 'Backup done', '--message', 'all good', '--level', 'success']);
    expect(sent.code, sent.stderr).to.equal(0);
    expect(sent.json()).to.include({ action: 'created' });
    refused(await cli(env, ['notify', '--user', 'nobody', '--title', 't', '--message', 'm']), 1, /nobody/);
    const svc = await startService({ dataDir: dir, databaseUrl: db.url });
    try {
      const res = await request(svc.url).get('/api/notifications').set('Authorization', basic('admin', 'admin-test-password')).expect(200);
      expect(res.body.notifications.map((n: { title: string }) => n.title)).to.include('Backup done');
    } finally {
      await svc.stop();
    }
  });

  it('runs as the installed command: exit codes from a real process', () => {
    const [node, ...entry] = serviceCommand('cli');
    const run = (args: string[]) => spawnSync(node!, [...entry, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000 });
    const ok = run(['--json', 'version']);
    expect(ok.status, ok.stderr).to.equal(0);
    expect(JSON.parse(ok.stdout)).to.deep.equal({ version: VERSION });
    const bad = run(['user', 'create', 'bad name']);
    expect(bad.status).to.equal(2);
    expect(bad.stderr.trim()).to.equal('service-core: username: must be 1 to 64 characters: letters A-Z and a-z, digits and . _ @ - (no spaces)');
    const pkg = JSON.parse(fs.readFileSync('package.json', 'utf8'));
    expect(pkg.bin['service-core']).to.equal('dist/server/cli.js');
  });

  it('ends quietly when its reader stops reading (audit export | a reader gone)', async () => {
    await seeded(env);
    const [node, ...entry] = serviceCommand('cli');
    const command = [node!, ...entry, 'audit', 'export'].map((a) => `'${a}'`).join(' ');
    // `true` is gone before the command writes its first line: every write meets a closed pipe
    const run = spawnSync('bash', ['-c', `set -o pipefail; ${command} | true`], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 30_000 });
    expect(run.stderr).to.equal('');
    expect(run.status).to.equal(0);
  });
});

describe('CLI finds the right database', function () {
  this.timeout(60_000);
  let dir: string;
  let db: TestDb;
  let env: Record<string, string>;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cli-find-'));
    db = await freshDatabase();
    env = testEnv(path.join(dir, 'data'), db.url);
  });
  afterEach(async () => {
    await db.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** Where the CLI looks: the SQLite file, or the PostgreSQL URL. */
  const where = () => (db.url ? db.url : path.join(dir, 'data', 'service.sqlite'));
  const hasSchema = async () => {
    if (!db.url) return fs.existsSync(where());
    const check = createDb({ databaseUrl: db.url, dataDir: dir });
    try {
      return await check.schema.hasTable('knex_migrations');
    } finally {
      await check.destroy();
    }
  };

  it('refuses to make a database: only migrate and seed do; the refusal names where it looked', async () => {
    const commands: [string[], string?][] = [
      [['user', 'set-password', 'admin'], 'a-new-admin-password\n'],
      [['user', 'list']],
      [['group', 'list']],
      [['key', 'list', '--user', 'admin']],
      [['settings', 'get']],
      [['settings', 'set', 'scm_webhook_secret'], 'webhook-secret-1234\n'],
      [['notify', '--broadcast', '--title', 't', '--message', 'm']],
    ];
    for (const [args, stdin] of commands) {
      const run = await cli(env, args, stdin);
      refused(run, 1, /service-core migrate/);
      expect(run.stderr, args.join(' ')).to.include(where());
      const json = await cli(env, ['--json', ...args], stdin);
      expect(json.code).to.equal(1);
      expect(JSON.parse(json.stderr).error).to.include({ code: 'not_found' });
    }
    expect(await hasSchema(), 'a database was made').to.equal(false);
    if (!db.url) expect(fs.existsSync(path.join(dir, 'data', 'secret.key'))).to.equal(false);
    expect((await cli(env, ['version'])).code).to.equal(0);
    expect((await cli(env, ['migrate'])).code).to.equal(0);
    // migrate seeds nothing: the accounts come with seed (or the service's first boot)
    refused(await cli(env, ['user', 'set-password', 'admin'], 'a-new-admin-password\n'), 1, /no user named admin/);
    expect((await cli(env, ['seed'])).code).to.equal(0);
    expect((await cli(env, ['user', 'set-password', 'admin'], 'a-new-admin-password\n')).code).to.equal(0);
  });

  it('a command that reads writes nothing: no password from the environment, no migration; a pending one is named', async () => {
    await seeded(env);
    const look = async <T>(read: (db: ReturnType<typeof createDb>) => Promise<T>): Promise<T> => {
      const conn = createDb({ databaseUrl: db.url, dataDir: path.join(dir, 'data') });
      try {
        return await read(conn);
      } finally {
        await conn.destroy();
      }
    };
    const state = () =>
      look(async (conn) => ({
        users: await conn('users').select('username', 'hashed_password', 'updated_at').orderBy('username'),
        events: (await conn('audit_events').count({ n: '*' }).first())?.n,
        migrations: await conn('knex_migrations').select('name').orderBy('id'),
      }));
    const before = await state();
    // the service's environment file changed the admin's password variable: only a start or `seed` applies it
    const changed = { ...env, SERVICE_ADMIN_PASSWORD: 'a-changed-admin-password' };
    const reads = [
      ['user', 'list'],
      ['group', 'list'],
      ['key', 'list', '--user', 'admin'],
      ['settings', 'get'],
      ['audit', 'list'],
      ['audit', 'verify'],
    ];
    for (const args of reads) {
      const run = await cli(changed, args);
      expect(run.code, `${args.join(' ')}: ${run.stderr}`).to.equal(0);
    }
    expect(await state()).to.deep.equal(before);
    // a schema older than the CLI: reading refuses (applying a migration is a write) and names migrate
    const last = before.migrations[before.migrations.length - 1]!.name as string;
    const row = await look(async (conn) => conn('knex_migrations').where({ name: last }).first());
    await look(async (conn) => conn('knex_migrations').where({ name: last }).delete());
    try {
      const run = await cli(changed, ['user', 'list']);
      refused(run, 1, /\(1 migration pending\): apply it with `service-core migrate`/);
    } finally {
      await look(async (conn) => conn('knex_migrations').insert(row));
    }
    expect((await state()).migrations).to.deep.equal(before.migrations);
  });

  it('refuses an empty PostgreSQL database or SQLite file the same way; seed makes one', async () => {
    if (!db.url) fs.mkdirSync(path.join(dir, 'data'), { mode: 0o700 });
    // a database that answers but was never migrated (an SQLite file made by something else)
    const empty = createDb({ databaseUrl: db.url, dataDir: path.join(dir, 'data') });
    await empty.raw('select 1');
    await empty.destroy();
    refused(await cli(env, ['user', 'list']), 1, /has no knex_migrations table/);
    const seeded = await cli(env, ['seed']);
    expect(seeded.code, seeded.stderr).to.equal(0);
    expect((await cli(env, ['--json', 'user', 'list'])).json().users.map((u: { username: string }) => u.username)).to.include('admin');
  });

  it('shows a database URL without its password', () => {
    expect(shownUrl('postgres://service:s3cret@db.internal:5432/service')).to.equal('postgres://service:***@db.internal:5432/service');
    expect(shownUrl('postgres://service@db.internal/service')).to.equal('postgres://service@db.internal/service');
  });

  it("--env-file takes the service's environment file (systemd format) over the shell's variables", async () => {
    await seeded(env);
    // the shell points elsewhere (where nothing is): the file wins
    const shell: Record<string, string> = { ...env, SERVICE_DATA_DIR: path.join(dir, 'elsewhere') };
    delete shell.SERVICE_DATABASE_URL;
    refused(await cli(shell, ['user', 'list']), 1, /no database at .*elsewhere/);
    const file = path.join(dir, 'service-core.env');
    fs.writeFileSync(
      file,
      [
        '# /etc/service-core/env',
        '; a comment in the other style',
        '',
        `SERVICE_DATA_DIR="${path.join(dir, 'data')}"`,
        ...(db.url ? [`  SERVICE_DATABASE_URL = '${db.url}'`] : []),
        'SERVICE_SECRET_KEY=test-secret-key-0123456789abcdef0123456789',
        'SERVICE_LOG_LEVEL=silent',
        '',
      ].join('\n'),
    );
    const listed = await cli(shell, ['--env-file', file, '--json', 'user', 'list']);
    expect(listed.code, listed.stderr).to.equal(0);
    expect(listed.json().users.map((u: { username: string }) => u.username)).to.include.members(['admin', 'bot']);
    // anywhere on the line, like --json
    expect((await cli(shell, ['user', 'list', '--env-file', file])).code).to.equal(0);
    refused(await cli(shell, ['--env-file', path.join(dir, 'missing.env'), 'user', 'list']), 2, /--env-file: cannot read .*missing\.env: ENOENT/);
    fs.writeFileSync(path.join(dir, 'bad.env'), 'SERVICE_PORT=8080\nnot an assignment\n');
    refused(await cli(shell, ['--env-file', path.join(dir, 'bad.env'), 'user', 'list']), 2, /bad\.env line 2 is not a KEY=VALUE assignment/);
  });

  it('reads the systemd environment file format', () => {
    const parsed = parseEnvFile(
      [
        '# comment',
        '; comment',
        'PLAIN=value with spaces   ',
        'EMPTY=',
        '  SPACED = padded',
        'DOUBLE="a \\"quoted\\" \\\\ value # not a comment"',
        "SINGLE='as \\ written'",
        'JOINED=first \\',
        '  second',
        'MULTI="line one',
        'line two"',
        'EQUALS=a=b=c',
      ].join('\n'),
      'test.env',
    );
    expect(parsed).to.deep.equal({
      PLAIN: 'value with spaces',
      EMPTY: '',
      SPACED: 'padded',
      DOUBLE: 'a "quoted" \\ value # not a comment',
      SINGLE: 'as \\ written',
      JOINED: 'first second',
      MULTI: 'line one\nline two',
      EQUALS: 'a=b=c',
    });
    expect(() => parseEnvFile('KEY="open', 'q.env')).to.throw(/q\.env line 1: the double quote is not closed/);
  });

  it('warns of unknown SERVICE_* variables and reports every configuration problem in one line', async () => {
    await seeded(env);
    const typo = await cli({ ...env, SERVICE_PROT: '9000' }, ['--json', 'user', 'list']);
    expect(typo.code, typo.stderr).to.equal(0);
    expect(
      typo.stderr
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l)),
    ).to.deep.equal([{ warning: 'SERVICE_PROT is not a setting and is ignored; did you mean SERVICE_PORT?' }]);
    expect((await cli({ ...env, SERVICE_PROT: '9000' }, ['user', 'list'])).stderr).to.equal(
      'warning: SERVICE_PROT is not a setting and is ignored; did you mean SERVICE_PORT?\n',
    );
    const bad = await cli({ ...env, SERVICE_PORT: 'eighty', SERVICE_LOG_LEVEL: 'loud' }, ['user', 'list']);
    refused(bad, 2, /^service-core: configuration error: SERVICE_PORT: .*; SERVICE_LOG_LEVEL: /);
  });
});

describe('CLI output: --json errors are JSON on stderr, stdout is the answer only', function () {
  this.timeout(60_000);
  const env = testEnv(os.tmpdir(), null);

  it("commander's usage errors are JSON with --json, text without", async () => {
    const cases: [string[], RegExp][] = [
      [['frob'], /^unknown command 'frob'$/],
      [['user', 'frob'], /^unknown command 'frob'$/],
      [['user', 'create'], /^missing required argument 'username'$/],
      [['user', 'list', '--frobnicate'], /^unknown option '--frobnicate'$/],
      [['key', 'issue'], /^required option '--user <username>' not specified$/],
      [['user'], /^a command is missing: service-core --help lists them$/],
    ];
    for (const [args, message] of cases) {
      const json = await cli(env, ['--json', ...args]);
      expect(json.code, args.join(' ')).to.equal(2);
      expect(json.stdout, args.join(' ')).to.equal('');
      const lines = json.stderr.trimEnd().split('\n');
      expect(lines, json.stderr).to.have.length(1);
      const body = JSON.parse(lines[0]!);
      expect(body.error.code).to.equal('usage');
      expect(body.error.message, args.join(' ')).to.match(message);
      const text = await cli(env, args);
      expect(text.code).to.equal(2);
      // in the form of the CLI's other refusals: `service-core: <the same message>` (a missing command: its help)
      if (!text.stderr.startsWith('Usage: ')) expect(text.stderr.trimEnd().replace(/^service-core: /, ''), text.stderr).to.match(message);
      expect(text.stderr).to.match(/^service-core: |^Usage: /);
    }
  });

  it('text log lines: one line per entry whatever a value holds, errors by their message, redaction kept', () => {
    let out = '';
    const log = createLogger(
      'info',
      textDestination((t) => (out += t)),
    );
    log.warn({ user: 'a b\nwarn: forged', err: new Error('boom'), password: 'hunter2-secret', n: 3, simple: 'ok' }, 'hello\x1b[31m\nthere');
    expect(out).to.equal('warn: hello\\u001b[31m\\u000athere user="a b\\nwarn: forged" err="boom" password="[redacted]" n=3 simple=ok\n');
  });

  it('as a process: --json with an unknown command, and with the database away, writes JSON on stderr and nothing on stdout', async () => {
    const port = await unusedPort();
    const [node, ...entry] = serviceCommand('cli');
    const run = (args: string[], extra: Record<string, string> = {}) =>
      spawnSync(node!, [...entry, ...args], { env: { PATH: process.env.PATH!, ...env, ...extra }, encoding: 'utf8', timeout: 30_000 });
    const unknown = run(['--json', 'frob']);
    expect(unknown.status).to.equal(2);
    expect(unknown.stdout).to.equal('');
    expect(JSON.parse(unknown.stderr)).to.deep.equal({ error: { code: 'usage', message: "unknown command 'frob'" } });
    // nothing listens there: knex fails to connect (and says so through the CLI's logger, not on stdout)
    const away = run(['--json', 'user', 'list'], { SERVICE_DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/service`, SERVICE_LOG_LEVEL: 'debug' });
    expect(away.status, away.stderr).to.equal(1);
    expect(away.stdout).to.equal('');
    const lines = away.stderr
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.at(-1).error.code).to.equal('unavailable');
    expect(lines[0]).to.include({ level: 'debug', component: 'knex' });
    expect(away.stderr).not.to.match(STACK);
    // without --json the same log lines are text for a person: `level: message key=value`
    const text = run(['user', 'list'], { SERVICE_DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/service`, SERVICE_LOG_LEVEL: 'debug' });
    expect(text.status, text.stderr).to.equal(1);
    const said = text.stderr.trimEnd().split('\n');
    expect(said[0]).to.match(/^debug: knex: no connection component=knex reason="Acquire connection error: .*ECONNREFUSED/);
    expect(said.at(-1)).to.match(/^service-core: database unreachable/);
    expect(text.stderr).not.to.match(/^\{/m);
  });
});

describe('CLI backup', function () {
  this.timeout(60_000);

  it('copies the SQLite database while the service writes; the copy and the key restore everything', async function () {
    const svc = await startService();
    const env = testEnv(svc.dataDir, svc.databaseUrl);
    try {
      if (svc.databaseUrl) {
        refused(await cli(env, ['backup', path.join(svc.dataDir, 'b.sqlite')]), 1, /PostgreSQL: back it up with pg_dump/);
        return;
      }
      expect((await cli(env, ['user', 'create', 'erin', '--password-stdin'], 'erin-password-1\n')).code).to.equal(0);
      expect((await cli(env, ['settings', 'set', 'scm_webhook_secret'], 'webhook-secret-5678\n')).code).to.equal(0);
      // a forge's own secret, as the settings API sets it
      expect((await cli(env, ['settings', 'set', 'scm_webhook_secret_github'], 'github-own-secret-5678\n')).code).to.equal(0);
      const github = await request(svc.url).get('/api/settings/webhook-secret/github').set('Authorization', basic('admin', 'admin-test-password')).expect(200);
      expect(github.body).to.deep.equal({ configured: true, locked: false });
      expect((await cli(env, ['--json', 'settings', 'get', 'scm_webhook_secret_gitlab'])).json().settings.scm_webhook_secret_gitlab).to.include({
        configured: false,
        source: 'default',
      });
      // notifications written before, and more arriving during the backup
      const auth = basic('admin', 'admin-test-password');
      const before = await request(svc.url)
        .post('/api/notifications/batch')
        .set('Authorization', auth)
        .send({ notifications: Array.from({ length: 20 }, (_, i) => ({ title: `b${i}`, message: 'm' })) })
        .expect(202);
      let writing = true;
      const writer = (async () => {
        for (let i = 0; writing; i++)
          await request(svc.url)
            .post('/api/notifications')
            .set('Authorization', auth)
            .send({ title: `n${i}`, message: 'm' });
      })();
      const file = path.join(os.tmpdir(), `svc-backup-${process.pid}-${Date.now()}.sqlite`);
      const backup = await cli(env, ['--json', 'backup', file]);
      writing = false;
      await writer;
      expect(backup.code, backup.stderr).to.equal(0);
      expect(backup.json()).to.include({ file, secret_key: 'SERVICE_SECRET_KEY' });
      expect(fs.statSync(file).mode & 0o777).to.equal(0o600);
      refused(await cli(env, ['backup', file]), 1, /exists: choose a new file/);

      // restore: the copy as the database of a new data dir, with the same key
      const restored = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-restore-'));
      fs.copyFileSync(file, path.join(restored, 'service.sqlite'));
      fs.rmSync(file);
      const again = await startService({ dataDir: restored, databaseUrl: null });
      try {
        await request(again.url).get('/api/me').set('Authorization', basic('erin', 'erin-password-1')).expect(200);
        const secret = await request(again.url).get('/api/settings/webhook-secret').set('Authorization', auth).expect(200);
        expect(secret.body).to.deep.equal({ configured: true, locked: false });
        const history = await request(again.url).get('/api/notifications?limit=1').set('Authorization', auth).expect(200);
        expect(history.body.last_seq).to.be.at.least(before.body.notifications[19].seq);
      } finally {
        await again.destroy();
      }
    } finally {
      await svc.destroy();
    }
  });
});

describe('CLI backup target and data dir modes', function () {
  this.timeout(60_000);
  let dir: string;
  let sqliteEnv: Record<string, string>;

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cli-modes-'));
    // backup is for SQLite: this database is one whatever the suite runs on
    sqliteEnv = testEnv(path.join(dir, 'data'), null);
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('backs up into a new file only: a symbolic link at the target, dangling or not, is refused and never written through', async () => {
    expect((await cli(sqliteEnv, ['seed'])).code).to.equal(0);
    const out = fs.mkdtempSync(path.join(dir, 'out-'));
    const victim = path.join(dir, 'victim');
    const dangling = path.join(out, 'dangling.sqlite');
    fs.symlinkSync(victim, dangling);
    const onLink = await cli(sqliteEnv, ['backup', dangling]);
    refused(onLink, 1, /exists: choose a new file \(it is a symbolic link, never followed\)/);
    expect(onLink.stderr).to.include(dangling);
    expect(fs.existsSync(victim), 'written through the link').to.equal(false);
    expect(fs.readlinkSync(dangling)).to.equal(victim);

    fs.writeFileSync(victim, 'mine');
    const pointing = path.join(out, 'pointing.sqlite');
    fs.symlinkSync(victim, pointing);
    refused(await cli(sqliteEnv, ['backup', pointing]), 1, /pointing\.sqlite exists: choose a new file/);
    expect(fs.readFileSync(victim, 'utf8')).to.equal('mine');
    // no private copy is left behind by a refusal
    expect(fs.readdirSync(out).sort()).to.deep.equal(['dangling.sqlite', 'pointing.sqlite']);

    const file = path.join(out, 'good.sqlite');
    expect((await cli(sqliteEnv, ['backup', file])).code).to.equal(0);
    expect(fs.statSync(file).mode & 0o777).to.equal(0o600);
    expect(fs.readdirSync(out).sort()).to.deep.equal(['dangling.sqlite', 'good.sqlite', 'pointing.sqlite']);
  });

  it('opens no path in the target folder but the target, once: nothing there can be swapped for a link mid-backup', async () => {
    expect((await cli(sqliteEnv, ['seed'])).code).to.equal(0);
    const out = fs.mkdtempSync(path.join(dir, 'out-'));
    fs.chmodSync(out, 0o777);
    // every name that appears in the folder while the backup runs (a temporary file there could be replaced by another user)
    const seen = new Set<string>();
    const watcher = fs.watch(out, (_event, name) => name && seen.add(String(name)));
    try {
      const file = path.join(out, 'nightly.sqlite');
      const run = await cli(sqliteEnv, ['--json', 'backup', file]);
      expect(run.code, run.stderr).to.equal(0);
      await new Promise((r) => setTimeout(r, 100));
      expect([...seen]).to.deep.equal(['nightly.sqlite']);
      expect(run.json().bytes).to.equal(fs.statSync(file).size);
      // the copy is a database that opens, with the seeded accounts
      const copy = new BetterSqlite3(file, { readonly: true, fileMustExist: true });
      try {
        expect(copy.prepare("select username from users where username = 'admin'").all()).to.have.length(1);
      } finally {
        copy.close();
      }
    } finally {
      watcher.close();
    }
    // the private folder it used inside the data dir is gone
    expect(fs.readdirSync(path.join(dir, 'data')).filter((f) => f.startsWith('.backup-'))).to.deep.equal([]);
  });

  it('makes the data dir it creates 0700, and the database and master key 0600', async () => {
    const db = await freshDatabase();
    try {
      const env = testEnv(path.join(dir, 'data'), db.url);
      delete (env as Record<string, string>).SERVICE_SECRET_KEY;
      expect((await cli(env, ['seed'])).code).to.equal(0);
      expect((await cli(env, ['settings', 'set', 'scm_webhook_secret'], 'webhook-secret-1234\n')).code).to.equal(0);
      const data = path.join(dir, 'data');
      expect(fs.statSync(data).mode & 0o777).to.equal(0o700);
      expect(fs.statSync(path.join(data, 'secret.key')).mode & 0o777).to.equal(0o600);
      const files = fs.readdirSync(data).filter((f) => f.startsWith('service.sqlite'));
      expect(files.length).to.equal(db.url ? 0 : 1);
      for (const f of files) expect(fs.statSync(path.join(data, f)).mode & 0o777, f).to.equal(0o600);
    } finally {
      await db.drop();
    }
  });
});

// over Redis (the bus bridge), and without it (the database relay, read every second)
for (const withRedis of [true, false])
  describe(`CLI next to a running service ${withRedis ? 'over Redis' : 'without Redis'}`, function () {
    this.timeout(60_000);
    let redis: TestRedis | null = null;
    let svc: TestService;
    let env: Record<string, string>;

    before(async () => {
      redis = withRedis ? await startRedis() : null;
      const redisEnv: Record<string, string> = redis ? { SERVICE_REDIS_URL: redis.url } : {};
      // a long cache and no connection sweep: only the bridge or the relay can make the service see a change at once
      svc = await startService({ env: { ...redisEnv, SERVICE_PERMISSION_CACHE_TTL_MS: '600000', SERVICE_SYSTEM_API_KEY: SYSTEM_KEY } });
      env = testEnv(svc.dataDir, svc.databaseUrl, redisEnv);
      if (withRedis) while (!svc.service.bridge?.isUp) await new Promise((r) => setTimeout(r, 50));
      else expect(svc.service.relay, 'the relay reader runs without Redis').to.not.equal(null);
    });
    after(async () => {
      await svc.destroy();
      await redis?.stop();
    });

    /** A credential refused: at once over Redis, within a read of the relay (and a margin) without it. */
    async function refusedSoon(authorization: string): Promise<void> {
      const deadline = Date.now() + (withRedis ? 0 : 2500);
      for (;;) {
        const { status } = await request(svc.url).get('/api/me').set('Authorization', authorization);
        if (status === 401 || Date.now() >= deadline) return void expect(status).to.equal(401);
        await new Promise((r) => setTimeout(r, 100));
      }
    }

    it('a user and a password made by the CLI sign in at once; disabling ends their connection', async () => {
      expect((await cli(env, ['user', 'create', 'dave', '--group', 'INT_USER', '--password-stdin'], 'dave-password-1\n')).code).to.equal(0);
      await request(svc.url).get('/api/me').set('Authorization', basic('dave', 'dave-password-1')).expect(200);
      const ws = await WsClient.basic(svc, 'dave', 'dave-password-1');
      expect((await cli(env, ['user', 'set-password', 'dave'], 'dave-password-2\n')).code).to.equal(0);
      // the old password is refused at once, though the service caches identities for 10 minutes
      await refusedSoon(basic('dave', 'dave-password-1'));
      expect((await ws.closedWithin(3000)).code).to.equal(1008);
      await request(svc.url).get('/api/me').set('Authorization', basic('dave', 'dave-password-2')).expect(200);
      const ws2 = await WsClient.basic(svc, 'dave', 'dave-password-2');
      expect((await cli(env, ['user', 'disable', 'dave'])).code).to.equal(0);
      expect((await ws2.closedWithin(3000)).code).to.equal(1008);
      await refusedSoon(basic('dave', 'dave-password-2'));
    });

    it('disabling ends the keys and sessions for good: enabling again brings back only the password', async () => {
      expect((await cli(env, ['user', 'create', 'gail', '--group', 'INT_USER', '--password-stdin'], 'gail-password-1\n')).code).to.equal(0);
      const session = (await request(svc.url).post('/api/auth/login').send({ username: 'gail', password: 'gail-password-1' }).expect(200)).body.token;
      const key = (await cli(env, ['--json', 'key', 'issue', '--user', 'gail'])).json().token;
      await request(svc.url).get('/api/me').set('Authorization', `Bearer ${key}`).expect(200);
      expect((await cli(env, ['user', 'disable', 'gail'])).code).to.equal(0);
      expect((await cli(env, ['user', 'enable', 'gail'])).code).to.equal(0);
      await refusedSoon(`Bearer ${key}`);
      await refusedSoon(`Bearer ${session}`);
      expect((await cli(env, ['--json', 'key', 'list', '--user', 'gail'])).json().keys).to.deep.equal([]);
      await request(svc.url).get('/api/me').set('Authorization', basic('gail', 'gail-password-1')).expect(200);
    });

    it('a key issued by the CLI works at once and stops at once when revoked', async () => {
      const key = (await cli(env, ['--json', 'key', 'issue', '--user', 'admin', '--scope', 'api:read'])).json();
      await request(svc.url).get('/api/me').set('Authorization', `Bearer ${key.token}`).expect(200);
      expect((await cli(env, ['key', 'revoke', key.id])).code).to.equal(0);
      await refusedSoon(`Bearer ${key.token}`);
    });

    it('a notification sent by the CLI reaches a connected client live', async () => {
      const ws = await WsClient.basic(svc, 'admin', 'admin-test-password');
      try {
        expect((await cli(env, ['notify', '--user', 'admin', '--title', 'From the console', '--message', 'hello'])).code).to.equal(0);
        const frame = await ws.next('user:notify', (f) => f.payload.title === 'From the console');
        expect(frame.payload).to.include({ message: 'hello', source: 'cli' });
        expect((await cli(env, ['notify', '--broadcast', '--title', 'Maintenance', '--message', 'at noon'])).code).to.equal(0);
        await ws.next('system:notify', (f) => f.payload.title === 'Maintenance');
      } finally {
        await ws.close();
      }
    });

    it('a system key stored by the CLI is refused while the environment sets one', async () => {
      refused(
        await cli({ ...env, SERVICE_SYSTEM_API_KEY: SYSTEM_KEY }, ['settings', 'set', 'system_api_key'], `${'s'.repeat(40)}\n`),
        1,
        /locked: system_api_key/,
      );
    });
  });
