import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { READY_TIMEOUT_MS, spawnService, type ServiceProcess } from '../support/process.js';
import { AT_START, checkOutside, KEPT_OUTSIDE, loadedAtFirstUse } from '../../scripts/bundle-server.mjs';
import { ADMIN, basic, freshDatabase, testEnv, type TestDb } from '../support/service.js';
import { startSlapd, type Slapd } from '../support/slapd.js';
import { followToCallback, startIdp, type RunningIdp } from '../support/oidc-idp.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const BUNDLE = path.join(ROOT, 'dist/server/main.js');
const CLI = path.join(ROOT, 'dist/server/cli.js');

/**
 * The server's bundle (dist/server/, scripts/bundle-server.mjs), what `npm start` runs, on what
 * bundling can break and the in-process tests never run: the paths its modules find beside
 * themselves, the packages left in node_modules for a feature's first use (one copy each), the
 * TypeScript plugins loaded through tsx, and the chunks loaded at first use.
 */
describe('the server bundle (npm start)', function () {
  this.timeout(READY_TIMEOUT_MS + 60_000);
  let svc: ServiceProcess;
  let slapd: Slapd;
  let dataDir: string;
  let db: TestDb;
  const admin = () => basic(ADMIN.username, ADMIN.password);

  before(async function () {
    if (!fs.existsSync(BUNDLE)) throw new Error(`${BUNDLE} is missing: build first (npm run build; npm ci runs it)`);
    slapd = await startSlapd();
    db = await freshDatabase();
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bundle-'));
    svc = await spawnService({
      dataDir,
      databaseUrl: db.url,
      command: [process.execPath, BUNDLE],
      env: {
        SERVICE_PLUGINS_DIR: path.join(ROOT, 'plugins'),
        SERVICE_AUTH_PROVIDERS: 'ldap,local',
        SERVICE_LDAP_URL: slapd.url,
        SERVICE_LDAP_BASE_DN: slapd.baseDN,
        SERVICE_LDAP_BIND_DN: slapd.bindDN,
        SERVICE_LDAP_BIND_PASSWORD: slapd.bindPassword,
      },
    });
  });

  after(async function () {
    await svc?.kill('SIGTERM');
    await slapd?.stop();
    await db?.drop();
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('holds one copy of each package: those loaded at first use stay in node_modules, those of every start are inside', () => {
    // what went into the bundle, by package: the sources its source maps name
    const inside = new Set<string>();
    for (const map of fs.readdirSync(path.dirname(BUNDLE)).filter((f) => f.endsWith('.js.map'))) {
      const { sources } = JSON.parse(fs.readFileSync(path.join(path.dirname(BUNDLE), map), 'utf8')) as { sources: string[] };
      for (const source of sources) {
        const name = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(source)?.[1];
        if (name) inside.add(name);
      }
    }
    const outside = loadedAtFirstUse(path.join(ROOT, 'src'));
    expect(outside).to.include.members(['pg', 'ldapts', '@grpc/grpc-js', 'dbus-next', 'otpauth']);
    expect(outside.filter((name) => inside.has(name))).to.deep.equal([]);
    // those that run files of their own are not inside either, nor their own dependencies
    expect(['pino', 'thread-stream', 'piscina', 'dockerode', 'docker-modem', 'ssh2', 'ioredis'].filter((name) => inside.has(name))).to.deep.equal([]);
    expect(Object.keys(KEPT_OUTSIDE)).to.include.members(['pino', 'piscina', 'dockerode', 'ioredis']);
    expect([...AT_START].filter((name) => !inside.has(name))).to.deep.equal([]);
    expect(inside).to.include.keys('knex', 'joi', 'objection');
  });

  it('reads the large JSON files it holds from text: the recorded API examples, the media types', async () => {
    const recorded = JSON.parse(fs.readFileSync(path.join(ROOT, 'docs/api-examples.json'), 'utf8')) as Record<string, { responses?: Record<string, unknown> }>;
    const document = await request(svc.url).get('/openapi.json').expect(200);
    // the charset Koa adds comes from mime-db's table
    expect(document.headers['content-type']).to.equal('application/json; charset=utf-8');
    const listUsers = Object.values(
      document.body.paths as Record<
        string,
        Record<string, { operationId?: string; responses: Record<string, { content?: Record<string, { example?: unknown }> }> }>
      >,
    )
      .flatMap((item) => Object.values(item))
      .find((op) => op.operationId === 'listUsers');
    expect(listUsers?.responses['200']?.content?.['application/json']?.example).to.deep.equal(recorded.listUsers?.responses?.['200']);
    const chunks = fs.readdirSync(path.dirname(BUNDLE)).filter((f) => f.endsWith('.js'));
    const texts = chunks.map((f) => fs.readFileSync(path.join(path.dirname(BUNDLE), f), 'utf8'));
    // mime-db's table and the recorded examples: strings for JSON.parse, not object literals
    expect(texts.some((t) => t.includes(`JSON.parse('{"application/1d-interleaved-parityfec"`))).to.equal(true);
    expect(texts.some((t) => /JSON\.parse\((['"`])\{"checkMountHealth":/.test(t))).to.equal(true);
    // iconv-lite's code pages (all of them over 10 kB, whatever their characters) are never literals either
    expect(texts.filter((t) => t.includes('exports=[["0",'))).to.deep.equal([]);
  });

  it('loads the TypeScript plugins of plugins/ (through tsx, outside the bundle)', async () => {
    const plugins = (await request(svc.url).get('/api/plugins').set('Authorization', admin()).expect(200)).body.plugins;
    const dirs = fs.readdirSync(path.join(ROOT, 'plugins')).filter((d) => fs.existsSync(path.join(ROOT, 'plugins', d, 'plugin.json')));
    expect(dirs.length).to.be.greaterThan(1);
    for (const id of dirs)
      expect(
        plugins.find((p: { id: string }) => p.id === id),
        id,
      ).to.include({ state: 'loaded', error: null });
  });

  it("stores a notification and reads it back on the run's database (on PostgreSQL, through the driver in node_modules)", async () => {
    const sent = (
      await request(svc.url)
        .post('/api/notifications')
        .set('Authorization', admin())
        .send({ title: 'bundled', message: 'from the bundle', user: ADMIN.username })
        .expect(202)
    ).body;
    const list = (await request(svc.url).get('/api/notifications?limit=5').set('Authorization', admin()).expect(200)).body;
    const stored = list.notifications.find((n: { id: string }) => n.id === sent.id);
    expect(stored).to.include({ title: 'bundled' });
    expect(Date.parse(stored.created_at)).to.be.within(Date.now() - 60_000, Date.now() + 1000);
  });

  it('the features loaded at first use answer: the directory (ldapts), an authenticator app (otpauth, QR codes), passkeys (@simplewebauthn/server)', async () => {
    const directory = (await request(svc.url).post('/api/settings/auth/ldap/test-connection').set('Authorization', admin()).send({}).expect(200)).body;
    expect(JSON.stringify(directory)).to.include(slapd.url);
    const login = await request(svc.url).post('/api/auth/login').send({ username: ADMIN.username, password: ADMIN.password }).expect(200);
    const bearer = { Authorization: `Bearer ${login.body.token}` };
    const app = (await request(svc.url).post('/api/me/mfa/totp').set(bearer).expect(200)).body;
    expect(app.otpauth_uri).to.match(/^otpauth:\/\/totp\//);
    expect(app.qr_svg).to.match(/^<svg/);
    const passkey = (await request(svc.url).post('/api/me/mfa/webauthn/options').set(bearer).send({}).expect(200)).body;
    expect(passkey.flow).to.equal('registration');
    expect(passkey.options.challenge).to.be.a('string').and.not.empty;
  });
});

/**
 * OpenID Connect through the bundle, against a real OpenID Provider: openid-client, oauth4webapi
 * and jose are ES modules, joined into a chunk loaded at the first discovery (names not kept:
 * docs/decisions.md); the service tells their errors apart by class and code.
 */
describe('the server bundle: a login through an OpenID Provider', function () {
  this.timeout(READY_TIMEOUT_MS + 60_000);
  const CALLBACK = 'http://localhost:8080/auth/callback/oidc';
  let idp: RunningIdp;
  let svc: ServiceProcess;
  let dataDir: string;

  before(async function () {
    if (!fs.existsSync(BUNDLE)) throw new Error(`${BUNDLE} is missing: build first (npm run build; npm ci runs it)`);
    idp = await startIdp({
      clients: [{ client_id: 'service-core', client_secret: 'bundle-oidc-client-secret-0123456789', redirect_uris: [CALLBACK] }],
      accounts: {
        'alice-sub': { email: 'alice@example.test', email_verified: true, preferred_username: 'alice', name: 'Alice Example', groups: ['idp-devs'] },
      },
    });
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-bundle-oidc-'));
    svc = await spawnService({
      dataDir,
      databaseUrl: null,
      command: [process.execPath, BUNDLE],
      env: {
        SERVICE_AUTH_PROVIDERS: 'local,oidc',
        SERVICE_OIDC_ISSUER: idp.issuer,
        SERVICE_OIDC_CLIENT_ID: 'service-core',
        SERVICE_OIDC_CLIENT_SECRET: 'bundle-oidc-client-secret-0123456789',
        SERVICE_OIDC_GROUP_MAPPING: JSON.stringify({ 'idp-devs': ['INT_USER'] }),
      },
    });
  });

  after(async function () {
    await svc?.kill('SIGTERM');
    await idp?.stop();
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('signs in: discovery, the code exchange and the ID token checked, the session cookie, the mapped groups', async () => {
    const agent = request.agent(svc.url);
    const start = await agent.get('/api/auth/oidc/start').query({ next: '/board' }).expect(302);
    const callback = await followToCallback(start.headers.location, { login: 'alice-sub' });
    expect(`${callback.origin}${callback.pathname}`).to.equal(CALLBACK);
    const completing = await agent.get(callback.pathname + callback.search).expect(302);
    expect(new URL(completing.headers.location, CALLBACK).pathname).to.equal('/auth/complete');
    expect((await agent.get(completing.headers.location).expect(302)).headers.location).to.equal('/board');
    const me = (await agent.get('/api/me').expect(200)).body;
    expect(me).to.include({ username: 'alice', email: 'alice@example.test', method: 'session_cookie' });
    expect(me.groups).to.include('INT_USER');
  });

  it("refuses an ID token that is not this login's (the library's error, told apart by its claim)", async () => {
    const agent = request.agent(svc.url);
    const authorization = new URL((await agent.get('/api/auth/oidc/start').expect(302)).headers.location);
    authorization.searchParams.set('nonce', 'nonce-of-another-login-0123456789');
    const callback = await followToCallback(authorization.href, { login: 'alice-sub' });
    expect((await agent.get(callback.pathname + callback.search).expect(302)).headers.location).to.equal('/login?error=nonce_mismatch');
  });
});

/**
 * The CLI's bundle (dist/server/cli.js, the package's bin), which shares the server's chunks: the
 * in-process CLI tests run the sources, so what bundling can break (the migrations found beside
 * the modules, the drivers and commander left in node_modules, stdin) is run here, on the run's
 * database.
 */
describe("the CLI bundle (the package's bin)", function () {
  this.timeout(60_000);
  let dataDir: string;
  let db: TestDb;
  let env: Record<string, string>;
  const cli = (args: string[], input = '') => {
    const run = spawnSync(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, ...env }, input, encoding: 'utf8', timeout: 30_000 });
    return { code: run.status, stdout: run.stdout, stderr: run.stderr };
  };

  before(async () => {
    if (!fs.existsSync(CLI)) throw new Error(`${CLI} is missing: build first (npm run build; npm ci runs it)`);
    db = await freshDatabase();
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cli-bundle-'));
    env = testEnv(dataDir, db.url);
  });
  after(async () => {
    await db?.drop();
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  });

  it('is executable, migrates and seeds, creates a user with a password from stdin, lists, notifies and verifies the audit trail', () => {
    expect(fs.statSync(CLI).mode & 0o111).to.equal(0o111);
    const seeded = cli(['--json', 'seed']);
    expect(seeded.code, seeded.stderr).to.equal(0);
    // the migrations are found beside the modules (import.meta.url, rewritten by the build)
    expect(JSON.parse(seeded.stdout)).to.deep.include({ changed: true }).and.have.property('applied').that.includes('20261125000000_core.ts');
    expect(cli(['migrate']).stdout.trim()).to.equal('the database is up to date');
    const created = cli(['user', 'create', 'carol', '--password-stdin'], 'a-long-and-unusual-passphrase-of-carol\n');
    expect(created.code, created.stderr).to.equal(0);
    const users = JSON.parse(cli(['--json', 'user', 'list']).stdout).users.map((u: { username: string }) => u.username);
    expect(users).to.deep.equal(['admin', 'bot', 'carol']);
    expect(cli(['notify', '--user', 'carol', '--title', 'hello', '--message', 'from the bundled CLI']).stdout).to.match(/^created notification .* for carol/);
    const verified = cli(['audit', 'verify']);
    expect(verified.code, verified.stderr).to.equal(0);
    expect(verified.stdout).to.match(/^the audit trail verifies: \d+ events/);
    const { settings } = JSON.parse(cli(['--json', 'settings', 'get', 'auth_providers']).stdout);
    expect(settings.auth_providers).to.include({ source: 'default', locked: false }).and.have.deep.property('value', ['local']);
  });

  it('backs up SQLite through the native driver in node_modules, and says PostgreSQL is pg_dump', () => {
    const file = path.join(dataDir, 'backup.sqlite');
    const backup = cli(['backup', file]);
    if (db.url) {
      expect(backup.code).to.equal(1);
      expect(backup.stderr).to.match(/PostgreSQL: back it up with pg_dump/);
    } else {
      expect(backup.code, backup.stderr).to.equal(0);
      expect(fs.statSync(file).mode & 0o777).to.equal(0o600);
    }
  });
});

/** What the build refuses to leave outside (checkOutside in scripts/bundle-server.mjs), on this tree's node_modules. */
describe('the server bundle: its entry', () => {
  it('takes SIGTERM and SIGINT before it loads anything else: what its static imports evaluate holds no configuration code', () => {
    if (!fs.existsSync(BUNDLE)) throw new Error(`${BUNDLE} is missing: build first (npm run build; npm ci runs it)`);
    const text = fs.readFileSync(BUNDLE, 'utf8');
    // a static import is evaluated before the entry's own code, and the chunks it imports before it
    const statics = (file: string): string[] => {
      const code = fs.readFileSync(file, 'utf8');
      const specs = [
        ...code.matchAll(/^import(?:[^'"();]*?from)?\s*["'](\.\/[^"']+)["']/gm),
        ...code.matchAll(/(?:^|;)import(?:\{[^}]*\}from)?["'](\.\/[^"']+)["']/gm),
      ].map((m) => m[1]!);
      const here = [...new Set(specs)].map((spec) => path.join(path.dirname(file), spec));
      return [...here, ...here.flatMap(statics)];
    };
    const loadedFirst = statics(BUNDLE);
    for (const chunk of loadedFirst) expect(fs.readFileSync(chunk, 'utf8'), path.basename(chunk)).not.to.match(/SERVICE_SECRET_KEY|function loadConfig/);
    // and the entry's body installs the handlers before main() loads the configuration
    expect(text.indexOf('process.on(signal')).to.be.within(0, text.indexOf('async function main'));
  });
});

describe('the server bundle: what may stay outside it', () => {
  const { dependencies } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  const importing = (input: string, spec: string) => ({
    inputs: { [input]: { bytes: 0, imports: [{ path: spec, kind: 'require-call' as const, external: true }] } },
  });

  it('a dependency of package.json, found where the bundled importer finds it', () => {
    expect(() => checkOutside(importing('node_modules/knex/lib/dialects/postgres/index.js', 'pg'), ROOT, dependencies)).not.to.throw();
    expect(() => checkOutside(importing('dist/src/plugins/loader.js', 'tsx/esm/api'), ROOT, dependencies)).not.to.throw();
  });

  it('refuses a package that is not a dependency (a bundled package would find it only where npm happened to hoist it)', () => {
    expect(() => checkOutside(importing('node_modules/docker-modem/lib/ssh.js', 'ssh2'), ROOT, dependencies)).to.throw(
      /node_modules\/docker-modem\/lib\/ssh\.js requires ssh2, which is not a dependency of package\.json/,
    );
  });

  it('refuses a dependency that the bundled importer finds as another copy', () => {
    // dockerode's own @grpc/proto-loader (another version) is nested under it
    const nested = path.join(ROOT, 'node_modules/dockerode/node_modules/@grpc/proto-loader/package.json');
    expect(fs.existsSync(nested), 'this tree nests a proto-loader under dockerode').to.equal(true);
    expect(() =>
      checkOutside(importing('node_modules/dockerode/lib/session.js', '@grpc/proto-loader'), ROOT, { ...dependencies, '@grpc/proto-loader': '*' }),
    ).to.throw(/requires its own copy of @grpc\/proto-loader/);
  });

  it('lets pass what is not installed at all (required only in a configuration the service never makes)', () => {
    expect(() => checkOutside(importing('node_modules/knex/lib/dialects/sqlite3/index.js', 'sqlite3'), ROOT, dependencies)).not.to.throw();
  });
});
