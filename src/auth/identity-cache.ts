import type { ApiIdentity } from './identity.js';

interface Entry {
  identity: ApiIdentity;
  until: number;
}

/**
 * Resolved identities by credential (a key's hash, a Basic HMAC, a cookie session's key id), so
 * a repeated request costs a hash and a map lookup, no database round trip. Entries live at
 * most `ttlMs` (SERVICE_PERMISSION_CACHE_TTL_MS; 0 turns the cache off) and never past their
 * credential's expiry; every change that could end or narrow one drops it at once (and, through
 * the bus bridge, on every instance): see the events wired in src/auth/component.ts.
 */
export class IdentityCache {
  private readonly entries = new Map<string, Entry>();
  private readonly byUser = new Map<string, Set<string>>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries = 10_000,
  ) {}

  get(key: string, now = Date.now()): ApiIdentity | null {
    const hit = this.entries.get(key);
    if (!hit) return null;
    if (hit.until <= now) {
      this.delete(key);
      return null;
    }
    return hit.identity;
  }

  set(key: string, identity: ApiIdentity, expiresAt: number | null = null): void {
    if (this.ttlMs <= 0) return;
    const until = Math.min(Date.now() + this.ttlMs, expiresAt ?? Infinity);
    if (this.entries.size >= this.maxEntries) this.delete(this.entries.keys().next().value!);
    this.entries.set(key, { identity, until });
    const owner = identity.userId ?? '*system';
    let set = this.byUser.get(owner);
    if (!set) this.byUser.set(owner, (set = new Set()));
    set.add(key);
  }

  /** A user's credentials, account or permissions changed. */
  forgetUser(userId: string): void {
    for (const key of this.byUser.get(userId) ?? []) this.entries.delete(key);
    this.byUser.delete(userId);
  }

  /** A group changed: anyone's permissions may have. */
  clear(): void {
    this.entries.clear();
    this.byUser.clear();
  }

  private delete(key: string): void {
    const e = this.entries.get(key);
    if (!e) return;
    this.entries.delete(key);
    this.byUser.get(e.identity.userId ?? '*system')?.delete(key);
  }
}
