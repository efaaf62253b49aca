import type { Context } from 'koa';
import { unauthorized } from '../http/errors.js';
import type { ApiIdentity } from './identity.js';
import { actingFrom } from '../request-context.js';

/** The identity of a route behind the guards of src/http/guards.ts (401 when there is none). */
export function identity(ctx: Context): ApiIdentity {
  const id = ctx.state.identity;
  if (!id) throw unauthorized();
  return id;
}

/** The identity of a route that changes something, with this request's client address (for the audit trail). */
export function actor(ctx: Context): ApiIdentity {
  return actingFrom(identity(ctx), ctx.ip);
}
