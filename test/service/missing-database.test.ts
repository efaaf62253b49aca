import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import knex from 'knex';
import request from 'supertest';
import { loadConfig } from '../../src/config.js';
import { Service } from '../../src/service.js';
import { createLogger } from '../../src/log.js';
import { testEnv, PG_URL, adminAuth } from '../support/service.js';
import { trackDatabase } from '../support/leftovers.js';
import { cli } from '../cli/helpers.js';
import { eventually } from '../plugins/helpers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The run's PostgreSQL server, or the local one (a missing database is PostgreSQL's case). */
const SERVER = PG_URL || 'postgres://postgres@127.0.0.1:5432/postgres';

describe('a PostgreSQL database that does not exist', () => {
  it('is named by /readyz and the retry log, refused by migrate without --create-database, created by it; the service then boots', async function () {
    this.timeout(30000);
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-missing-db-'));
    const name = `svc_t_missing_${crypto.randomBytes(4).toString('hex')}`;
    // trust auth ignores the password: it is here to be hidden everywhere
    const password = `pw-${crypto.randomBytes(6).toString('hex')}`;
    const u = new URL(SERVER);
    u.pathname = `/${name}`;
    u.password = password;
    const databaseUrl = u.toString();
    const admin = knex({ client: 'pg', connection: SERVER, pool: { min: 0, max: 1 } });
    const lines: string[] = [];
    const log = createLogger('warn', { write: (s: string) => void lines.push(s) } as any);
    const env = testEnv(dataDir, databaseUrl);
    const service = new Service(loadConfig(env), { logger: log, dbRetryMs: 100 });
    try {
      await service.start();
      await sleep(300);
      const ready = await request(service.url).get('/readyz').expect(503);
      expect(ready.body.reason).to.equal('database_unavailable');
      expect(ready.body.error.message).to.contain(`database "${name}" does not exist`);
      expect(JSON.stringify(ready.body)).not.to.contain(password);
      const retry = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'database unreachable, retrying');
      expect(retry.reason).to.contain('does not exist');
      expect(retry.hint).to.contain(`createdb ${name}`).and.to.contain('service-core migrate --create-database');

      const refused = await cli(env, ['migrate']);
      expect(refused.code).to.equal(1);
      expect(refused.stderr).to.contain(`postgres://postgres:***@`).and.to.contain(`/${name}`).and.to.contain('--create-database');
      expect(refused.stderr).not.to.contain(password);

      trackDatabase(SERVER, name);
      const made = await cli(env, ['--json', 'migrate', '--create-database']);
      expect(made.code, made.stderr).to.equal(0);
      expect(made.json().created_database).to.equal(name);
      // the migrations ran: by this command, or by the service (retrying every 100 ms) the moment the database existed
      expect(made.json().applied).to.be.an('array');
      await eventually(async () => {
        const migrated = knex({ client: 'pg', connection: databaseUrl, pool: { min: 0, max: 1 } });
        try {
          expect(Number((await migrated('knex_migrations').count({ n: '*' }))[0]!.n)).to.be.greaterThan(0);
        } finally {
          await migrated.destroy();
        }
      }, 10_000);
      // a second run finds it there
      expect((await cli(env, ['--json', 'migrate', '--create-database'])).json()).to.deep.equal({ applied: [] });

      await service.booted();
      await request(service.url).get('/readyz').expect(200);
      await request(service.url).get('/api/me').set('Authorization', adminAuth()).expect(200);
      expect(lines.join('\n')).not.to.contain(password);
    } finally {
      await service.stop();
      await admin.raw(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await admin.destroy();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
