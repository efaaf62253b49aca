import { expect } from 'chai';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Knex } from 'knex';
import { ADDRESS_RULE, LoginLockout } from '../../src/auth/lockout.js';
import { onPostgres, type DbSettings } from '../../src/db/knex.js';
import { migratedDb } from '../support/service.js';

const SLOW_ADDRESS = '192.0.2.1';
const SLOW_MS = 300;

/**
 * Makes the first attempt recorded for SLOW_ADDRESS slow to land (a trigger that waits inside
 * its INSERT, after its id is drawn and before it commits), as a commit under load can be: the
 * attempts after it must not count past it.
 */
async function slowFirstRecord(db: Knex): Promise<void> {
  if (onPostgres(db)) {
    await db.raw('CREATE SEQUENCE slow_first_record');
    await db.raw(`CREATE FUNCTION slow_first_record() RETURNS trigger AS $$
      BEGIN
        IF NEW.ip = '${SLOW_ADDRESS}' AND nextval('slow_first_record') = 1 THEN PERFORM pg_sleep(${SLOW_MS / 1000}); END IF;
        RETURN NEW;
      END $$ LANGUAGE plpgsql`);
    await db.raw('CREATE TRIGGER slow_first_record BEFORE INSERT ON login_failures FOR EACH ROW EXECUTE FUNCTION slow_first_record()');
    return;
  }
  // SQLite: one connection, the trigger calls a function of it (which holds the whole process)
  const conn = (await db.client.acquireConnection()) as { function(name: string, fn: () => number): void };
  let first = true;
  conn.function('slow_first_record', () => {
    if (first) {
      first = false;
      const until = Date.now() + SLOW_MS;
      while (Date.now() < until);
    }
    return 0;
  });
  await db.client.releaseConnection(conn);
  await db.raw(`CREATE TRIGGER slow_first_record BEFORE INSERT ON login_failures WHEN NEW.ip = '${SLOW_ADDRESS}' BEGIN SELECT slow_first_record(); END`);
}

/**
 * The login lockout on the run's database (PostgreSQL when the run has one): what it admits
 * when the attempts of one pair come all at once, through a pool of connections and from two
 * instances.
 */
describe("login lockout on the run's database", function () {
  this.timeout(30_000);
  let db: Knex;
  let drop: () => Promise<void>;

  before(async () => {
    ({ db, drop } = await migratedDb());
  });
  after(async () => {
    await drop?.();
  });

  it('a burst of parallel attempts of one pair admits five, whatever connections they run on', async () => {
    const lockout = new LoginLockout(db);
    for (let round = 0; round < 5; round++) {
      const ip = `203.0.113.${round}`;
      const answers = await Promise.all(Array.from({ length: 100 }, () => lockout.begin('burst', ip)));
      expect(
        answers.filter((wait) => wait === 0),
        `round ${round}`,
      ).to.have.length(ADDRESS_RULE.max);
      expect(answers.filter((wait) => wait > 0).every((wait) => wait >= 1 && wait <= 60)).to.equal(true);
      expect(Number((await db('login_failures').where({ ip }).count({ n: '*' }).first())?.n)).to.equal(ADDRESS_RULE.max);
    }
  });

  it('an attempt whose record is slow to land (its id drawn, not yet committed) is counted by those after it', async () => {
    await slowFirstRecord(db);
    let answers: number[];
    try {
      const lockout = new LoginLockout(db);
      const first = lockout.begin('slow', SLOW_ADDRESS);
      // the others come while the first one's record is on its way
      await new Promise((r) => setTimeout(r, SLOW_MS / 3));
      const rest = await Promise.all(Array.from({ length: 11 }, () => lockout.begin('slow', SLOW_ADDRESS)));
      answers = [await first, ...rest];
    } finally {
      await db.raw(onPostgres(db) ? 'DROP TRIGGER slow_first_record ON login_failures' : 'DROP TRIGGER slow_first_record');
    }
    expect(answers.filter((wait) => wait === 0)).to.have.length(ADDRESS_RULE.max);
    expect(Number((await db('login_failures').where({ ip: SLOW_ADDRESS }).count({ n: '*' }).first())?.n)).to.equal(ADDRESS_RULE.max);
  });

  it('two instances (a second connection on another thread) admit five between them', async () => {
    const config = db.client.config as { connection: { connectionString?: string; filename?: string } };
    const settings: DbSettings = config.connection.connectionString
      ? { databaseUrl: config.connection.connectionString, dataDir: os.tmpdir() }
      : { databaseUrl: null, dataDir: path.dirname(config.connection.filename!) };
    const attempt = { username: 'two-instances', ip: '198.51.100.7' };
    // a worker thread starts without the test run's TypeScript loader: it registers tsx's first
    const entry = pathToFileURL(path.join(import.meta.dirname, 'lockout-worker.ts')).href;
    const worker = new Worker(`import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(entry)}); })`, {
      eval: true,
      workerData: { settings, attempts: 50, ...attempt },
    });
    const theirs = new Promise<number[]>((resolve, reject) => worker.once('message', resolve).once('error', reject));
    const lockout = new LoginLockout(db);
    const ours = await Promise.all(Array.from({ length: 50 }, () => lockout.begin(attempt.username, attempt.ip)));
    const answers = [...ours, ...(await theirs)];
    expect(answers).to.have.length(100);
    expect(answers.filter((wait) => wait === 0)).to.have.length(ADDRESS_RULE.max);
  });
});
