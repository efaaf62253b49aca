import type { Knex } from 'knex';
import { ensureSchema } from '../src/db/schema.js';
import { notificationTables } from './20261125000100_notifications.js';

/**
 * webhook_payload_digests: one row per signed body, keyed by its SHA-256 whatever the forge. The
 * per-provider digest of webhook_deliveries let a GitHub delivery re-sent with Gitea's headers
 * (the same hex HMAC of the same body) through a second time.
 */
export async function up(knex: Knex): Promise<void> {
  await ensureSchema(
    knex,
    notificationTables.filter((t) => t.name === 'webhook_payload_digests'),
  );
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
