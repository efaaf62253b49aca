import type { Knex } from 'knex';
import { ensureSchema } from '../src/db/schema.js';
import { notificationTables } from './20261125000100_notifications.js';

/**
 * webhook_deliveries gains `payload_sha256` with a unique index per provider: a signed body
 * replayed under a new delivery id is a duplicate too (the signature covers the body only).
 */
export async function up(knex: Knex): Promise<void> {
  await ensureSchema(
    knex,
    notificationTables.filter((t) => t.name === 'webhook_deliveries'),
  );
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
