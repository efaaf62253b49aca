import type { Context, Next } from 'koa';
import { forbidden, unauthorized, type HttpError } from '../http/errors.js';
import { renderError } from '../http/app.js';
import type { ApiIdentity } from './identity.js';

// The guards answer a refusal themselves instead of throwing it: an unauthenticated request is
// the commonest failure there is, and an exception through every async frame costs more than it.

/** 401 when no identity was found. */
export function requireIdentity(ctx: Context, next: Next) {
  if (!ctx.state.identity) return refuse(ctx, unauthorized());
  return next();
}

/** 401 when unauthenticated; 403 naming the permission when authenticated but not allowed. */
export function requirePermission(permission: string) {
  return (ctx: Context, next: Next) => {
    const id = ctx.state.identity;
    if (!id) return refuse(ctx, unauthorized());
    if (!id.allows(permission)) return refuse(ctx, forbidden(permission));
    return next();
  };
}

function refuse(ctx: Context, err: HttpError): void {
  for (const k in err.headers) ctx.set(k, err.headers[k]);
  renderError(ctx, err.status, err.code, err.message, err.details);
}

/** The identity of a route behind requireIdentity / requirePermission. */
export function identity(ctx: Context): ApiIdentity {
  const id = ctx.state.identity;
  if (!id) throw unauthorized();
  return id;
}
