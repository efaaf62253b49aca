import type { SecretsStore } from '../iam/secrets.js';
import type { Knex } from 'knex';
import { guardHostBoundary, type Actor } from '../iam/policy.js';
import type { AuditTrail } from '../iam/audit.js';

const isActor = (v: unknown): v is Actor => typeof v === 'object' && v !== null && typeof (v as Actor).username === 'string' && typeof (v as Actor).isSystem === 'boolean';
import { safeEqual, sha256 } from './tokens.js';

export const SYSTEM_KEY_NS = 'core/settings';
export const SYSTEM_KEY_NAME = 'system_api_key';
const STORE_CACHE_MS = 3000;

/**
 * The master machine key: environment, else the secrets store, else disabled.
 * An empty or blank value counts as not configured: no empty or implicit key is ever accepted.
 * The stored value is cached for a few seconds (a change here is visible at once; another
 * instance sees it within STORE_CACHE_MS).
 */
export class SystemKey {
  private cached: { value: string | null; until: number } | null = null;

  /** called after the stored key was set or cleared (live connections made with the old one end) */
  onChange: () => void = () => undefined;

  constructor(
    private readonly envValue: string | null,
    private readonly secrets: SecretsStore,
    /** setting or clearing it is an event, in the same transaction */
    private readonly audit?: AuditTrail,
  ) {}

  get lockedByEnv(): boolean {
    return Boolean(this.envValue && this.envValue.trim());
  }

  private async current(): Promise<string | null> {
    if (this.envValue && this.envValue.trim()) return this.envValue.trim();
    const now = Date.now();
    if (this.cached && this.cached.until > now) return this.cached.value;
    const stored = (await this.secrets.get(SYSTEM_KEY_NS, SYSTEM_KEY_NAME))?.trim() || null;
    this.cached = { value: stored, until: now + STORE_CACHE_MS };
    return stored;
  }

  async configured(): Promise<boolean> {
    return (await this.current()) !== null;
  }

  /** The stamp (SHA-256) of the key when `presented` is the key, else null. */
  async matches(presented: string): Promise<string | null> {
    const key = await this.current();
    if (!key || !presented) return null;
    return safeEqual(presented, key) ? sha256(key) : null;
  }

  /** SHA-256 of the current key (null: none): an identity made with another stamp has ended. */
  async stamp(): Promise<string | null> {
    const key = await this.current();
    return key ? sha256(key) : null;
  }

  /** Setting, rotating or clearing the key hands out everything it passes: for trusted actors only. */
  mayChange(actor: Actor): void {
    guardHostBoundary(actor, ['the system key'], 'set, rotate or clear the system key');
  }

  async set(value: string, by?: unknown): Promise<void> {
    await this.store((trx) => this.secrets.set(SYSTEM_KEY_NS, SYSTEM_KEY_NAME, value, trx), 'set', by);
  }

  async clear(by?: unknown): Promise<void> {
    await this.store((trx) => this.secrets.delete(SYSTEM_KEY_NS, SYSTEM_KEY_NAME, trx), 'cleared', by);
  }

  private async store(write: (trx?: Knex) => Promise<void>, change: 'set' | 'cleared', by: unknown): Promise<void> {
    const actor = isActor(by) ? by : { username: 'unknown', userId: null, isSystem: false, isSuperadmin: false };
    if (this.audit) await this.audit.within(write, () => ({ action: 'system_key.changed', actor, target: { type: 'settings', id: 'system_api_key', name: 'system API key' }, details: { change } }));
    else await write();
    this.cached = null;
    this.onChange();
  }
}
