import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { safeEqual } from '../digest.js';
import { DomainError } from '../errors.js';
import { onPostgres } from '../db/knex.js';

/** An HMAC of a fixed label under a key derived from `masterKey`: names the key, never gives it back (kept in `secret_key_check`). */
export function checkValueOf(masterKey: string): string {
  const key = Buffer.from(crypto.hkdfSync('sha256', masterKey, 'service-core', 'master key check v1', 32));
  return crypto.createHmac('sha256', key).update('service-core master key check').digest('hex');
}

/** What an instance left running through `rotate-secret-key` says instead of writing a secret the others cannot read. */
export const STALE_MASTER_KEY =
  'the master key was changed (service-core rotate-secret-key) since this instance started: restart it with the new key (a secret saved here now would be written under the old one)';

/**
 * Encrypted settings store: AES-256-GCM under a key derived from SERVICE_SECRET_KEY.
 * Namespaces: core/settings (system key, webhook secret), core/auth (provider settings).
 */
export class SecretsStore {
  private readonly key: Buffer;
  private readonly check: string;

  constructor(
    private readonly db: Knex,
    masterKey: string,
  ) {
    this.key = Buffer.from(crypto.hkdfSync('sha256', masterKey, 'service-secrets', 'aes-256-gcm', 32));
    this.check = checkValueOf(masterKey);
  }

  /**
   * Whether the database has another master key than this store's: rotated since this process
   * started (none recorded: not stale). In a transaction on PostgreSQL the check row is read with
   * a share lock, so a rotation cannot commit between this look and the write that follows it.
   */
  async stale(db: Knex = this.db): Promise<boolean> {
    const query = db('secret_key_check').where({ id: 1 }).first('check_value');
    const row: { check_value: string } | undefined = await (db.isTransaction && onPostgres(db) ? query.forShare() : query);
    return Boolean(row) && !safeEqual(row!.check_value, this.check);
  }

  /** Refuses (409) a write under a master key the database no longer has: after a restart with the new key nobody could read it. */
  async assertCurrent(db: Knex = this.db): Promise<void> {
    if (await this.stale(db)) throw new DomainError('conflict', STALE_MASTER_KEY);
  }

  private encrypt(plain: string): string {
    const iv = crypto.randomBytes(12);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64');
  }

  private decrypt(stored: string): string {
    const raw = Buffer.from(stored, 'base64');
    const decipher = crypto.createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  }

  /** A value encrypted as the store keeps its own (for a secret kept in another table: a TOTP secret). */
  seal(plain: string): string {
    return this.encrypt(plain);
  }

  /** The value of seal(), or null when it was sealed under another master key or altered. */
  unseal(stored: string): string | null {
    try {
      return this.decrypt(stored);
    } catch {
      return null;
    }
  }

  async get(namespace: string, key: string): Promise<string | null> {
    const row = await this.db('secrets').where({ namespace, key }).first('ciphertext');
    if (!row) return null;
    try {
      return this.decrypt(row.ciphertext);
    } catch {
      // a value written under another master key cannot be read: treat as not configured
      return null;
    }
  }

  async getAll(namespace: string): Promise<Record<string, string>> {
    const rows = await this.db('secrets').where({ namespace }).select('key', 'ciphertext');
    const out: Record<string, string> = {};
    for (const r of rows) {
      try {
        out[r.key] = this.decrypt(r.ciphertext);
      } catch {
        /* unreadable under this master key: skipped */
      }
    }
    return out;
  }

  /**
   * The stored secrets that do not open under this master key (written under another: an
   * instance left running through a rotation), which reads take as unset: `namespace/key`, in
   * one namespace or in all.
   */
  async unreadable(namespace?: string): Promise<string[]> {
    const rows: { namespace: string; key: string; ciphertext: string }[] = await this.db('secrets')
      .modify((q) => namespace !== undefined && q.where({ namespace }))
      .orderBy(['namespace', 'key'])
      .select('namespace', 'key', 'ciphertext');
    return rows.filter((r) => this.unseal(r.ciphertext) === null).map((r) => `${r.namespace}/${r.key}`);
  }

  async set(namespace: string, key: string, value: string, trx: Knex = this.db): Promise<void> {
    // the look at the key and the write in one transaction (a savepoint within the caller's)
    await trx.transaction(async (t) => {
      await this.assertCurrent(t);
      const row = { namespace, key, ciphertext: this.encrypt(value), updated_at: Date.now() };
      await t('secrets').insert(row).onConflict(['namespace', 'key']).merge(['ciphertext', 'updated_at']);
    });
  }

  async delete(namespace: string, key: string, trx: Knex = this.db): Promise<void> {
    await trx('secrets').where({ namespace, key }).delete();
  }
}
