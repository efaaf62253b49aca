import type { Knex } from 'knex';

export const MAX_FAILURES = 5;
export const WINDOW_MS = 60_000;

/**
 * Login failures per (username, client IP), counted in the database so every instance sees
 * them. Five within 60 s lock that pair until the oldest failure leaves the window.
 * A success clears only that pair: another IP's counter is untouched.
 */
export class LoginLockout {
  constructor(private readonly db: Knex) {}

  private key(username: string) {
    return username.toLowerCase().slice(0, 256);
  }

  /** Seconds until another attempt is allowed, or 0 when not locked. */
  async retryAfter(username: string, ip: string): Promise<number> {
    const since = Date.now() - WINDOW_MS;
    const rows = await this.db('login_failures')
      .where({ username: this.key(username), ip })
      .andWhere('at', '>', since)
      .orderBy('at', 'desc')
      .limit(MAX_FAILURES)
      .select('at');
    if (rows.length < MAX_FAILURES) return 0;
    const oldestCounted = Number(rows[rows.length - 1].at);
    return Math.max(1, Math.ceil((oldestCounted + WINDOW_MS - Date.now()) / 1000));
  }

  async fail(username: string, ip: string): Promise<void> {
    const now = Date.now();
    await this.db('login_failures').insert({ username: this.key(username), ip, at: now });
    // keep the table small: drop what left the window long ago
    if (Math.random() < 0.05) await this.db('login_failures').where('at', '<', now - 10 * WINDOW_MS).delete();
  }

  async succeed(username: string, ip: string): Promise<void> {
    await this.db('login_failures').where({ username: this.key(username), ip }).delete();
  }
}
