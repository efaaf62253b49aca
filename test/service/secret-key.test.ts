import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { adminAuth, ADMIN, basic, freshDatabase, startService, testEnv, type TestService } from '../support/service.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { capturingLogger, eventually } from '../sockets/helpers.js';
import { cli } from '../cli/helpers.js';
import { SecretsStore, STALE_MASTER_KEY } from '../../src/iam/secrets.js';
import { previousStepCode, totpCode } from '../auth/helpers.js';

const KEY = 'test-secret-key-0123456789abcdef0123456789';
const OTHER = 'another-secret-key-0123456789abcdef012345';
const NEW = 'the-rotated-secret-key-0123456789abcdef0123';
const STORED_SYSTEM_KEY = 'stored-system-key-0123456789abcdef0123456789';

/** The one line a refused CLI command writes (exit 1, nothing on stdout). */
function refusedWith(run: { code: number; stdout: string; stderr: string }, pattern: RegExp) {
  expect(run.code, run.stderr).to.equal(1);
  expect(run.stdout).to.equal('');
  expect(run.stderr.trimEnd().split('\n'), run.stderr).to.have.length(1);
  expect(run.stderr).to.match(pattern);
}

/**
 * Stores secrets sealed under `key` whatever the database's key is: what an instance of another
 * key wrote before the check existed (the store itself refuses to write under a key not the database's).
 */
async function storedUnder(svc: TestService, key: string, entries: Array<[namespace: string, name: string, value: string]>) {
  const store = new SecretsStore(svc.service.db, key);
  const rows = entries.map(([namespace, name, value]) => ({ namespace, key: name, ciphertext: store.seal(value), updated_at: Date.now() }));
  await svc.service.db('secrets').insert(rows).onConflict(['namespace', 'key']).merge();
}

/** Another instance on `first`'s database and data dir, with `key`, not waiting for its boot. */
function instanceWith(first: TestService, key: string, extra: Record<string, string> = {}, logger = capturingLogger('error').logger) {
  return startService({ dataDir: first.dataDir, databaseUrl: first.databaseUrl, env: { SERVICE_SECRET_KEY: key, ...extra }, wait: false, logger });
}

/**
 * The master key's check value (src/iam/master-key.ts): instances and CLI commands with another
 * key than the database's are refused, naming the problem and the fix; `rotate-secret-key`
 * changes the key, re-encrypting what was stored under the old one.
 */
