import type Koa from 'koa';
import { createRequire } from 'node:module';
import type session from 'koa-session';
import type { Knex } from 'knex';
import { sha256 } from '../digest.js';

export const SESSION_COOKIE = 'svc.sid';

type SessionOptions = Parameters<typeof session>[0];
type SessionApp = Parameters<typeof session>[1];

declare module 'koa' {
  interface ExtendableContext {
    session: (Record<string, unknown> & { regenerate?: () => Promise<void> }) | null;
  }
}

/**
 * The UI cookie session (koa-session) kept in the web_sessions table, so any instance can read
 * it. The session holds only the id of the web-session token it was started with, so revoking
 * that token (logout, the key list, an admin) ends the cookie session too.
 * Rows are keyed by the SHA-256 of the cookie's session id.
 */
export function webSessionMiddleware(app: Koa, db: Knex, opts: { ttlMs: number; secure: boolean }): Koa.Middleware {
  const store = {
    async get(key: string) {
      const row = await db('web_sessions')
        .where({ id: sha256(key) })
        .first();
      if (!row || Number(row.expires_at) <= Date.now()) return undefined;
      try {
        return JSON.parse(row.data);
      } catch {
        return undefined;
      }
    },
    async set(key: string, sess: unknown, maxAge: number) {
      const ttl = typeof maxAge === 'number' && maxAge > 0 ? maxAge : opts.ttlMs;
      const row = { id: sha256(key), data: JSON.stringify(sess), expires_at: Date.now() + ttl };
      await db('web_sessions').insert(row).onConflict('id').merge(['data', 'expires_at']);
    },
    async destroy(key: string) {
      await db('web_sessions')
        .where({ id: sha256(key) })
        .delete();
    },
  };
  // koa-session is loaded when the service mounts its middleware: a CLI command never does
  const { default: createSession } = createRequire(import.meta.url)('koa-session') as { default: typeof session };
  const middleware = createSession(
    {
      key: SESSION_COOKIE,
      maxAge: opts.ttlMs,
      httpOnly: true,
      signed: true,
      sameSite: 'lax',
      secure: opts.secure,
      store,
      autoCommit: true,
      rolling: false,
      renew: false,
    } as unknown as SessionOptions,
    // koa-session's types name Koa 2's application; the instance is Koa 3's, which it works with
    app as unknown as SessionApp,
  ) as unknown as Koa.Middleware;
  // koa-session initialises and commits a session on every request; a request without the
  // cookie has no session to read, so only the routes that start or end one need it then
  return (ctx, next) => (sessionMiddlewareRuns(ctx) ? middleware(ctx, next) : next());
}

/**
 * Does the session middleware wrap this request (and so save a changed session when it ends)?
 * Elsewhere a session is written only by an explicit save.
 */
export function sessionMiddlewareRuns(ctx: Koa.Context): boolean {
  return hasSessionCookie(ctx.req.headers.cookie) || SESSION_ROUTES.has(ctx.path);
}

/** Does a Cookie header carry the session cookie? (A plain look, before any cookie parsing.) */
export function hasSessionCookie(header: string | undefined): boolean {
  return header !== undefined && header.includes(`${SESSION_COOKIE}=`);
}

/** The routes that start or end a cookie session (login API and form, SSO handoff, logout). */
export const SESSION_ROUTES = new Set(['/api/auth/login', '/login', '/auth/complete', '/api/auth/logout']);
