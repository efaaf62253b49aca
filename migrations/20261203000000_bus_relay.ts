import type { Knex } from 'knex';
import { ensureSchema, type TableDef } from '../src/db/schema.js';

/**
 * `bus_relay`: the cluster-wide bus events of the CLI run without SERVICE_REDIS_URL, for the
 * running instances without Redis to read within about a second (src/bus/database-relay.ts).
 * The writers keep the newest 10,000 rows.
 */
export const busRelayTables: TableDef[] = [
  {
    name: 'bus_relay',
    columns: {
      id: (t) => t.increments('id').primary(),
      event: (t) => t.string('event', 64).notNullable(),
      payload: (t) => t.text('payload').notNullable(),
      origin: (t) => t.string('origin', 200).notNullable(),
      created_at: (t) => t.bigInteger('created_at').notNullable().defaultTo(0),
    },
    indexes: [{ name: 'bus_relay_created', columns: ['created_at'] }],
  },
];

export async function up(knex: Knex): Promise<void> {
  await ensureSchema(knex, busRelayTables);
}

// additive migrations are never rolled back
export async function down(): Promise<void> {}