describe('the master key: one per database', function () {
  this.timeout(90_000);

  describe('instances', () => {
    let redis: TestRedis;
    let a: TestService;
    const extra = () => ({ SERVICE_REDIS_URL: redis.url });

    before(async () => {
      redis = await startRedis();
      a = await startService({ env: extra() });
    });
    after(async () => {
      await a?.destroy();
      await redis?.stop();
    });

    it('an instance with another key refuses to start: the boot fails naming the key and the fix, /readyz and the API say so, and it leaves the bus', async () => {
      const logs = capturingLogger('error');
      const b = await instanceWith(a, OTHER, extra(), logs.logger);
      try {
        const failed = await b.service.booted().then(
          () => null,
          (err: Error) => err,
        );
        expect(failed?.message).to.match(/SERVICE_SECRET_KEY\) is not the one this database was set up with/);
        const ready = await request(b.url).get('/readyz').expect(503);
        expect(ready.body.reason).to.equal('boot_failed');
        expect(ready.body.error.message).to.match(/master key \(SERVICE_SECRET_KEY\) is not the one this database was set up with/);
        expect(ready.body.error.message).to.match(/service-core rotate-secret-key/);
        expect(ready.body.error.message).to.match(/docs\/deploy\.md/);
        const api = await request(b.url).get('/api/me').set('Authorization', adminAuth()).expect(503);
        expect(api.body.error.message).to.match(/not the one this database was set up with/);
        expect(logs.lines.map((l) => JSON.parse(l).msg)).to.include('boot failed');
        // it left the bus: it neither drops the others' messages (a change on the first goes over it) nor sends its own
        await eventually(() => b.service.bridge !== null && !b.service.bridge.isUp);
        await request(a.url)
          .post('/api/users')
          .set('Authorization', adminAuth())
          .send({ username: 'after-refusal', password: 'after-refusal-password', groups: ['INT_VIEWER'] })
          .expect(201);
        await new Promise((r) => setTimeout(r, 500));
        expect(b.service.bridge!.stats).to.deep.include({ received: 0, dropped: 0 });
        // the first instance serves on
        await request(a.url).get('/api/me').set('Authorization', adminAuth()).expect(200);
      } finally {
        await b.stop();
      }
    });

    it('an instance with the same key starts beside it', async () => {
      const b = await instanceWith(a, KEY, extra());
      try {
        await b.service.booted();
        await request(b.url).get('/readyz').expect(200);
        await request(b.url).get('/api/me').set('Authorization', adminAuth()).expect(200);
      } finally {
        await b.stop();
      }
    });
  });

  it('two first boots with different keys at once: exactly one starts, the other is refused', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-key-'));
    const db = await freshDatabase();
    // the schema first: the two boots race for the check value, not for the migrations
    expect((await cli(testEnv(dataDir, db.url), ['migrate'])).code).to.equal(0);
    const a = await startService({ dataDir, databaseUrl: db.url, wait: false, logger: capturingLogger('error').logger });
    const b = await instanceWith(a, OTHER);
    try {
      const outcomes = await Promise.allSettled([a.service.booted(), b.service.booted()]);
      expect(outcomes.map((o) => o.status).sort()).to.deep.equal(['fulfilled', 'rejected']);
      const refused = outcomes.find((o): o is PromiseRejectedResult => o.status === 'rejected')!;
      expect((refused.reason as Error).message).to.match(/not the one this database was set up with/);
    } finally {
      await b.stop();
      await a.stop();
      await db.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  describe('the CLI and the rotation', () => {
    let svc: TestService;
    const env = (key: string, extra: Record<string, string> = {}) => testEnv(svc.dataDir, svc.databaseUrl, { SERVICE_SECRET_KEY: key, ...extra });
    const restart = (key: string) => startService({ dataDir: svc.dataDir, databaseUrl: svc.databaseUrl, env: { SERVICE_SECRET_KEY: key } });

    beforeEach(async () => {
      svc = await startService();
    });
    afterEach(async () => svc?.destroy());

    /** A user with an authenticator app: its secret. */
    async function userWithApp(username: string): Promise<string> {
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', adminAuth())
        .send({ username, password: `${username}-password-1`, groups: ['INT_USER'] })
        .expect(201);
      const token = (
        await request(svc.url)
          .post('/api/auth/login')
          .send({ username, password: `${username}-password-1` })
          .expect(200)
      ).body.token;
      const secret = (await request(svc.url).post('/api/me/mfa/totp').set('Authorization', `Bearer ${token}`).expect(200)).body.secret as string;
      // the previous step's code: the current one is left for the sign-in after the rotation
      await request(svc.url)
        .post('/api/me/mfa/totp/confirm')
        .set('Authorization', `Bearer ${token}`)
        .send({ code: await previousStepCode(secret) })
        .expect(200);
      return secret;
    }

    /** Signs `username` in with the password and a current code of its app. */
    async function signInWithApp(url: string, username: string, secret: string) {
      const first = await request(url)
        .post('/api/auth/login')
        .send({ username, password: `${username}-password-1` })
        .expect(200);
      expect(first.body).to.include({ mfa_required: true });
      return request(url)
        .post('/api/auth/login/mfa')
        .send({ mfa_token: first.body.mfa_token, code: totpCode(secret) });
    }

    it('a CLI command with another key refuses, reading or writing, and writes nothing', async () => {
      expect((await cli(env(KEY), ['settings', 'set', 'system_api_key'], `${STORED_SYSTEM_KEY}\n`)).code).to.equal(0);
      await svc.stop();
      const mismatch = /master key \(SERVICE_SECRET_KEY\) is not the one this database was set up with: .*service-core rotate-secret-key/;
      refusedWith(await cli(env(OTHER), ['settings', 'get']), mismatch);
      refusedWith(await cli(env(OTHER), ['user', 'list']), mismatch);
      refusedWith(await cli(env(OTHER), ['settings', 'set', 'scm_webhook_secret'], 'webhook-secret-1234\n'), mismatch);
      refusedWith(await cli(env(OTHER), ['rotate-secret-key'], `${NEW}\n`), mismatch);
      const json = await cli(env(OTHER), ['--json', 'settings', 'get']);
      expect(json.code).to.equal(1);
      expect(JSON.parse(json.stderr).error.code).to.equal('conflict');
      // nothing was written under the other key: the database's key reads it all
      const shown = (await cli(env(KEY), ['--json', 'settings', 'get'])).json().settings;
      expect(shown.system_api_key).to.include({ source: 'store', configured: true });
      expect(shown.scm_webhook_secret).to.include({ source: 'default', configured: false });
    });

    it('a database set up before the check (secrets, no check value) takes only the key its secrets open under', async () => {
      expect((await cli(env(KEY), ['settings', 'set', 'system_api_key'], `${STORED_SYSTEM_KEY}\n`)).code).to.equal(0);
      await svc.service.db('secret_key_check').delete();
      await svc.stop();
      refusedWith(
        await cli(env(OTHER), ['settings', 'get']),
        /opens 0 of the \d+ secrets stored in this database: it was set up with another key.*--old-key-lost/,
      );
      const refused = await instanceWith(svc, OTHER);
      try {
        expect(
          await refused.service.booted().then(
            () => '',
            (err: Error) => err.message,
          ),
        ).to.match(/opens 0 of the \d+ secrets/);
      } finally {
        await refused.stop();
      }
      // the right key is taken (and recorded) at its next start
      const again = await restart(KEY);
      try {
        await request(again.url).get('/api/me').set('X-API-Key', STORED_SYSTEM_KEY).expect(200);
        const recorded = await again.service.db('secret_key_check').count({ n: '*' }).first();
        expect(Number(recorded?.n)).to.equal(1);
      } finally {
        await again.stop();
      }
    });

    it('rotate-secret-key re-encrypts the stored secrets and authenticator apps and carries the bootstrap record; the old key is refused after', async () => {
      expect((await cli(env(KEY), ['settings', 'set', 'system_api_key'], `${STORED_SYSTEM_KEY}\n`)).code).to.equal(0);
      const secret = await userWithApp('carol');
      // the admin's password changed since the environment's was applied: it must stay so across the rotation
      expect((await cli(env(KEY), ['user', 'set-password', 'admin'], 'admin-changed-password-1\n')).code).to.equal(0);
      await svc.stop();

      // a new key that is too short is refused before anything is done
      const short = await cli(env(KEY), ['rotate-secret-key'], 'short-key\n');
      expect(short.code).to.equal(2);
      expect(short.stderr).to.match(/32 characters/);
      const run = await cli(env(KEY), ['--json', 'rotate-secret-key'], `${NEW}\n`);
      expect(run.code, run.stderr).to.equal(0);
      expect(run.stderr).to.equal('');
      expect(run.json()).to.deep.include({
        key: 'SERVICE_SECRET_KEY',
        old_key_lost: false,
        totp_reencrypted: 1,
        settings_dropped: [],
        totp_unreadable: [],
        bootstrap_not_carried: [],
      });
      // the system key, and the admin's and bot's password records
      expect(run.json().settings_reencrypted).to.equal(3);

      const refused = await instanceWith(svc, KEY);
      try {
        expect(
          await refused.service.booted().then(
            () => '',
            (err: Error) => err.message,
          ),
        ).to.match(/not the one this database was set up with/);
      } finally {
        await refused.stop();
      }
      refusedWith(await cli(env(KEY), ['user', 'list']), /not the one this database was set up with/);

      const rotated = await restart(NEW);
      try {
        await request(rotated.url).get('/api/me').set('X-API-Key', STORED_SYSTEM_KEY).expect(200);
        const done = await signInWithApp(rotated.url, 'carol', secret);
        expect(done.status, JSON.stringify(done.body)).to.equal(200);
        expect(done.body.token).to.be.a('string');
        // the environment's admin password was not applied again: its record came along
        await request(rotated.url).get('/api/me').set('Authorization', basic('admin', 'admin-changed-password-1')).expect(200);
        await request(rotated.url).get('/api/me').set('Authorization', basic('admin', ADMIN.password)).expect(401);
        const events = (await request(rotated.url).get('/api/audit?action=secret_key.rotated').set('X-API-Key', STORED_SYSTEM_KEY).expect(200)).body.events;
        expect(events).to.have.length(1);
        expect(events[0]).to.deep.include({ outcome: 'success', target: { type: 'secret_key', id: null, name: null } });
        expect(events[0].actor.username).to.equal('cli');
        expect(events[0].details).to.deep.equal({ settings_reencrypted: 3, totp_reencrypted: 1, old_key_lost: false });
        expect(JSON.stringify(events[0])).not.to.contain(NEW);
      } finally {
        await rotated.stop();
      }
    });

    it('rotate-secret-key refuses a stored secret that does not open under the current key, and deletes it with --drop-unreadable', async () => {
      // what an instance with another key wrote before the check existed
      await storedUnder(svc, OTHER, [['core/settings', 'scm_webhook_secret', 'written-under-another-key']]);
      await svc.stop();
      refusedWith(
        await cli(env(KEY), ['rotate-secret-key'], `${NEW}\n`),
        /1 stored secret \(core\/settings\/scm_webhook_secret\) did not open under the current key: .*--drop-unreadable/,
      );
      // refused as a whole: the database still has the old key
      refusedWith(await cli(env(NEW), ['user', 'list']), /not the one this database was set up with/);
      const run = await cli(env(KEY), ['--json', 'rotate-secret-key', '--drop-unreadable'], `${NEW}\n`);
      expect(run.code, run.stderr).to.equal(0);
      expect(run.json()).to.deep.include({ settings_reencrypted: 2, settings_dropped: ['core/settings/scm_webhook_secret'] });
      expect(JSON.parse(run.stderr.trim()).warning).to.match(/deleted 1 stored secret that did not open \(core\/settings\/scm_webhook_secret\)/);
      expect((await cli(env(NEW), ['user', 'list'])).code).to.equal(0);
    });

    it('an instance left running through a rotation writes no secret under the old key and says to restart; a secret under another key is named at the next start and by settings get', async () => {
      // an authenticator app enrolled before the rotation
      await userWithApp('tina');
      expect((await cli(env(KEY), ['rotate-secret-key'], `${NEW}\n`)).code).to.equal(0);
      // the instance left running with the old key: what it saved now nobody could read after its restart
      const refused = await request(svc.url)
        .put('/api/settings/webhook-secret')
        .set('Authorization', adminAuth())
        .send({ secret: 'set-on-a-stale-instance-1' })
        .expect(409);
      expect(refused.body.error.message).to.equal(STALE_MASTER_KEY);
      const token = (await request(svc.url).post('/api/auth/login').send({ username: ADMIN.username, password: ADMIN.password }).expect(200)).body.token;
      const enrol = await request(svc.url).post('/api/me/mfa/totp').set('Authorization', `Bearer ${token}`).expect(409);
      expect(enrol.body.error.message).to.equal(STALE_MASTER_KEY);
      // its webhook health says to restart it, not to set the secrets again
      const stale = (await request(svc.url).get('/api/notifications/webhook/scm/health').set('Authorization', adminAuth()).expect(200)).body;
      expect(stale.warnings).to.deep.equal([STALE_MASTER_KEY]);
      // secrets written under the old key some other way (before the check existed, say)
      await storedUnder(svc, KEY, [
        ['core/settings', 'scm_webhook_secret', 'written-under-the-old-key'],
        ['core/settings', 'scm_webhook_secret_github', 'github-under-the-old-key'],
        ['core/auth', 'ldap_url', JSON.stringify('ldap://old.example.org')],
      ]);
      const tina = await svc.service.db('users').where({ username: 'tina' }).first('id');
      await svc.service
        .db('mfa_factors')
        .where({ user_id: tina.id, kind: 'totp' })
        .update({ secret: new SecretsStore(svc.service.db, KEY).seal('JBSWY3DPEHPK3PXP') });
      await svc.stop();
      const logs = capturingLogger('warn');
      const restarted = await startService({ dataDir: svc.dataDir, databaseUrl: svc.databaseUrl, env: { SERVICE_SECRET_KEY: NEW }, logger: logs.logger });
      try {
        const line = logs.lines.map((l) => JSON.parse(l)).find((l) => /do not open under the current master key/.test(l.msg));
        expect(line, logs.text()).to.not.equal(undefined);
        expect(line.secrets).to.deep.equal(['core/auth/ldap_url', 'core/settings/scm_webhook_secret', 'core/settings/scm_webhook_secret_github']);
        // the webhook's health (and the integrations page) says it too, with what it means for the
        // forge: to the settings' administrators, not to anyone who asks
        const health = (await request(restarted.url).get('/api/notifications/webhook/scm/health').set('Authorization', adminAuth()).expect(200)).body;
        expect(health.warnings).to.deep.equal([
          'scm_webhook_secret is stored but does not open under the current master key (written under another one): it reads as unset; set it again',
          "scm_webhook_secret_github is stored but does not open under the current master key (written under another one): it reads as unset, and GitHub's deliveries are refused (no shared secret either); set it again",
        ]);
        expect((await request(restarted.url).get('/api/notifications/webhook/scm/health').expect(200)).body.warnings).to.deep.equal([]);
        expect(line.authenticator_apps_of).to.deep.equal(['tina']);
        expect(logs.text()).not.to.include('written-under-the-old-key');
      } finally {
        await restarted.stop();
      }
      const shown = await cli(env(NEW), ['--json', 'settings', 'get']);
      expect(shown.code, shown.stderr).to.equal(0);
      expect(shown.json().settings.scm_webhook_secret).to.include({ source: 'default', configured: false });
      const warnings = shown.stderr
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).warning);
      expect(warnings).to.deep.equal([
        'ldap_url is stored but does not open under the current master key (written under another one): it reads as unset until set again',
        'scm_webhook_secret is stored but does not open under the current master key (written under another one): it reads as unset until set again',
        'scm_webhook_secret_github is stored but does not open under the current master key (written under another one): it reads as unset until set again',
      ]);
      // one the environment sets is not read at all: nothing to say of the stored copy
      const locked = await cli(env(NEW, { SERVICE_SCM_WEBHOOK_SECRET: 'env-webhook-secret-1' }), ['settings', 'get', 'scm_webhook_secret']);
      expect(locked.code, locked.stderr).to.equal(0);
      expect(locked.stderr).to.equal('');
      // set again, it is read, and nothing is said
      expect((await cli(env(NEW), ['settings', 'set', 'scm_webhook_secret'], 'webhook-secret-again-1\n')).code).to.equal(0);
      expect((await cli(env(NEW), ['settings', 'get', 'scm_webhook_secret'])).stderr).to.equal('');
    });

    it('rotate-secret-key --generate replaces secret.key where the key lives there', async () => {
      await svc.stop();
      // the key in the data dir, as the service generates it when SERVICE_SECRET_KEY is unset
      const keyFile = path.join(svc.dataDir, 'secret.key');
      const generated = await startService({ dataDir: svc.dataDir, databaseUrl: svc.databaseUrl, env: { SERVICE_SECRET_KEY: '' } }).catch((err: Error) => err);
      // the database was set up with KEY: the generated one is refused like any other
      expect((generated as Error).message).to.match(/\/secret\.key\) is not the one this database was set up with/);
      fs.writeFileSync(keyFile, KEY + '\n', { mode: 0o600 });
      const fileEnv = env('');
      expect((await cli(fileEnv, ['settings', 'set', 'system_api_key'], `${STORED_SYSTEM_KEY}\n`)).code).to.equal(0);
      const both = await cli(fileEnv, ['rotate-secret-key', '--generate', '--old-key-lost']);
      expect(both.code).to.equal(2);
      expect(both.stderr).to.match(/--generate: not with --old-key-lost/);
      const run = await cli(fileEnv, ['rotate-secret-key', '--generate']);
      expect(run.code, run.stderr).to.equal(0);
      expect(run.stdout).to.include(`${keyFile} holds it`);
      const now = fs.readFileSync(keyFile, 'utf8').trim();
      expect(now).to.not.equal(KEY);
      expect(now.length).to.be.at.least(32);
      expect(fs.statSync(keyFile).mode & 0o777).to.equal(0o600);
      expect(fs.existsSync(`${keyFile}.new`)).to.equal(false);
      // with the key in the environment, --generate is refused: the new one comes on stdin
      const inEnv = await cli(env(now), ['rotate-secret-key', '--generate']);
      expect(inEnv.code).to.equal(2);
      expect(inEnv.stderr).to.match(/SERVICE_SECRET_KEY: give the new one on stdin/);
      const back = await startService({ dataDir: svc.dataDir, databaseUrl: svc.databaseUrl, env: { SERVICE_SECRET_KEY: '' } });
      try {
        await request(back.url).get('/api/me').set('X-API-Key', STORED_SYSTEM_KEY).expect(200);
      } finally {
        await back.stop();
      }
    });

    it('with the old key lost, --old-key-lost makes the configured key the database key: the stored secrets are gone, the apps named', async () => {
      expect((await cli(env(KEY), ['settings', 'set', 'system_api_key'], `${STORED_SYSTEM_KEY}\n`)).code).to.equal(0);
      await userWithApp('dave');
      await svc.stop();
      // the key the database has is not lost: nothing to do
      refusedWith(await cli(env(KEY), ['rotate-secret-key', '--old-key-lost']), /is the database's: nothing is lost/);
      const run = await cli(env(OTHER), ['--json', 'rotate-secret-key', '--old-key-lost']);
      expect(run.code, run.stderr).to.equal(0);
      expect(run.json()).to.deep.include({ old_key_lost: true, settings_reencrypted: 0, totp_reencrypted: 0, totp_unreadable: ['dave'] });
      expect(run.json().settings_dropped).to.include('core/settings/system_api_key');
      expect(run.stderr).to.match(/dave.*recovery code/);
      const adopted = await restart(OTHER);
      try {
        await request(adopted.url).get('/api/me').set('X-API-Key', STORED_SYSTEM_KEY).expect(401);
        await request(adopted.url).get('/readyz').expect(200);
      } finally {
        await adopted.stop();
      }
    });
  });
});
