import type { Knex } from 'knex';

const DAY = 86_400_000;
/** revoked or expired web-session rows stay this long (visible to an administrator), then go */
const SESSION_ROW_RETENTION_MS = 7 * DAY;

/**
 * Deletes what can never be used again: expired cookie sessions, old revoked or expired
 * web-session tokens, expired one-time values, login failures far outside their window.
 * Idempotent and safe to run on several instances at once.
 */
export async function sweepExpired(db: Knex, now = Date.now()): Promise<void> {
  await db('web_sessions').where('expires_at', '<=', now).delete();
  await db('one_time_values').where('expires_at', '<=', now).delete();
  await db('login_failures')
    .where('at', '<', now - DAY)
    .delete();
  const cutoff = now - SESSION_ROW_RETENTION_MS;
  await db('api_keys')
    .where({ kind: 'session' })
    .andWhere((q) => q.where('revoked_at', '<', cutoff).orWhere('expires_at', '<', cutoff))
    .delete();
}
