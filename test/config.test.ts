import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import fs from 'node:fs';
import { loadConfig, ConfigError, isLoopback } from '../src/config.js';
import { apiRule, SETTINGS } from '../src/settings-table.js';
import { parseEnvFile } from '../src/cli/input.js';
import { README, readmeWithTable } from '../scripts/settings-doc.js';

const TEMPLATE = path.resolve(import.meta.dirname, '../docs/deploy/service-core.env');

/** The ConfigError of `env` (fails when it loads). */
function problemsOf(env: Record<string, string>): ConfigError {
  try {
    loadConfig({ ...base(), ...env }, { writeFiles: false });
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error(`expected ${JSON.stringify(env)} to be refused`);
}

/** src/main.ts as a process with exactly `env` (and PATH): its exit code and stderr lines. */
function runMain(env: Record<string, string>) {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts'], { env: { PATH: process.env.PATH!, ...env }, encoding: 'utf8', timeout: 25000 });
  return { status: r.status, lines: r.stderr.trim().split('\n'), stderr: r.stderr, stdout: r.stdout };
}

/** temp dirs the current test made (removed after it) */
const made: string[] = [];
const tempDir = () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cfg-'));
  made.push(dir);
  return dir;
};
const base = () => ({ SERVICE_DATA_DIR: tempDir() });

function rejects(env: Record<string, string>, variable: string, reason?: RegExp) {
  let err: unknown;
  try {
    loadConfig({ ...base(), ...env }, { writeFiles: false });
  } catch (e) {
    err = e;
  }
  expect(err, `expected ${variable} to be rejected`).to.be.instanceOf(ConfigError);
  expect((err as ConfigError).variable).to.equal(variable);
  if (reason) expect((err as ConfigError).reason).to.match(reason);
}

