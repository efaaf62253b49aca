import type { Knex } from 'knex';
import { ensureSchema, type TableDef } from '../src/db/schema.js';

/**
 * Plugin state: one row per plugin id the host has seen. `enabled` is the administrator's
 * choice and survives restarts; `state` and `error` are what the last load found
 * (loaded | degraded | failed | disabled).
 */
export const pluginTables: TableDef[] = [
  {
    name: 'plugins',
    columns: {
      id: (t) => t.string('id', 128).primary(),
      enabled: (t) => t.boolean('enabled').notNullable().defaultTo(true),
      version: (t) => t.string('version', 64).nullable(),
      state: (t) => t.string('state', 16).notNullable().defaultTo('failed'),
      error: (t) => t.text('error').nullable(),
      updated_at: (t) => t.bigInteger('updated_at').notNullable().defaultTo(0),
    },
  },
];

export async function up(knex: Knex): Promise<void> {
  await ensureSchema(knex, pluginTables);
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
