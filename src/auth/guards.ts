import type { Context, Next } from 'koa';
import { forbidden, unauthorized } from '../http/errors.js';
import type { ApiIdentity } from './identity.js';

/** 401 when no identity was found. */
export async function requireIdentity(ctx: Context, next: Next) {
  if (!ctx.state.identity) throw unauthorized();
  await next();
}

/** 401 when unauthenticated; 403 naming the permission when authenticated but not allowed. */
export function requirePermission(permission: string) {
  return async (ctx: Context, next: Next) => {
    const id = ctx.state.identity;
    if (!id) throw unauthorized();
    if (!id.allows(permission)) throw forbidden(permission);
    await next();
  };
}

/** Never rejects; ctx.state.identity is set when one was found. */
export async function optionalIdentity(_ctx: Context, next: Next) {
  await next();
}

/** The identity of a route behind requireIdentity / requirePermission. */
export function identity(ctx: Context): ApiIdentity {
  const id = ctx.state.identity;
  if (!id) throw unauthorized();
  return id;
}
