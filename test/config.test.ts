import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import fs from 'node:fs';
import { loadConfig, ConfigError } from '../src/config.js';
import { apiRule, SETTINGS } from '../src/settings-table.js';
import { README, readmeWithTable } from '../scripts/settings-doc.js';

const base = () => ({ SERVICE_DATA_DIR: fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cfg-')) });

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

  it('refuses production with default passwords or a generated secret key', () => {
    rejects({ SERVICE_ENV: 'production' }, 'SERVICE_ADMIN_PASSWORD', /production/);
    rejects({ SERVICE_ENV: 'production', SERVICE_ADMIN_PASSWORD: 'a-real-password', SERVICE_BOT_PASSWORD: 'another-one' }, 'SERVICE_SECRET_KEY');
    const ok = loadConfig(
      { ...base(), SERVICE_ENV: 'production', SERVICE_ADMIN_PASSWORD: 'a-real-password', SERVICE_BOT_PASSWORD: 'another-one', SERVICE_SECRET_KEY: 'k'.repeat(40) },
      { writeFiles: false },
    );
    expect(ok.env).to.equal('production');
  });

  it('refuses production without writing anything (no secret.key, no data dir)', () => {
    const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cfg-')), 'data');
    expect(() => loadConfig({ SERVICE_DATA_DIR: dir, SERVICE_ENV: 'production', SERVICE_ADMIN_PASSWORD: 'a-real-password', SERVICE_BOT_PASSWORD: 'another-one' })).to.throw(ConfigError, /SERVICE_SECRET_KEY/);
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

  it('takes from the environment exactly what the settings API takes, setting by setting', () => {
    const samples = ['x', ' padded ', 'ldap://dir.example', 'http://idp.example', '(uid={username})', 'uid={username}', 'openid', 'profile email', 'memberOf', '9bad', 'local,ldap', 'local,local', 'kerberos', 'INT_VIEWER,INT_USER', '_bad', 'a'.repeat(40), 'a key with spaces'.repeat(3)];
    const shared = SETTINGS.filter((s) => s.api && s.kind !== 'boolean' && s.kind !== 'mapping');
    expect(shared.map((s) => s.api)).to.include.members(['auth_providers', 'sso_default_groups', 'ldap_url', 'ldap_user_filter', 'oidc_scopes', 'system_api_key', 'scm_webhook_secret']);
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
