import type { Knex } from 'knex';
import { loadConfig } from '../src/config.js';
import { migrateLatest } from '../src/db/migrate.js';
import { seedIam } from '../src/iam/seed.js';

/** The same idempotent seeding the service runs at boot, after the same migrations. */
export async function seed(knex: Knex): Promise<void> {
  await migrateLatest(knex);
  await seedIam(knex, loadConfig(process.env, { writeFiles: false }));
}
