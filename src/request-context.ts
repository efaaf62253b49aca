/**
 * Who acts, as the rules and the audit trail see it: the identity a transport resolved, with the
 * client address of the request, the frame or the connection it came through. Each transport
 * makes it once at its entry (the HTTP routes' `actor(ctx)`, the ws dispatch, the CLI's `cli`,
 * the service's own `service`) and hands it to the writer as its first argument.
 *
 * It is not carried in AsyncLocalStorage: on Node 20 a single run() slows every request after it
 * by about a quarter (the API-key path measured 17,900 -> 13,300 req/s), so the actor travels
 * as an argument (docs/decisions.md).
 */

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
