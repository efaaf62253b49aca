import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { READY_TIMEOUT_MS, spawnService, type ServiceProcess } from '../support/process.js';
import { AT_START, loadedAtFirstUse } from '../../scripts/bundle-server.mjs';
import { ADMIN, basic, freshDatabase, type TestDb } from '../support/service.js';
import { startSlapd, type Slapd } from '../support/slapd.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const BUNDLE = path.join(ROOT, 'dist/server/main.js');

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
    expect([...AT_START].filter((name) => !inside.has(name))).to.deep.equal([]);
    expect(inside).to.include.keys('knex', 'joi', 'objection');
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
