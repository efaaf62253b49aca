import type { Knex } from 'knex';
import { loadConfig } from '../src/config.js';
import { migrateLatest } from '../src/db/migrate.js';
import { seedIam } from '../src/iam/seed.js';
import { AuditTrail } from '../src/iam/audit.js';
import { CLI_ACTOR } from '../src/iam/policy.js';
import { CommandPath } from '../src/iam/commands.js';
import { EventBus } from '../src/bus/bus.js';
import { createLogger } from '../src/log.js';

/**
 * The seeding of `service-core seed`, after the same migrations: what is missing is created,
 * no existing account's roles change (the environment's superadmin flag is the service boot's),
 * and each change is an audit event by `cli`.
 */
export async function seed(knex: Knex): Promise<void> {
  await migrateLatest(knex);
  const config = loadConfig(process.env, { writeFiles: false });
  const log = createLogger('warn');
  const audit = new AuditTrail({ db: knex, bus: new EventBus(log), log });
  await seedIam(knex, config, { mode: 'command', actor: CLI_ACTOR, commands: new CommandPath(audit) });
}
