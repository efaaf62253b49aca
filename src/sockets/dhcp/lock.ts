import type { Knex } from 'knex';
import { SocketError } from '../errors.js';

/**
 * the advisory lock every instance takes around a change of Kea's configuration (a fixed
 * number: the first 52 bits of sha256("service-core:dhcp:config"))
 */
export const DHCP_CONFIG_LOCK_KEY = '2370187474591519';

/**
 * Serialises the read-modify-write of Kea's configuration (config-get, the change, config-set,
 * config-write): Kea 2.2 has no configuration hash to compare, so two writers at once would
 * lose one's change. In this process a queue; across instances on PostgreSQL a transaction
 * holding `pg_advisory_xact_lock` for the whole change (released by its commit or rollback, so
 * an instance that dies mid-change frees it). On SQLite the service runs as one instance, and
 * the queue is the whole lock: no SQLite transaction is held across the daemons' round trips,
 * since SQLite's one writer would then block the dns provider's record writes in the same change.
 */
export class ConfigLock {
  private tail: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly db: Knex | null,
    private readonly postgres: boolean,
    /** how long to wait for another instance's change before answering unavailable */
    private readonly waitMs: number,
  ) {}

  async run<T>(change: () => Promise<T>): Promise<T> {
    const previous = this.tail;
    let release!: () => void;
    this.tail = new Promise<void>((resolve) => (release = resolve));
    try {
      await previous.catch(() => undefined);
      if (!this.postgres || !this.db) return await change();
      return await this.db.transaction(async (trx) => {
        await trx.raw(`SET LOCAL lock_timeout = ${Math.max(1, Math.round(this.waitMs))}`);
        try {
          await trx.raw('SELECT pg_advisory_xact_lock(?::bigint)', [DHCP_CONFIG_LOCK_KEY]);
        } catch (err) {
          if ((err as { code?: string }).code === '55P03') {
            throw new SocketError('unavailable', `another instance is changing Kea's configuration (waited ${this.waitMs} ms)`);
          }
          throw err;
        }
        return change();
      });
    } finally {
      release();
    }
  }
}
