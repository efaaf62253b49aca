/**
 * Who acts, as seen from the request that carries the action: the resolved identity (cached and
 * shared between requests) with this request's client address on top (behind a trusted proxy,
 * the address the nearest proxy saw). The audit trail reads `ip` from it; everything else reads
 * through to the identity (its methods, `instanceof`), which is never changed.
 */
export function actingFrom<T extends object>(identity: T, ip: string | null): T & { ip: string | null } {
  return Object.assign(Object.create(identity) as T, { ip });
}

/** The client address an actor carries (actingFrom), or null. */
export function addressOf(actor: object): string | null {
  const ip = (actor as { ip?: unknown }).ip;
  return typeof ip === 'string' ? ip : null;
}
