import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { sha256 } from '../digest.js';
import { newToken } from './tokens.js';

/** What a one-time value is for; also the HKDF context, so a value of one purpose never opens another's data. */
export type OneTimePurpose = 'oidc_state' | 'exchange_code' | 'ws_ticket' | 'mfa_token' | 'webauthn_challenge';

const PURPOSE_TAG: Record<OneTimePurpose, 'state' | 'code' | 'ticket' | 'mfa' | 'challenge'> = {
  oidc_state: 'state',
  exchange_code: 'code',
  ws_ticket: 'ticket',
  mfa_token: 'mfa',
  webauthn_challenge: 'challenge',
};

const MAX_VALUE_LENGTH = 512;

/** AES-256-GCM key derived from the one-time value itself: only whoever holds the value can read the data. */
function keyOf(value: string, purpose: OneTimePurpose): Buffer {
  return Buffer.from(crypto.hkdfSync('sha256', value, 'one-time-value', purpose, 32));
}

function seal(value: string, purpose: OneTimePurpose, data: unknown): string {
  const iv = crypto.randomBytes(12);
  const cipher = crypto.createCipheriv('aes-256-gcm', keyOf(value, purpose), iv);
  const body = Buffer.concat([cipher.update(JSON.stringify(data), 'utf8'), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64');
}

function open(value: string, purpose: OneTimePurpose, sealed: string): unknown {
  const raw = Buffer.from(sealed, 'base64');
  const decipher = crypto.createDecipheriv('aes-256-gcm', keyOf(value, purpose), raw.subarray(0, 12));
  decipher.setAuthTag(raw.subarray(12, 28));
  return JSON.parse(Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8'));
}

/**
 * Single-use, short-lived secrets kept in the database so every instance can redeem them
 * (OIDC login states, exchange codes, WebSocket tickets, second-step tokens, WebAuthn challenges). The table holds only the
 * SHA-256 of the value and its data encrypted under a key derived from the value, so a read of
 * the table yields neither usable values nor what they carry (e.g. a session token).
 * `take` deletes the row; of two concurrent redeemers only the one whose delete hit wins.
 */
export class OneTimeStore {
  constructor(private readonly db: Knex) {}

  /**
   * Stores `data` under a new random value (256 bits) and returns the value. `value` may be
   * given when the caller already generated one (an OIDC state from the provider).
   */
  async put(purpose: OneTimePurpose, data: unknown, ttlMs: number, value: string = newToken(PURPOSE_TAG[purpose])): Promise<string> {
    if (value.length < 16 || value.length > MAX_VALUE_LENGTH) throw new Error('one-time value must be 16..512 characters');
    const now = Date.now();
    await this.db('one_time_values').insert({ hash: sha256(value), purpose, data: seal(value, purpose, data), expires_at: now + ttlMs });
    // expired rows are never redeemable; drop them now and then so the table stays small
    if (Math.random() < 0.05) await this.sweep(now);
    return value;
  }

  /** Redeems a value once: its data, or null when unknown, of another purpose, expired or already used. */
  async take<T = unknown>(purpose: OneTimePurpose, value: string | null | undefined): Promise<T | null> {
    if (typeof value !== 'string' || value.length < 16 || value.length > MAX_VALUE_LENGTH) return null;
    const hash = sha256(value);
    const row = await this.db('one_time_values').where({ hash, purpose }).first('data', 'expires_at');
    if (!row) return null;
    const consumed = await this.db('one_time_values').where({ hash, purpose }).delete();
    if (consumed !== 1) return null; // someone else redeemed it in between
    if (Number(row.expires_at) <= Date.now()) return null;
    try {
      return open(value, purpose, row.data) as T;
    } catch {
      return null;
    }
  }

  /**
   * Reads a value's data without redeeming it: null when unknown, of another purpose, expired
   * or unreadable. For a look at what a value is for (the user of a second-step token, to offer
   * their passkeys) where only a later step may spend it.
   */
  async peek<T = unknown>(purpose: OneTimePurpose, value: string | null | undefined): Promise<T | null> {
    if (typeof value !== 'string' || value.length < 16 || value.length > MAX_VALUE_LENGTH) return null;
    const row = await this.db('one_time_values')
      .where({ hash: sha256(value), purpose })
      .first('data', 'expires_at');
    if (!row || Number(row.expires_at) <= Date.now()) return null;
    try {
      return open(value, purpose, row.data) as T;
    } catch {
      return null;
    }
  }

  async sweep(now = Date.now()): Promise<number> {
    return this.db('one_time_values').where('expires_at', '<=', now).delete();
  }
}
