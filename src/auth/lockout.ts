import type { Knex } from 'knex';
import { onPostgres } from '../db/knex.js';
import { lockoutKey } from './attempts.js';

export const MAX_FAILURES = 5;
export const WINDOW_MS = 60_000;

/** How many failures a client may have within a window before it must wait. */
export interface LockoutRule {
  max: number;
  windowMs: number;
}

/** The rule for a client address: five failures in 60 s. */
export const ADDRESS_RULE: LockoutRule = { max: MAX_FAILURES, windowMs: WINDOW_MS };

/**
 * The rule for a known device (src/auth/device-cookie.ts): ten failures in a day, and its
 * standing is gone until the oldest of them is a day old (no success between them).
 */
export const DEVICE_RULE: LockoutRule = { max: 10, windowMs: 86_400_000 };

/** The client key of a known device in `login_failures.ip`, beside the addresses. */
export const DEVICE_CLIENT_PREFIX = 'device:';

/**
 * Wrong second factors of an account, from wherever they come (the second step, step-up,
 * removing the app; src/auth/attempt-gate.ts): ten
 * within an hour stop its second step until the oldest is an hour old. Someone who has the
 * password and many addresses still gets at most 240 guesses a day at a six-digit code.
 */
export const SECOND_FACTOR_CLIENT = 'second_factor';
export const SECOND_FACTOR_RULE: LockoutRule = { max: 10, windowMs: 3_600_000 };

/**
 * Login failures per (username, client), counted in the database so every instance sees
 * them. The client is an address (five failures within 60 s lock that pair until the oldest
 * failure leaves the window), or a known device (`device:<id>`, under DEVICE_RULE).
 * A success clears only that pair: another client's counter is untouched.
 *
 * An attempt is recorded as a failure *before* the password is checked, and cleared on
 * success: so a burst of parallel guesses cannot all pass the check before any failure lands.
 * The record and the count are one transaction holding the pair's lock (on PostgreSQL an
 * advisory lock, which every instance takes, in one function call: a login's round trips are
 * its cost under a storm; on SQLite the write lock): attempts on many connections would
 * otherwise count before others' records were visible (records that drew their ids first and
 * committed last).
 */
export class LoginLockout {
  /**
   * This instance's attempts of one pair, one after another: a burst of them waits here, not
   * each in a transaction holding a pool connection while the pair's lock is taken in turn (a
   * burst of one pair emptied the pool for every other request). The lock stays what orders the
   * instances.
   */
  private readonly inTurn = new Map<string, Promise<unknown>>();

  constructor(private readonly db: Knex) {}

  private oneAtATime<T>(pair: string, attempt: () => Promise<T>): Promise<T> {
    const run = (this.inTurn.get(pair) ?? Promise.resolve()).then(attempt);
    const settled = run.catch(() => undefined);
    this.inTurn.set(pair, settled);
    void settled.then(() => {
      if (this.inTurn.get(pair) === settled) this.inTurn.delete(pair);
    });
    return run;
  }

  private key(username: string) {
    return lockoutKey(username);
  }

  /**
   * Starts an attempt. Returns 0 when it may proceed (it now counts as a failure until
   * succeed()), or the seconds until the pair may try again (nothing is recorded then).
   */
  async begin(username: string, client: string, rule: LockoutRule = ADDRESS_RULE): Promise<number> {
    const now = Date.now();
    const key = this.key(username);
    const wait = await this.oneAtATime(`${key}\n${client}`, () =>
      onPostgres(this.db) ? this.attemptInOneCall(key, client, now, rule) : this.attemptInTransaction(key, client, now, rule),
    );
    // keep the table small: drop what left its window long ago (a device's failures count for a day)
    if (wait === 0 && Math.random() < 0.05) {
      await this.db('login_failures')
        .where('at', '<', now - DEVICE_RULE.windowMs)
        .orWhere((q) =>
          q
            .where('at', '<', now - 10 * WINDOW_MS)
            .andWhereNot('ip', 'like', `${DEVICE_CLIENT_PREFIX}%`)
            .andWhereNot('ip', SECOND_FACTOR_CLIENT),
        )
        .delete();
    }
    return wait;
  }

  /** PostgreSQL: the function migrations/20261202000000_login_attempt_function.ts made, one round trip. */
  private async attemptInOneCall(key: string, client: string, now: number, rule: LockoutRule): Promise<number> {
    const { rows } = await this.db.raw('SELECT service_login_attempt(?, ?, ?, ?, ?) AS wait', [key, client, now, rule.windowMs, rule.max]);
    return Number(rows[0].wait);
  }

  /** SQLite: the same steps as one transaction, which the first write's lock orders. */
  private attemptInTransaction(key: string, client: string, now: number, rule: LockoutRule): Promise<number> {
    return this.db.transaction(async (trx) => {
      // recorded first: the first write takes the database's write lock (another process waits
      // its turn), so nobody counts between this count and this record
      const [row] = await trx('login_failures').insert({ username: key, ip: client, at: now }).returning('id');
      const id = Number(typeof row === 'object' ? row.id : row);
      // the pair's other attempts within the window, the newest `max`
      const counted: Array<{ at: number | string }> = await trx('login_failures')
        .where({ username: key, ip: client })
        .andWhere('at', '>', now - rule.windowMs)
        .andWhereNot('id', id)
        .orderBy('at', 'desc')
        .limit(rule.max)
        .select('at');
      if (counted.length < rule.max) return 0;
      await trx('login_failures').where({ id }).delete();
      const oldestCounted = Math.min(...counted.map((r) => Number(r.at)));
      return Math.max(1, Math.ceil((oldestCounted + rule.windowMs - now) / 1000));
    });
  }

  async succeed(username: string, client: string): Promise<void> {
    await this.db('login_failures')
      .where({ username: this.key(username), ip: client })
      .delete();
  }
}
