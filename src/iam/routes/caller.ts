import type { Context } from 'koa';
import { unauthorized } from '../../http/errors.js';
import type { Actor } from '../policy.js';
import { actingFrom } from '../../request-context.js';

/**
 * What the IAM routes need of the identity the authentication middleware put on the request
 * (the auth area's ApiIdentity has these and more): who acts, and with which credential.
 */
export interface Caller extends Actor {
  userId: string | null;
  method: string;
  credentialId: string | null;
  keyScopes: readonly string[] | null;
  allows(permission: string): boolean;
}

/** The caller of a route behind the guards of src/http/guards.ts (401 when there is none), with this request's client address. */
export function callerOf(ctx: Context): Caller {
  const id = (ctx.state as { identity?: Caller | null }).identity;
  if (!id) throw unauthorized();
  return actingFrom(id, ctx.ip);
}

/** The web session a user changes their own password from: it stays, their others end. */
export function ownSession(ctx: Context, userId: string): string | null {
  const id = (ctx.state as { identity?: Caller | null }).identity;
  return id?.userId === userId && (id.method === 'session_cookie' || id.method === 'session_token') ? id.credentialId : null;
}
