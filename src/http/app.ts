import Koa, { type Context, type Next } from 'koa';
import Router from '@koa/router';
import crypto from 'node:crypto';
import type { Logger } from '../log.js';
import { HttpError, notFound, type ErrorCode } from './errors.js';
import { DomainError, type DomainErrorCode } from '../errors.js';
import { isDbUnavailable } from '../db/knex.js';
import { readBody } from './body.js';
import type { Metrics } from './metrics.js';

declare module 'koa' {
  interface DefaultState {
    requestId: string;
  }
  interface ExtendableContext {
    log: Logger;
  }
}

export interface BootState {
  iamReady: boolean;
  bootComplete: boolean;
  bootError: string | null;
  stopping: boolean;
}

/** What /readyz asks about the database (DbHealth), and what /healthz tells. */
export interface Readiness {
  check(): Promise<{ ok: boolean; reason: string | null }>;
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,64}$/;

const CODE_BY_STATUS: Record<number, ErrorCode> = {
  400: 'validation_failed',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  409: 'conflict',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  503: 'unavailable',
};

const STATUS_BY_DOMAIN_CODE: Record<DomainErrorCode, number> = {
  validation_failed: 400,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  rate_limited: 429,
  unavailable: 503,
};

/** Request id on every request and log line; one access log line per request. */
function requestContext(log: Logger) {
  return async (ctx: Context, next: Next) => {
    const incoming = ctx.get('x-request-id');
    const id = REQUEST_ID.test(incoming) ? incoming : crypto.randomUUID();
    ctx.state.requestId = id;
    ctx.set('X-Request-Id', id);
    // the child logger is made on first use: most requests never log beyond the access line
    let child: Logger | null = null;
    Object.defineProperty(ctx, 'log', { configurable: true, get: () => (child ??= log.child({ request_id: id })) });
    const started = process.hrtime.bigint();
    try {
      await next();
    } finally {
      if (log.isLevelEnabled('info')) {
        const ms = Number(process.hrtime.bigint() - started) / 1e6;
        // the path only: query strings may carry codes or tickets
        log.info({ request_id: id, method: ctx.method, path: ctx.path, status: ctx.status, ms: Math.round(ms * 10) / 10 }, 'request');
      }
    }
  };
}

export function renderError(ctx: Context, status: number, code: string, message: string, details?: unknown) {
  ctx.status = status;
  ctx.body = { error: details === undefined ? { code, message } : { code, message, details } };
}

/** One error middleware renders DESIGN section 5's body for every failure. */
function errorHandler() {
  return async (ctx: Context, next: Next) => {
    try {
      await next();
      if (ctx.body === undefined && ctx.status === 404) throw notFound(`route ${ctx.method} ${ctx.path}`);
      if (ctx.body === undefined && ctx.status === 405) renderError(ctx, 405, 'method_not_allowed', `method ${ctx.method} is not allowed here`);
    } catch (err) {
      if (err instanceof HttpError) {
        for (const [k, v] of Object.entries(err.headers)) ctx.set(k, v);
        renderError(ctx, err.status, err.code, err.message, err.details);
        return;
      }
      if (err instanceof DomainError) {
        if (err.retryAfterSeconds) ctx.set('Retry-After', String(err.retryAfterSeconds));
        renderError(ctx, STATUS_BY_DOMAIN_CODE[err.code], err.code, err.message, err.details);
        return;
      }
      if (isDbUnavailable(err)) {
        // the database is away or cannot write: try again shortly (nothing was acknowledged)
        ctx.set('Retry-After', '2');
        renderError(ctx, 503, 'unavailable', 'the database is not reachable right now; try again shortly');
        ctx.log.warn({ reason: (err as Error)?.message }, 'database unavailable');
        return;
      }
      const e = err as { status?: number; expose?: boolean; message?: string };
      if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500 && e.status !== 500) {
        renderError(ctx, e.status, CODE_BY_STATUS[e.status] ?? 'validation_failed', e.expose && e.message ? e.message : 'bad request');
        return;
      }
      ctx.log.error({ err }, 'unhandled error');
      renderError(ctx, 500, 'internal', 'internal error');
    }
  };
}

