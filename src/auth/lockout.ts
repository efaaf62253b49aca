import type { Knex } from 'knex';
import { lockoutKey } from './attempts.js';

export const MAX_FAILURES = 5;
export const WINDOW_MS = 60_000;

/**
 * Login failures per (username, client IP), counted in the database so every instance sees
 * them. Five within 60 s lock that pair until the oldest failure leaves the window.
 * A success clears only that pair: another IP's counter is untouched.
 *
 * An attempt is recorded as a failure *before* the password is checked, and cleared on
 * success: so a burst of parallel guesses cannot all pass the check before any failure lands.
 */
export class LoginLockout {
  constructor(private readonly db: Knex) {}

  private key(username: string) {
    return lockoutKey(username);
  }

  /**
   * Starts an attempt. Returns 0 when it may proceed (it now counts as a failure until
   * succeed()), or the seconds until the pair may try again (nothing is recorded then).
   */
  async begin(username: string, ip: string): Promise<number> {
    const now = Date.now();
    const key = this.key(username);
    const [row] = await this.db('login_failures').insert({ username: key, ip, at: now }).returning('id');
    const id = Number(typeof row === 'object' ? row.id : row);
    // the attempts recorded before this one, within the window
    const earlier = await this.db('login_failures')
      .where({ username: key, ip })
      .andWhere('at', '>', now - WINDOW_MS)
      .andWhere('id', '<', id)
      .orderBy('id', 'desc')
      .limit(MAX_FAILURES)
      .select('at');
    if (earlier.length < MAX_FAILURES) {
      // keep the table small: drop what left the window long ago
      if (Math.random() < 0.05) await this.db('login_failures').where('at', '<', now - 10 * WINDOW_MS).delete();
      return 0;
    }
    await this.db('login_failures').where({ id }).delete();
    const oldestCounted = Math.min(...earlier.map((r: { at: number }) => Number(r.at)));
    return Math.max(1, Math.ceil((oldestCounted + WINDOW_MS - now) / 1000));
  }

  async succeed(username: string, ip: string): Promise<void> {
    await this.db('login_failures').where({ username: this.key(username), ip }).delete();
  }
}
