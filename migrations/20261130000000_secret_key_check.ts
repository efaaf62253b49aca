import type { Knex } from 'knex';
import { ensureSchema, type TableDef } from '../src/db/schema.js';

/**
 * The master key's check value (src/iam/master-key.ts): one row, written by the first boot that
 * finds none, so an instance or a CLI with another SERVICE_SECRET_KEY is refused instead of
 * reading the stored secrets as missing. An HMAC of a fixed label under a key derived from the
 * master key, never the key.
 */
export const secretKeyCheckTables: TableDef[] = [
  {
    name: 'secret_key_check',
    columns: {
      id: (t) => t.integer('id').primary(),
      check_value: (t) => t.string('check_value', 64).notNullable(),
      created_at: (t) => t.bigInteger('created_at').notNullable().defaultTo(0),
      rotated_at: (t) => t.bigInteger('rotated_at').nullable(),
    },
  },
];

export async function up(knex: Knex): Promise<void> {
  await ensureSchema(knex, secretKeyCheckTables);
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
