import type { Context, Next } from 'koa';
import { forbidden, forbiddenBecause, presentedCredential, unauthorized, UNAUTHENTICATED, type HttpError } from './errors.js';
import { renderError } from './app.js';
import { READ_SCOPED_REFUSAL } from '../errors.js';

// The guards answer a refusal themselves instead of throwing it: an unauthenticated request is
// the commonest failure there is, and an exception through every async frame costs more than it.

/** What a guard asks of the identity the authentication middleware put on ctx.state. */
interface Caller {
  allows(permission: string): boolean;
  /** false: a key scoped to reads (src/auth/identity.ts) */
  mayChangeOwn?(): boolean;
}

const callerOf = (ctx: Context): Caller | null | undefined => (ctx.state as { identity?: Caller | null }).identity;

/** Where the authentication middleware records a refusal (the audit trail's request.denied), when it does. */
interface Denials {
  denied(ctx: Context, permission: string): void;
}

/** The 401s of every guard, made once, one for each kind of credential presented (UNAUTHENTICATED). */
const UNAUTHORIZED = unauthorized();
const UNAUTHORIZED_BODY = Object.fromEntries(
  Object.entries(UNAUTHENTICATED).map(([kind, message]) => [kind, JSON.stringify({ error: { code: UNAUTHORIZED.code, message } })]),
) as Record<keyof typeof UNAUTHENTICATED, string>;

function refuseUnauthenticated(ctx: Context): void {
  ctx.status = 401;
  for (const k in UNAUTHORIZED.headers) ctx.set(k, UNAUTHORIZED.headers[k]);
  ctx.res.setHeader('Content-Type', 'application/json; charset=utf-8');
  ctx.body = UNAUTHORIZED_BODY[presentedCredential(ctx.headers)];
}

/** 401 when no identity was found. */
export function requireIdentity(ctx: Context, next: Next) {
  if (!callerOf(ctx)) return refuseUnauthenticated(ctx);
  return next();
}

/** The 403 of a change asked with a key scoped to reads. */
const READ_SCOPED = forbiddenBecause(READ_SCOPED_REFUSAL);

/**
 * A change on a route that names no permission: 401 when unauthenticated, 403 for a key scoped
 * without api:write (it changes nothing of its owner's either).
 */
export function requireIdentityThatChanges(ctx: Context, next: Next) {
  const id = callerOf(ctx);
  if (!id) return refuseUnauthenticated(ctx);
  if (id.mayChangeOwn && !id.mayChangeOwn()) {
    (ctx.state as { denials?: Denials }).denials?.denied(ctx, 'api:write');
    return refuse(ctx, READ_SCOPED);
  }
  return next();
}

/** 401 when unauthenticated; 403 naming the permission when authenticated but not allowed. */
export function requirePermission(permission: string) {
  return (ctx: Context, next: Next) => {
    const id = callerOf(ctx);
    if (!id) return refuseUnauthenticated(ctx);
    if (!id.allows(permission)) {
      (ctx.state as { denials?: Denials }).denials?.denied(ctx, permission);
      return refuse(ctx, forbidden(permission));
    }
    return next();
  };
}

function refuse(ctx: Context, err: HttpError): void {
  for (const k in err.headers) ctx.set(k, err.headers[k]);
  renderError(ctx, err.status, err.code, err.message, err.details);
}