describe('config', () => {
  afterEach(() => {
    for (const dir of made.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('has working defaults', () => {
    const c = loadConfig(base(), { writeFiles: false });
    expect(c.port).to.equal(8080);
    expect(c.host).to.equal('127.0.0.1');
    expect(c.publicUrl).to.equal('http://localhost:8080');
    expect(c.authProviders).to.deep.equal(['local']);
    expect(c.ssoDefaultGroups).to.deep.equal(['INT_VIEWER']);
    expect(c.sessionTtlMs).to.equal(12 * 3600_000);
    expect(c.permissionCacheTtlMs).to.equal(5000);
    expect(c.systemApiKey).to.equal(null);
    expect(c.adminForceSuperadmin).to.equal(false);
    expect(c.allowedOrigins).to.deep.equal(['http://localhost:8080']);
    // never the data dir itself (it holds secret.key and the database), but a folder in it
    expect(c.managedDirs).to.deep.equal([path.join(c.dataDir, 'managed')]);
  });

  it('parses lists, booleans, durations and JSON mappings', () => {
    const c = loadConfig(
      {
        ...base(),
        SERVICE_AUTH_PROVIDERS: 'ldap, local,oidc',
        SERVICE_ADMIN_FORCE_SUPERADMIN: 'true',
        SERVICE_SESSION_TTL: '30m',
        SERVICE_LDAP_GROUP_MAPPING: '{"cn=admins,dc=example,dc=org": ["INT_ADMIN"]}',
        SERVICE_ALLOWED_ORIGINS: 'https://app.example.org',
        SERVICE_SSO_DEFAULT_GROUPS: 'INT_VIEWER,INT_USER',
      },
      { writeFiles: false },
    );
    expect(c.authProviders).to.deep.equal(['ldap', 'local', 'oidc']);
    expect(c.adminForceSuperadmin).to.equal(true);
    expect(c.sessionTtlMs).to.equal(30 * 60_000);
    expect(c.ldap.groupMapping).to.deep.equal({ 'cn=admins,dc=example,dc=org': ['INT_ADMIN'] });
    expect(c.allowedOrigins).to.include('https://app.example.org');
    expect(c.ssoDefaultGroups).to.deep.equal(['INT_VIEWER', 'INT_USER']);
  });

  it('treats an empty or blank system key as not configured', () => {
    expect(loadConfig({ ...base(), SERVICE_SYSTEM_API_KEY: '' }, { writeFiles: false }).systemApiKey).to.equal(null);
    expect(loadConfig({ ...base(), SERVICE_SYSTEM_API_KEY: '    ' }, { writeFiles: false }).systemApiKey).to.equal(null);
  });

  it('rejects each kind of bad value, naming the variable', () => {
    rejects({ SERVICE_PORT: 'eighty' }, 'SERVICE_PORT', /number/);
    rejects({ SERVICE_PORT: '70000' }, 'SERVICE_PORT');
    rejects({ SERVICE_PUBLIC_URL: 'not a url' }, 'SERVICE_PUBLIC_URL');
    rejects({ SERVICE_PUBLIC_URL: 'ftp://x.example' }, 'SERVICE_PUBLIC_URL');
    rejects({ SERVICE_ENV: 'staging' }, 'SERVICE_ENV');
    rejects({ SERVICE_AUTH_PROVIDERS: 'local,kerberos' }, 'SERVICE_AUTH_PROVIDERS', /kerberos/);
    rejects({ SERVICE_AUTH_PROVIDERS: 'local,local' }, 'SERVICE_AUTH_PROVIDERS', /twice/);
    rejects({ SERVICE_ADMIN_FORCE_SUPERADMIN: 'maybe' }, 'SERVICE_ADMIN_FORCE_SUPERADMIN');
    rejects({ SERVICE_SESSION_TTL: 'forever' }, 'SERVICE_SESSION_TTL', /duration/);
    rejects({ SERVICE_SESSION_TTL: '5s' }, 'SERVICE_SESSION_TTL', /^must be at least 1 minute$/);
    rejects({ SERVICE_PERMISSION_CACHE_TTL_MS: '-1' }, 'SERVICE_PERMISSION_CACHE_TTL_MS');
    rejects({ SERVICE_LDAP_URL: 'http://ldap.example' }, 'SERVICE_LDAP_URL');
    rejects({ SERVICE_LDAP_GROUP_MAPPING: '{not json' }, 'SERVICE_LDAP_GROUP_MAPPING', /JSON/);
    rejects({ SERVICE_OIDC_GROUP_MAPPING: '{"a": [1]}' }, 'SERVICE_OIDC_GROUP_MAPPING');
    rejects({ SERVICE_OIDC_SCOPES: 'profile email' }, 'SERVICE_OIDC_SCOPES');
    // the same rule as the settings API: a filter the API refuses is refused here too
    rejects({ SERVICE_LDAP_USER_FILTER: 'uid={username}' }, 'SERVICE_LDAP_USER_FILTER', /parenthesised LDAP filter containing \{username\}$/);
    rejects({ SERVICE_SCM_WEBHOOK_SECRET: 'short-1234' }, 'SERVICE_SCM_WEBHOOK_SECRET', /at least 16/);
    rejects({ SERVICE_SYSTEM_API_KEY: 'a system key with spaces in it, long enough' }, 'SERVICE_SYSTEM_API_KEY', /must not contain whitespace/);
    rejects({ SERVICE_SYSTEM_API_KEY: 'short' }, 'SERVICE_SYSTEM_API_KEY');
    rejects({ SERVICE_RUNNER_PREFIX: '.*' }, 'SERVICE_RUNNER_PREFIX');
    rejects({ SERVICE_LOG_LEVEL: 'loud' }, 'SERVICE_LOG_LEVEL');
    rejects({ SERVICE_DATABASE_URL: 'mysql://x' }, 'SERVICE_DATABASE_URL');
    rejects({ SERVICE_ALLOWED_ORIGINS: 'not-a-url' }, 'SERVICE_ALLOWED_ORIGINS');
    // its origin would be "null", the Origin of every sandboxed page
    rejects({ SERVICE_ALLOWED_ORIGINS: 'app://desktop' }, 'SERVICE_ALLOWED_ORIGINS');
  });

  // these are read with Node's URL parser and net.isIP (src/settings-kinds.ts), as their users read them
  it('accepts a listen address as an IP address of either family or a host name, and refuses anything else', () => {
    for (const host of ['127.0.0.1', '0.0.0.0', '::', '::1', 'fe80::1', 'localhost', 'svc-1.internal.example']) {
      // passwords of its own: the development ones are refused on an address other hosts reach
      const own = { SERVICE_ADMIN_PASSWORD: 'a-real-password', SERVICE_BOT_PASSWORD: 'another-one-of-mine' };
      expect(loadConfig({ ...base(), ...own, SERVICE_HOST: host }, { writeFiles: false }).host).to.equal(host);
    }
    rejects({ SERVICE_HOST: 'not a host' }, 'SERVICE_HOST', /^must be an IP address or a host name$/);
    rejects({ SERVICE_HOST: '300.1.1.1.' }, 'SERVICE_HOST');
    rejects({ SERVICE_HOST: 'http://x.example' }, 'SERVICE_HOST');
  });

  it('reads the URLs of the service, its database and its Redis by their schemes, without spaces', () => {
    const c = loadConfig(
      {
        ...base(),
        SERVICE_PUBLIC_URL: 'https://svc.example:8443/base',
        SERVICE_REDIS_URL: 'rediss://user:pass@redis.example:6380/2',
        SERVICE_ALLOWED_ORIGINS: 'http://[::1]:3000',
      },
      { writeFiles: false },
    );
    expect(c.publicUrl).to.match(/^https:\/\/svc\.example:8443/);
    expect(c.allowedOrigins).to.include('http://[::1]:3000');
    rejects({ SERVICE_PUBLIC_URL: 'https://svc.example/a b' }, 'SERVICE_PUBLIC_URL', /^must be a URL, with spaces and characters such as/);
    // a template's placeholder left in (docs/deploy.md's redis://:<password>@...), a broken escape
    rejects({ SERVICE_REDIS_URL: 'redis://:<password>@redis.internal:6379/0' }, 'SERVICE_REDIS_URL', /percent-encoded/);
    rejects({ SERVICE_DATABASE_URL: 'postgres://u:100%@db/x' }, 'SERVICE_DATABASE_URL', /percent-encoded/);
    for (const url of ['postgres:///service?host=/var/run/postgresql', 'postgres://u:p%40ss@db.internal:5432/service', 'sqlite:./data/service.sqlite']) {
      expect(loadConfig({ ...base(), SERVICE_DATABASE_URL: url }, { writeFiles: false }).databaseUrl).to.equal(url);
    }
    rejects({ SERVICE_PUBLIC_URL: 'ftp://x.example' }, 'SERVICE_PUBLIC_URL', /^must be a http or https URL, not ftp:$/);
    rejects({ SERVICE_PUBLIC_URL: 'http://' }, 'SERVICE_PUBLIC_URL', /^must be a http or https URL$/);
    rejects({ SERVICE_REDIS_URL: 'http://redis.example' }, 'SERVICE_REDIS_URL', /redis or rediss URL/);
    rejects({ SERVICE_REDIS_URL: 'redis' }, 'SERVICE_REDIS_URL');
    // the text is compared afterwards (the dialect, secure cookies, the Redis client's TLS): as it is written
    rejects({ SERVICE_DATABASE_URL: 'POSTGRES://u@db.internal/service' }, 'SERVICE_DATABASE_URL', /^must begin with its scheme in lower case, postgres:$/);
    rejects({ SERVICE_REDIS_URL: 'REDISS://redis.internal:6380/0' }, 'SERVICE_REDIS_URL', /lower case/);
    rejects({ SERVICE_PUBLIC_URL: 'HTTPS://svc.example' }, 'SERVICE_PUBLIC_URL', /lower case/);
    rejects({ SERVICE_PUBLIC_URL: 'https:svc.example' }, 'SERVICE_PUBLIC_URL', /^must name its host after https:\/\/$/);
    rejects({ SERVICE_ALLOWED_ORIGINS: 'http:/app.example' }, 'SERVICE_ALLOWED_ORIGINS', /host after http:\/\//);
  });

  it('refuses production with default passwords or a generated secret key', () => {
    rejects({ SERVICE_ENV: 'production' }, 'SERVICE_ADMIN_PASSWORD', /production/);
    rejects({ SERVICE_ENV: 'production', SERVICE_ADMIN_PASSWORD: 'a-real-password', SERVICE_BOT_PASSWORD: 'another-one-of-mine' }, 'SERVICE_SECRET_KEY');
    const ok = loadConfig(
      {
        ...base(),
        SERVICE_ENV: 'production',
        SERVICE_ADMIN_PASSWORD: 'a-real-password',
        SERVICE_BOT_PASSWORD: 'another-one-of-mine',
        SERVICE_SECRET_KEY: 'k'.repeat(40),
      },
      { writeFiles: false },
    );
    expect(ok.env).to.equal('production');
  });

  it('refuses production without writing anything (no secret.key, no data dir)', () => {
    const dir = path.join(tempDir(), 'data');
    expect(() =>
      loadConfig({ SERVICE_DATA_DIR: dir, SERVICE_ENV: 'production', SERVICE_ADMIN_PASSWORD: 'a-real-password', SERVICE_BOT_PASSWORD: 'another-one-of-mine' }),
    ).to.throw(ConfigError, /SERVICE_SECRET_KEY/);
    expect(fs.existsSync(dir)).to.equal(false);
  });

  it('generates the secret key once into the data dir with mode 0600', () => {
    const env = base();
    const a = loadConfig(env);
    const b = loadConfig(env);
    expect(a.secretKeyGenerated).to.equal(true);
    expect(a.secretKey).to.equal(b.secretKey);
    const st = fs.statSync(path.join(env.SERVICE_DATA_DIR, 'secret.key'));
    expect(st.mode & 0o777).to.equal(0o600);
  });

  it('main exits 2 with one line naming the variable, no stack trace', function () {
    this.timeout(30000);
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      env: { ...process.env, ...base(), SERVICE_PORT: 'nope' },
      encoding: 'utf8',
      timeout: 25000,
    });
    expect(r.status).to.equal(2);
    const lines = r.stderr.trim().split('\n');
    expect(lines).to.have.length(1);
    expect(lines[0]).to.match(/^configuration error: SERVICE_PORT: /);
    expect(r.stderr).not.to.match(/at .*\.ts:\d+/);
  });

  it('refuses the shipped env file template, unedited, in one line naming what to set, writing nothing', function () {
    this.timeout(30000);
    const template = parseEnvFile(fs.readFileSync(TEMPLATE, 'utf8'), TEMPLATE);
    expect(template.SERVICE_ENV).to.equal('production');
    const err = problemsOf(template);
    expect(err.problems.map((p) => p.variable)).to.deep.equal(['SERVICE_ADMIN_PASSWORD', 'SERVICE_BOT_PASSWORD', 'SERVICE_SECRET_KEY']);
    // as the service: the template's own values, but where this test may write and listen
    const dir = path.join(tempDir(), 'data');
    const r = runMain({ ...template, SERVICE_DATA_DIR: dir, SERVICE_PORT: '0' });
    expect(r.status, r.stderr + r.stdout).to.equal(2);
    expect(r.lines).to.deep.equal([
      'configuration error: SERVICE_ADMIN_PASSWORD, SERVICE_BOT_PASSWORD, SERVICE_SECRET_KEY: must be set in production: passwords of your own (8 characters or more), and the key from `openssl rand -base64 48`',
    ]);
    expect(r.stdout).to.equal('');
    expect(fs.existsSync(dir)).to.equal(false);
  });

  it('refuses placeholder and development passwords, and a placeholder key, in production', () => {
    const prod = {
      SERVICE_ENV: 'production',
      SERVICE_ADMIN_PASSWORD: 'a-real-password',
      SERVICE_BOT_PASSWORD: 'another-one-of-mine',
      SERVICE_SECRET_KEY: 'k'.repeat(40),
    };
    for (const weak of ['admin-dev-password', 'bot-dev-password', 'change-me', 'change-me-too', 'CHANGE-ME-please', 'changeme', 'password']) {
      rejects({ ...prod, SERVICE_ADMIN_PASSWORD: weak }, 'SERVICE_ADMIN_PASSWORD', /development or placeholder password/);
      rejects({ ...prod, SERVICE_BOT_PASSWORD: weak }, 'SERVICE_BOT_PASSWORD', /development or placeholder password/);
    }
    // under the length rule, whatever the mode
    rejects({ ...prod, SERVICE_ADMIN_PASSWORD: 'short' }, 'SERVICE_ADMIN_PASSWORD', /at least 8/);
    // the key placeholder of earlier templates
    rejects({ ...prod, SERVICE_SECRET_KEY: 'change-me-to-48-random-bytes-in-base64-000000000000' }, 'SERVICE_SECRET_KEY', /openssl rand/);
    // a bcrypt cost below 10 is for tests; any mode checks the range
    rejects({ ...prod, SERVICE_BCRYPT_COST: '9' }, 'SERVICE_BCRYPT_COST', /below 10/);
    expect(loadConfig({ ...base(), ...prod, SERVICE_BCRYPT_COST: '12' }).bcryptCost).to.equal(12);
    expect(loadConfig({ ...base(), SERVICE_BCRYPT_COST: '4' }).bcryptCost).to.equal(4);
    rejects({ SERVICE_BCRYPT_COST: '3' }, 'SERVICE_BCRYPT_COST');
    const err = problemsOf({ ...prod, SERVICE_ADMIN_PASSWORD: 'admin-dev-password', SERVICE_BOT_PASSWORD: 'bot-dev-password' });
    expect(err.lines()).to.have.length(1);
    expect(err.lines()[0]).to.match(/^SERVICE_ADMIN_PASSWORD, SERVICE_BOT_PASSWORD: /);
  });

  it("refuses a bootstrap password of one's own that is common or easy to guess, in every mode (the development defaults aside)", () => {
    const modes: Array<Record<string, string>> = [
      {},
      { SERVICE_ENV: 'production', SERVICE_SECRET_KEY: 'k'.repeat(40), SERVICE_BOT_PASSWORD: 'a-bot-password-of-mine' },
    ];
    for (const env of modes) {
      rejects({ ...env, SERVICE_ADMIN_PASSWORD: 'password123' }, 'SERVICE_ADMIN_PASSWORD', /is a common password/);
      rejects({ ...env, SERVICE_ADMIN_PASSWORD: 'Summer2024!' }, 'SERVICE_ADMIN_PASSWORD', /too easy to guess \(strength 2 of 4, 3 needed\)/);
      rejects({ ...env, SERVICE_ADMIN_PASSWORD: 'qwertyuiop' }, 'SERVICE_ADMIN_PASSWORD', /is a common password/);
    }
    // the development defaults stay usable on a loopback listener in development
    expect(loadConfig({ ...base(), SERVICE_ADMIN_PASSWORD: 'admin-dev-password' }, { writeFiles: false }).adminPassword).to.equal('admin-dev-password');
    expect(loadConfig({ ...base(), SERVICE_ADMIN_PASSWORD: 'a-real-password' }, { writeFiles: false }).adminPasswordConfigured).to.equal(true);
  });

  it('refuses the development passwords on a listener other hosts reach, saying how to set real ones', () => {
    for (const host of ['0.0.0.0', '::', '10.0.0.5', 'server.lan']) {
      const err = problemsOf({ SERVICE_HOST: host });
      expect(
        err.problems.map((p) => p.variable),
        host,
      ).to.deep.equal(['SERVICE_ADMIN_PASSWORD', 'SERVICE_BOT_PASSWORD']);
      expect(err.lines(), host).to.have.length(1);
      expect(err.lines()[0])
        .to.include(`SERVICE_HOST=${host}`)
        .and.to.match(/set a password of your own, or listen on 127\.0\.0\.1$/);
      rejects(
        { SERVICE_HOST: host, SERVICE_ADMIN_PASSWORD: 'own-admin-password', SERVICE_BOT_PASSWORD: 'bot-dev-password' },
        'SERVICE_BOT_PASSWORD',
        /development or placeholder password/,
      );
      const ok = loadConfig(
        { ...base(), SERVICE_HOST: host, SERVICE_ADMIN_PASSWORD: 'own-admin-password', SERVICE_BOT_PASSWORD: 'own-bot-password' },
        { writeFiles: false },
      );
      expect(ok.host).to.equal(host);
    }
    for (const host of ['127.0.0.1', '127.0.1.1', '::1', 'localhost']) {
      expect(isLoopback(host), host).to.equal(true);
      expect(loadConfig({ ...base(), SERVICE_HOST: host }, { writeFiles: false }).adminPasswordConfigured).to.equal(false);
    }
  });

  it('reports every configuration problem at once: one line each from main, exit 2', function () {
    this.timeout(30000);
    const err = problemsOf({ SERVICE_PORT: 'eighty', SERVICE_LOG_LEVEL: 'loud', SERVICE_SESSION_TTL: 'forever', SERVICE_PUBLIC_URL: 'not a url' });
    expect(err.problems.map((p) => p.variable).sort()).to.deep.equal(['SERVICE_LOG_LEVEL', 'SERVICE_PORT', 'SERVICE_PUBLIC_URL', 'SERVICE_SESSION_TTL']);
    expect(err.message.split('; ')).to.have.length(4);
    const r = runMain({ ...base(), SERVICE_PORT: 'eighty', SERVICE_LOG_LEVEL: 'loud', SERVICE_HOST: '0.0.0.0' });
    expect(r.status).to.equal(2);
    expect(r.lines).to.have.length(3);
    expect(r.lines[0]).to.match(/^configuration error: SERVICE_PORT: /);
    expect(r.lines[1]).to.match(/^configuration error: SERVICE_LOG_LEVEL: /);
    expect(r.lines[2]).to.match(/^configuration error: SERVICE_ADMIN_PASSWORD, SERVICE_BOT_PASSWORD: .*SERVICE_HOST=0\.0\.0\.0/);
    expect(r.stderr).not.to.match(/at .*\.ts:\d+/);
  });

  it('warns of a SERVICE_* variable no setting reads, naming the closest known one', () => {
    const c = loadConfig(
      {
        ...base(),
        SERVICE_PROT: '9000',
        SERVICE_PLUGIN_DIR: './p',
        SERVICE_LDAP_URI: 'ldap://x',
        SERVICE_PLUGIN_REPORTS_REGION: 'eu',
        SERVICE_PLUGIN_OUTBOUND_FORWARDER_MAX_ATTEMPTS: '3',
        SERVICE_TEST_DATABASE_URL: 'postgres://x',
      },
      { writeFiles: false },
    );
    expect(c.port).to.equal(8080);
    expect(c.warnings).to.deep.equal([
      'SERVICE_LDAP_URI is not a setting and is ignored; did you mean SERVICE_LDAP_URL?',
      'SERVICE_PLUGIN_DIR is not a setting and is ignored; did you mean SERVICE_PLUGINS_DIR?',
      'SERVICE_PROT is not a setting and is ignored; did you mean SERVICE_PORT?',
    ]);
    expect(c.pluginEnv).to.include({ SERVICE_PLUGIN_REPORTS_REGION: 'eu' });
    expect(loadConfig(base(), { writeFiles: false }).warnings).to.deep.equal([]);
  });

  it('takes from the environment exactly what the settings API takes, setting by setting', () => {
    const samples = [
      'x',
      ' padded ',
      'ldap://dir.example',
      'http://idp.example',
      '(uid={username})',
      'uid={username}',
      'openid',
      'profile email',
      'memberOf',
      '9bad',
      'local,ldap',
      'local,local',
      'kerberos',
      'INT_VIEWER,INT_USER',
      '_bad',
      'a'.repeat(40),
      'a key with spaces'.repeat(3),
    ];
    const shared = SETTINGS.filter((s) => s.api && s.kind !== 'boolean' && s.kind !== 'mapping');
    expect(shared.map((s) => s.api)).to.include.members([
      'auth_providers',
      'sso_default_groups',
      'ldap_url',
      'ldap_user_filter',
      'oidc_scopes',
      'system_api_key',
      'scm_webhook_secret',
    ]);
    for (const s of shared) {
      for (const text of samples) {
        let envTakes = true;
        try {
          loadConfig({ ...base(), [s.env]: text }, { writeFiles: false });
        } catch (err) {
          if (!(err instanceof ConfigError) || err.variable !== s.env) throw err;
          envTakes = false;
        }
        const apiTakes = !apiRule(s).validate(text).error;
        expect(envTakes, `${s.env}=${JSON.stringify(text)}: environment ${envTakes}, API ${apiTakes}`).to.equal(apiTakes);
      }
    }
  });

  it('the README configuration table is the one written from the settings table', () => {
    const readme = fs.readFileSync(README, 'utf8');
    expect(readme, 'README.md is out of date: run npm run docs:settings').to.equal(readmeWithTable(readme));
  });
});
