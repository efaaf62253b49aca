import { AsyncLocalStorage } from 'node:async_hooks';

/** The transports through which someone acts. */
export type Transport = 'http' | 'ws' | 'cli' | 'bus' | 'boot';

/**
 * Who acts, through which transport, from which address, in which request: set once at each
 * transport's entry (the HTTP authentication step for a request that may change something, a
 * ws frame, a CLI command) and carried with the async context, so nothing below takes an actor
 * it did not need for a rule: the command path reads it here (src/iam/commands.ts). A read
 * (GET, HEAD) has none: the store would ride every promise of the hot path for nothing.
 */
export interface Acting {
  /** the caller as resolved (an identity with its address: actingFrom), or null when anonymous */
  actor: object | null;
  transport: Transport;
  /** the client address (behind a trusted proxy, the one the nearest proxy saw) */
  ip: string | null;
  requestId: string | null;
}

const storage = new AsyncLocalStorage<Acting>();

/** Runs `fn` (and everything it awaits) as `acting`. */
export function actingAs<T>(acting: Acting, fn: () => T): T {
  return storage.run(acting, fn);
}

/**
 * Runs `fn` with nobody acting: what outlives the request that started it (a plugin's setup,
 * its timers and listeners) must not go on acting as whoever started it.
 */
export function outsideActing<T>(fn: () => T): T {
  return storage.exit(fn);
}

/** The acting context of this async flow, if a transport set one. */
export function currentActing(): Acting | undefined {
  return storage.getStore();
}

/**
 * An identity as seen from the request that carries the action: the resolved identity (cached
 * and shared between requests) with this request's client address on top (behind a trusted
 * proxy, the address the nearest proxy saw). The audit trail reads `ip` from it; everything else
 * reads through to the identity (its methods, `instanceof`), which is never changed.
 */
export function actingFrom<T extends object>(identity: T, ip: string | null): T & { ip: string | null } {
  return Object.assign(Object.create(identity) as T, { ip });
}

/** The client address an actor carries (actingFrom), or null. */
export function addressOf(actor: object): string | null {
  const ip = (actor as { ip?: unknown }).ip;
  return typeof ip === 'string' ? ip : null;
}
