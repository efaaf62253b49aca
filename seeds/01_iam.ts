import os from 'node:os';
import type { Knex } from 'knex';
import { loadConfig } from '../src/config.js';
import { migrateLatest } from '../src/db/migrate.js';
import { buildCore } from '../src/core.js';
import { CLI_ACTOR } from '../src/iam/policy.js';
import { EventBus } from '../src/bus/bus.js';
import { createLogger } from '../src/log.js';

/**
 * The seeding of `service-core seed`, after the same migrations and on the same core: what is
 * missing is created, no existing account's roles change (the environment's superadmin flag is
 * the service boot's), and each change is an audit event by `cli`.
 */
export async function seed(knex: Knex): Promise<void> {
  await migrateLatest(knex);
  const config = loadConfig(process.env, { writeFiles: false });
  const log = createLogger('warn');
  const core = buildCore({ config, db: knex, bus: new EventBus(log), log, instanceId: `knex-seed:${os.hostname()}:${process.pid}`, passwordThreads: 0 });
  try {
    await core.iam.seed('command', CLI_ACTOR);
  } finally {
    core.auth.stop();
    await core.iam.stop();
  }
}
