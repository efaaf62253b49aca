import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import request from 'supertest';
import { adminAuth, freshDatabase, PG_URL, startService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';

const modeOf = (file: string) => fs.statSync(file).mode & 0o777;

/** The SQLite files in `dir` (none on PostgreSQL), with their modes. */
const sqliteModes = (dir: string) =>
  Object.fromEntries(
    fs
      .readdirSync(dir)
      .filter((f) => f.startsWith('service.sqlite'))
      .map((f) => [f, modeOf(path.join(dir, f))]),
  );

/**
 * The data dir holds the master key and the database (password hashes, encrypted secrets):
 * no other local user may read them.
 */
describe('data dir modes', function () {
  this.timeout(30_000);
  let parent: string;

  beforeEach(() => {
    parent = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-datadir-'));
  });
  afterEach(() => fs.rmSync(parent, { recursive: true, force: true }));

  for (const key of ['in the environment', 'generated']) {
    it(`a fresh service (master key ${key}) makes its data dir 0700 and the database, -wal and -shm 0600`, async () => {
      const dataDir = path.join(parent, 'data');
      const svc = await startService({ dataDir, env: key === 'generated' ? { SERVICE_SECRET_KEY: '' } : {} });
      try {
        // a write, so the write-ahead log holds something
        await request(svc.url).post('/api/notifications').set('Authorization', adminAuth()).send({ title: 't', message: 'm' }).expect(202);
        expect(modeOf(dataDir)).to.equal(0o700);
        if (key === 'generated') expect(modeOf(path.join(dataDir, 'secret.key'))).to.equal(0o600);
        const files = sqliteModes(dataDir);
        expect(files).to.deep.equal(svc.databaseUrl ? {} : { 'service.sqlite': 0o600, 'service.sqlite-wal': 0o600, 'service.sqlite-shm': 0o600 });
      } finally {
        await svc.destroy();
      }
    });
  }

  it('an existing data dir open to others is set to 0700 with one warning, and older database files to 0600', async () => {
    const dataDir = path.join(parent, 'data');
    fs.mkdirSync(dataDir);
    fs.chmodSync(dataDir, 0o755);
    if (!PG_URL) {
      // the database as an older release left it, readable by everyone
      const file = path.join(dataDir, 'service.sqlite');
      const old = new BetterSqlite3(file);
      old.exec('create table left_behind (x integer)');
      old.close();
      fs.chmodSync(file, 0o644);
    }
    const db = await freshDatabase();
    try {
      const first = capturingLogger('warn');
      const svc = await startService({ dataDir, databaseUrl: db.url, logger: first.logger });
      try {
        expect(Object.keys(sqliteModes(dataDir))).to.have.length(db.url ? 0 : 3);
        expect(modeOf(dataDir)).to.equal(0o700);
        for (const [f, mode] of Object.entries(sqliteModes(dataDir))) expect(mode, f).to.equal(0o600);
        const warnings = first.lines.map((l) => JSON.parse(l)).filter((l) => /data dir/.test(l.msg));
        expect(warnings).to.have.length(1);
        expect(warnings[0]).to.include({ level: 'warn', data_dir: dataDir });
        expect(warnings[0].msg).to.include('0755');
      } finally {
        await svc.stop();
      }
      // once: the next start finds it private
      const second = capturingLogger('warn');
      const again = await startService({ dataDir, databaseUrl: db.url, logger: second.logger });
      try {
        expect(second.text()).not.to.match(/data dir/);
        expect(modeOf(dataDir)).to.equal(0o700);
      } finally {
        await again.stop();
      }
    } finally {
      await db.drop();
    }
  });
});
