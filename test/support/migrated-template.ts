/**
 * `node --import tsx test/support/migrated-template.ts URL NAME`: creates the database NAME on
 * the PostgreSQL server of URL and applies every migration to it (scripts/test.sh, before the
 * suite). The in-process test services are then given copies of it (freshDatabase in
 * test/support/service.ts, SERVICE_TEST_MIGRATED_TEMPLATE) instead of migrating a database of
 * their own each: on PostgreSQL that is half a second of CPU per service, a hundred times a
 * run. The services still run their migrations at boot and find none pending; an empty
 * database's first boot is what the spawned services, the CLI tests and the migration tests see.
 */
import knex from 'knex';
import { createDb } from '../../src/db/knex.js';
import { migrateLatest } from '../../src/db/migrate.js';

const [url, name] = process.argv.slice(2);
if (!url || !name) {
  console.error('usage: migrated-template.ts POSTGRES_URL NAME');
  process.exit(2);
}
const admin = knex({ client: 'pg', connection: url, pool: { min: 0, max: 1 } });
await admin.raw('CREATE DATABASE ??', [name]);
await admin.destroy();
const target = new URL(url);
target.pathname = `/${name}`;
const db = createDb({ databaseUrl: target.toString(), dataDir: '' });
await migrateLatest(db);
await db.destroy();
