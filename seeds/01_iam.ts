import type { Knex } from 'knex';
import { loadConfig } from '../src/config.js';
import { seedIam } from '../src/iam/seed.js';

/** The same idempotent seeding the service runs at boot. */
export async function seed(knex: Knex): Promise<void> {
  await seedIam(knex, loadConfig(process.env));
}
