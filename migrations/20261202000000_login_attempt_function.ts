import type { Knex } from 'knex';
import { onPostgres } from '../src/db/knex.js';

/**
 * `service_login_attempt`: a login attempt's record and count in one round trip on PostgreSQL
 * (src/auth/lockout.ts). It takes the pair's advisory lock, records the attempt, counts the
 * pair's other attempts within the window (the newest `max`), and when they are `max` already
 * removes the record again and answers the seconds until the oldest leaves the window; else 0.
 * Each statement of a volatile PL/pgSQL function reads a fresh snapshot, so the count, read
 * after the lock, sees every record whose holder released the lock before. The statement that
 * calls it is its own transaction: the lock is held until that commits.
 * SQLite has no such functions: there the same steps run as one transaction of statements.
 */
export async function up(knex: Knex): Promise<void> {
  if (!onPostgres(knex)) return;
  await knex.raw(`
    CREATE OR REPLACE FUNCTION service_login_attempt(p_username text, p_client text, p_now bigint, p_window_ms bigint, p_max integer)
    RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      v_id integer;
      v_counted integer;
      v_oldest bigint;
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtextextended('service-core:login_failures:' || p_username || ':' || p_client, 0));
      INSERT INTO login_failures (username, ip, at) VALUES (p_username, p_client, p_now) RETURNING id INTO v_id;
      SELECT count(*), min(at) INTO v_counted, v_oldest FROM (
        SELECT at FROM login_failures
        WHERE username = p_username AND ip = p_client AND at > p_now - p_window_ms AND id <> v_id
        ORDER BY at DESC LIMIT p_max
      ) AS counted;
      IF v_counted < p_max THEN
        RETURN 0;
      END IF;
      DELETE FROM login_failures WHERE id = v_id;
      RETURN greatest(1, ceil((v_oldest + p_window_ms - p_now) / 1000.0))::integer;
    END
    $$`);
}

// additive migrations are never rolled back: an older instance beside a newer one still counts the same rows
export async function down(): Promise<void> {}
