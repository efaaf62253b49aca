/**
 * `node --import tsx test/support/migrated-template.ts [--postgres URL NAME] [--sqlite FILE]`:
 * databases with every migration applied, made by scripts/test.sh before the suite: NAME on
 * the PostgreSQL server of URL, and the SQLite file FILE. The in-process test services are
 * given copies of them (startService and freshDatabase in test/support/service.ts,
 * SERVICE_TEST_MIGRATED_TEMPLATE and SERVICE_TEST_MIGRATED_SQLITE) instead of migrating a
 * database of their own each: on PostgreSQL that is half a second of CPU per service, on SQLite
 * a quarter of what a start costs, hundreds of times a run. The services still run their
 * migrations at boot and find none pending; an empty database's first boot is what the spawned
 * services, the CLI tests and the migration tests see.
 */
import knex from 'knex';
import { createDb } from '../../src/db/knex.js';
import { migrateLatest } from '../../src/db/migrate.js';

const args = process.argv.slice(2);
const usage = (): never => {
  console.error('usage: migrated-template.ts [--postgres URL NAME] [--sqlite FILE]');
  process.exit(2);
};
if (!args.length) usage();
// an option's values are the words after it that are not options themselves
const values = (n: number) => (args.length >= n && !args.slice(0, n).some((a) => a.startsWith('--')) ? args.splice(0, n) : usage());
while (args.length) {
  const option = args.shift();
  if (option === '--postgres') {
    const [url, name] = values(2) as [string, string];
    const admin = knex({ client: 'pg', connection: url, pool: { min: 0, max: 1 } });
    await admin.raw('CREATE DATABASE ??', [name]);
    await admin.destroy();
    const target = new URL(url);
    target.pathname = `/${name}`;
    await migrate(target.toString());
  } else if (option === '--sqlite') {
    await migrate(`sqlite://${values(1)[0]!}`);
  } else usage();
}

async function migrate(databaseUrl: string): Promise<void> {
  const db = createDb({ databaseUrl, dataDir: '' });
  await migrateLatest(db);
  // closed: SQLite writes its WAL back into the file, which is then all a copy needs
  await db.destroy();
}