function securityHeaders() {
  return async (ctx: Context, next: Next) => {
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Referrer-Policy', 'no-referrer');
    ctx.set('X-Frame-Options', 'DENY');
    // API answers load nothing and are framed by nobody; pages set their own policy (src/web)
    ctx.set('Content-Security-Policy', "default-src 'none'; frame-ancestors 'none'");
    await next();
  };
}

/** /healthz, /readyz, and the 503 `booting` gate on /api/* until iam:ready */
function bootRoutes(state: BootState, version: string, database?: Readiness) {
  return async (ctx: Context, next: Next) => {
    if (ctx.path === '/healthz' && ctx.method === 'GET') {
      ctx.body = { status: 'ok', version };
      return;
    }
    if (ctx.path === '/readyz' && ctx.method === 'GET') {
      ctx.set('Cache-Control', 'no-store');
      if (!state.bootComplete || state.stopping) {
        ctx.status = 503;
        ctx.set('Retry-After', '5');
        ctx.body = { error: { code: state.stopping ? 'unavailable' : 'booting', message: state.bootError ?? (state.stopping ? 'shutting down' : 'booting') } };
        return;
      }
      // a balancer stops sending traffic here while the database is away
      const db = database ? await database.check() : { ok: true, reason: null };
      ctx.status = db.ok ? 200 : 503;
      if (!db.ok) ctx.set('Retry-After', '2');
      ctx.body = db.ok ? { status: 'ready', version } : { status: 'unavailable', reason: db.reason, error: { code: 'unavailable', message: db.reason } };
      return;
    }
    if (!state.iamReady && (ctx.path === '/api' || ctx.path.startsWith('/api/') || ctx.path === '/ws')) {
      ctx.set('Retry-After', '5');
      renderError(ctx, 503, 'booting', state.bootError ? `boot failed: ${state.bootError}` : 'the service is starting');
      return;
    }
    await next();
    // while draining, a finished request closes its connection instead of idling on keep-alive
    if (state.stopping) ctx.set('Connection', 'close');
  };
}

export interface HttpAppDeps {
  log: Logger;
  state: BootState;
  keys: string[];
  /** reverse proxies in front (SERVICE_TRUST_PROXY): X-Forwarded-For / -Proto are read from the nearest */
  proxyHops?: number;
  /** the public URL is https: cookies are Secure even when TLS ends at a proxy before us */
  secureCookies?: boolean;
  metrics?: Metrics;
  /** the release, shown by /healthz */
  version?: string;
  /** asked by /readyz */
  database?: Readiness;
}

/** The Koa app with the middleware every request passes; areas add theirs with mount(). */
export function createHttpApp(deps: HttpAppDeps): Koa {
  // maxIpsCount: the client is the entry the nearest proxy added; entries before it are the client's own words
  const hops = deps.proxyHops ?? 0;
  const app = new Koa({ keys: deps.keys, proxy: hops > 0, maxIpsCount: hops });
  app.silent = true; // errors are logged by our error middleware
  app.use(requestContext(deps.log));
  // before the error handler, so the status it renders is the one measured
  if (deps.metrics) app.use(deps.metrics.middleware());
  app.use(errorHandler());
  if (deps.secureCookies) {
    app.use(async (ctx, next) => {
      ctx.cookies.secure = true;
      await next();
    });
  }
  app.use(securityHeaders());
  app.use(bootRoutes(deps.state, deps.version ?? '0.0.0', deps.database));
  app.use(readBody());
  return app;
}

export function mountRouters(app: Koa, routers: Router[]): void {
  for (const router of routers) {
    app.use(router.routes());
    app.use(router.allowedMethods({ throw: false }));
  }
}
