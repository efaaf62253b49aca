import type { SecretsStore } from '../iam/secrets.js';
import type { Knex } from 'knex';
import { guardHostBoundary, type Actor } from '../iam/policy.js';
import type { CommandPath } from '../iam/commands.js';

import { safeEqual, sha256 } from '../digest.js';

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

  constructor(
    private readonly envValue: string | null,
    private readonly secrets: SecretsStore,
    /** setting or clearing it runs here: the rule, the change and its event in one transaction */
    private readonly commands: CommandPath,
    /** called after the stored key was set or cleared (live connections made with the old one end) */
    private readonly onChange: () => void = () => undefined,
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
    guardHostBoundary(actor, ['the system key'], 'set, rotate or clear it');
  }

  /** Sets or rotates the key (a trusted actor only: mayChange). */
  async set(actor: Actor, value: string): Promise<void> {
    await this.change(actor, 'set', (trx) => this.secrets.set(SYSTEM_KEY_NS, SYSTEM_KEY_NAME, value, trx));
  }

  /** Clears the stored key (no system key then). */
  async clear(actor: Actor): Promise<void> {
    await this.change(actor, 'cleared', (trx) => this.secrets.delete(SYSTEM_KEY_NS, SYSTEM_KEY_NAME, trx));
  }

  private async change(actor: Actor, change: 'set' | 'cleared', write: (trx: Knex) => Promise<void>): Promise<void> {
    const command = { action: 'system_key.changed' as const, actor, target: { type: 'settings', id: 'system_api_key', name: 'system API key' } };
    await this.commands.run(command, async () => {
      this.mayChange(actor);
      await this.commands.within(write, () => ({ ...command, details: { change } }));
    });
    this.cached = null;
    this.onChange();
  }
}
