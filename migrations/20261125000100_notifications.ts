import type { Knex } from 'knex';
import { ensureSchema, type TableDef } from '../src/db/schema.js';

/**
 * Notification history, per-user read state and webhook deliveries.
 * - `notifications`: one row per notification (a broadcast is ONE row, user_id null). `seq` is
 *   re-assigned on every change (update by id, clear), so "everything after seq N" is exactly
 *   what a reconnecting client missed.
 * - `counters`: the seq source. Allocating = UPDATE of one row inside the writing transaction;
 *   on PostgreSQL the row lock is held until commit, so seqs commit in increasing order even
 *   with several instances (a database sequence would let seq 6 commit before seq 5, and a
 *   client resuming after 6 would never see 5).
 * - `notification_states`: written only when a user reads or dismisses one notification;
 *   `notification_cursors`: one row per user for "read all" (everything <= read_all_seq).
 *   The subject is the user id, or `system:<name>` for the system identity.
 * - `webhook_deliveries`: (provider, delivery_id) unique, so a re-sent delivery is never
 *   notified twice, whichever instance receives it.
 * - `webhook_payload_digests`: the digest of a signed body is the key, across forges, so the
 *   same body is never notified twice under another forge's headers either.
 */
const now = (t: Knex.CreateTableBuilder, name: string) => t.bigInteger(name).notNullable().defaultTo(0);

export const notificationTables: TableDef[] = [
  {
    name: 'counters',
    columns: {
      name: (t) => t.string('name', 64).primary(),
      value: (t) => t.bigInteger('value').notNullable().defaultTo(0),
    },
  },
  {
    name: 'notifications',
    columns: {
      id: (t) => t.string('id', 128).primary(),
      seq: (t) => t.bigInteger('seq').notNullable(),
      user_id: (t) => t.string('user_id', 36).nullable(),
      title: (t) => t.string('title', 256).notNullable().defaultTo(''),
      message: (t) => t.text('message').notNullable().defaultTo(''),
      level: (t) => t.string('level', 16).notNullable().defaultTo('info'),
      source: (t) => t.string('source', 128).nullable(),
      link: (t) => t.text('link').nullable(),
      toast: (t) => t.boolean('toast').notNullable().defaultTo(true),
      cleared: (t) => t.boolean('cleared').notNullable().defaultTo(false),
      sender: (t) => t.string('sender', 128).nullable(),
      created_at: (t) => now(t, 'created_at'),
      updated_at: (t) => now(t, 'updated_at'),
    },
    indexes: [
      { name: 'notifications_seq_unique', columns: ['seq'], unique: true },
      { name: 'notifications_user_seq', columns: ['user_id', 'seq'] },
    ],
  },
  {
    name: 'notification_states',
    columns: {
      notification_id: (t) => t.string('notification_id', 128).notNullable().references('notifications.id').onDelete('CASCADE'),
      subject: (t) => t.string('subject', 160).notNullable(),
      read_seq: (t) => t.bigInteger('read_seq').nullable(),
      dismissed_seq: (t) => t.bigInteger('dismissed_seq').nullable(),
      updated_at: (t) => now(t, 'updated_at'),
    },
    indexes: [
      { name: 'notification_states_unique', columns: ['notification_id', 'subject'], unique: true },
      { name: 'notification_states_subject', columns: ['subject'] },
    ],
  },
  {
    name: 'notification_cursors',
    columns: {
      subject: (t) => t.string('subject', 160).primary(),
      read_all_seq: (t) => t.bigInteger('read_all_seq').notNullable().defaultTo(0),
      updated_at: (t) => now(t, 'updated_at'),
    },
  },
  {
    name: 'webhook_deliveries',
    columns: {
      id: (t) => t.increments('id').primary(),
      provider: (t) => t.string('provider', 16).notNullable(),
      // null when the sender gave none: such deliveries cannot be de-duplicated
      delivery_id: (t) => t.string('delivery_id', 200).nullable(),
      event: (t) => t.string('event', 64).notNullable().defaultTo(''),
      status: (t) => t.string('status', 16).notNullable().defaultTo('accepted'),
      notification_id: (t) => t.string('notification_id', 128).nullable(),
      received_at: (t) => now(t, 'received_at'),
      // SHA-256 of the signed body (Gitea, GitHub): a replay under a new delivery id is still a duplicate
      payload_sha256: (t) => t.string('payload_sha256', 64).nullable(),
    },
    indexes: [
      { name: 'webhook_deliveries_unique', columns: ['provider', 'delivery_id'], unique: true },
      { name: 'webhook_deliveries_received', columns: ['received_at'] },
      { name: 'webhook_deliveries_payload_unique', columns: ['provider', 'payload_sha256'], unique: true },
    ],
  },
  {
    // SHA-256 of each signed body (Gitea, GitHub) once, whatever the forge: both sign the body
    // with the same hex HMAC, so a GitHub delivery re-sent as Gitea (or back) is a duplicate
    name: 'webhook_payload_digests',
    columns: {
      payload_sha256: (t) => t.string('payload_sha256', 64).primary(),
      provider: (t) => t.string('provider', 16).notNullable(),
      delivery_id: (t) => t.string('delivery_id', 200).nullable(),
      received_at: (t) => now(t, 'received_at'),
    },
    indexes: [{ name: 'webhook_payload_digests_received', columns: ['received_at'] }],
  },
];

export async function up(knex: Knex): Promise<void> {
  await ensureSchema(knex, notificationTables);
  await knex('counters').insert({ name: 'notifications', value: 0 }).onConflict('name').ignore();
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
