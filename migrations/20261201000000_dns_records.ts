import type { Knex } from 'knex';
import { ensureSchema, type TableDef } from '../src/db/schema.js';

/**
 * `dns_records`: the DNS records the service added to Unbound (src/sockets/dns/), the truth it
 * puts back when Unbound restarts or reloads (Unbound keeps what remote control added in memory
 * only). One row per record: name (lower case, trailing dot), type, data in its canonical form,
 * ttl, the owner that made it (e.g. a DHCP reservation; null: added through dns:record_add) and
 * when. (name, type, data) is unique: the same record added twice, by any instance, is one row.
 */
export const dnsTables: TableDef[] = [
  {
    name: 'dns_records',
    columns: {
      id: (t) => t.increments('id').primary(),
      name: (t) => t.string('name', 255).notNullable(),
      type: (t) => t.string('type', 8).notNullable(),
      data: (t) => t.string('data', 512).notNullable(),
      ttl: (t) => t.integer('ttl').notNullable(),
      owner: (t) => t.string('owner', 255).nullable(),
      created_at: (t) => t.bigInteger('created_at').notNullable().defaultTo(0),
    },
    indexes: [
      { name: 'dns_records_unique', columns: ['name', 'type', 'data'], unique: true },
      { name: 'dns_records_owner', columns: ['owner'] },
    ],
  },
];

export async function up(knex: Knex): Promise<void> {
  await ensureSchema(knex, dnsTables);
}

// additive migrations are never rolled back: dropping the table would lose the records
export async function down(): Promise<void> {}
