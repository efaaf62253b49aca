import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { ensureSchema, type TableDef } from '../src/db/schema.js';

/**
 * The audit trail: one append-only hash chain per database (src/iam/audit.ts). `audit_chain`
 * holds one row: the head (last seq and hash), locked by every append, and where the chain
 * starts once old events were pruned (the first kept seq and the hash it chains to).
 */
export const auditTables: TableDef[] = [
  {
    name: 'audit_events',
    columns: {
      seq: (t) => t.bigInteger('seq').primary(),
      id: (t) => t.string('id', 36).notNullable().unique(),
      at: (t) => t.bigInteger('at').notNullable(),
      actor_user_id: (t) => t.string('actor_user_id', 36).nullable(),
      actor_username: (t) => t.string('actor_username', 256).notNullable(),
      actor_method: (t) => t.string('actor_method', 32).nullable(),
      actor_ip: (t) => t.string('actor_ip', 64).nullable(),
      action: (t) => t.string('action', 64).notNullable(),
      target_type: (t) => t.string('target_type', 32).notNullable(),
      target_id: (t) => t.string('target_id', 256).nullable(),
      target_name: (t) => t.string('target_name', 256).nullable(),
      outcome: (t) => t.string('outcome', 16).notNullable(),
      details: (t) => t.text('details').notNullable().defaultTo('{}'),
      hash: (t) => t.string('hash', 64).notNullable(),
    },
    indexes: [
      { name: 'audit_events_at_idx', columns: ['at'] },
      { name: 'audit_events_action_idx', columns: ['action'] },
      { name: 'audit_events_actor_idx', columns: ['actor_username'] },
    ],
  },
  {
    name: 'audit_chain',
    columns: {
      id: (t) => t.integer('id').primary(),
      head_seq: (t) => t.bigInteger('head_seq').notNullable().defaultTo(0),
      head_hash: (t) => t.string('head_hash', 64).notNullable(),
      start_seq: (t) => t.bigInteger('start_seq').notNullable().defaultTo(1),
      start_prev_hash: (t) => t.string('start_prev_hash', 64).notNullable(),
    },
  },
];

/** The hash the first event chains to (src/iam/audit.ts says the same). */
const GENESIS = crypto.createHash('sha256').update('service-core audit trail').digest('hex');

export async function up(knex: Knex): Promise<void> {
  await ensureSchema(knex, auditTables);
  // the head row exists from the start: every append locks it, the first one too
  await knex('audit_chain').insert({ id: 1, head_seq: 0, head_hash: GENESIS, start_seq: 1, start_prev_hash: GENESIS }).onConflict('id').ignore();
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
