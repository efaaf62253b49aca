import crypto from 'node:crypto';
import type { EventBus } from '../bus/bus.js';
import type { LocalProvider } from './providers/local.js';

const CACHE_MS = 60_000;

export interface CachedVerification {
  userId: string;
  /** the password hash the verification was made against: a later change elsewhere shows here */
  hash: string;
  expires: number;
}

/**
 * HTTP Basic against local IAM without paying bcrypt on every request: a successful
 * verification is cached briefly under an HMAC of (username, password) with a process-random
 * key, and dropped when that user's password changes (iam:password_changed).
 */
export class BasicVerifier {
  private readonly hmacKey = crypto.randomBytes(32);
  private readonly cache = new Map<string, CachedVerification>();
  private readonly byUser = new Map<string, Set<string>>();
  /** checks under way, by credential: parallel requests with the same one share a single check */
  private readonly inflight = new Map<string, Promise<CachedVerification | null>>();

  constructor(
    private readonly local: LocalProvider,
    bus: EventBus,
  ) {
    bus.on('iam:password_changed', ({ user_id }) => this.forget(user_id));
    bus.on('iam:permissions_changed', (change) => {
      // a disabled or deleted user must not live on in the cache
      if (change.scope === 'user') this.forget(change.user_id);
    });
  }

  /**
   * The identity cache's key of a whole Authorization header: SHA-256 over a process-random
   * secret and the header (half the cost of an HMAC; the value never leaves the process, it
   * only keeps the password out of the cache's keys).
   */
  cacheKeyOf(header: string): string {
    return crypto.createHash('sha256').update(this.hmacKey).update(header).digest('base64');
  }

  /** HMAC of (username, password) under a process-random key: what a verification is cached under */
  keyOf(username: string, password: string): string {
    return crypto.createHmac('sha256', this.hmacKey).update(username).update('\0').update(password).digest('base64');
  }

  cached(username: string, password: string): CachedVerification | null {
    const k = this.keyOf(username, password);
    const hit = this.cache.get(k);
    if (!hit) return null;
    if (hit.expires <= Date.now()) {
      this.cache.delete(k);
      return null;
    }
    return hit;
  }

  /**
   * Runs `check` once for concurrent requests with the same credentials (a client opening ten
   * connections with a password not yet cached pays one hash, one lockout attempt).
   */
  once(username: string, password: string, check: () => Promise<CachedVerification | null>): Promise<CachedVerification | null> {
    const k = this.keyOf(username, password);
    let running = this.inflight.get(k);
    if (!running) {
      running = check().finally(() => this.inflight.delete(k));
      this.inflight.set(k, running);
    }
    return running;
  }

  /** Checks the password (one bcrypt in the pool) and caches a success. */
  async verify(username: string, password: string): Promise<CachedVerification | null> {
    const user = await this.local.verifyUser(username, password);
    if (!user) return null;
    const k = this.keyOf(username, password);
    const hit = { userId: user.id, hash: user.hashedPassword!, expires: Date.now() + CACHE_MS };
    this.cache.set(k, hit);
    let set = this.byUser.get(user.id);
    if (!set) this.byUser.set(user.id, (set = new Set()));
    set.add(k);
    if (this.cache.size > 10_000) this.sweep();
    return hit;
  }

  forget(userId: string): void {
    for (const k of this.byUser.get(userId) ?? []) this.cache.delete(k);
    this.byUser.delete(userId);
  }

  private sweep() {
    const now = Date.now();
    for (const [k, v] of this.cache) if (v.expires <= now) this.cache.delete(k);
  }
}

/** Parses `Authorization: Basic …`; anything malformed is null (never a throw). */
export function parseBasic(header: string): { username: string; password: string } | null {
  const m = /^Basic ([A-Za-z0-9+/=]{1,4096})$/i.exec(header.trim());
  if (!m) return null;
  const decoded = Buffer.from(m[1], 'base64').toString('utf8');
  const i = decoded.indexOf(':');
  if (i <= 0 || decoded.includes('\0')) return null;
  return { username: decoded.slice(0, i), password: decoded.slice(i + 1) };
}
