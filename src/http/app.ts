import type Koa from 'koa';
import type { Context, Next } from 'koa';
import type Router from '@koa/router';
import type FindMyWay from 'find-my-way';
import { createRequire } from 'node:module';
import compose from 'koa-compose';
import crypto from 'node:crypto';
import type { Logger } from '../log.js';
import { HttpError, notFound, STATUS_BY_DOMAIN_CODE, type ErrorCode } from './errors.js';
import { DomainError, isRecorded } from '../errors.js';
import { isDbUnavailable } from '../db/knex.js';
import { BODY_METHODS, readBody } from './body.js';
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
  /** a stop's grace ran out: whatever still arrives is answered 503 without being run (src/http/drain.ts) */
  refusing?: boolean;
  /** what the database said while boot waits for it (password hidden); null once it answers */
  dbError?: string | null;
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

export function renderError(ctx: Context, status: number, code: string, message: string, details?: unknown) {
  ctx.status = status;
  ctx.body = { error: details === undefined ? { code, message } : { code, message, details } };
}

/** Any failure as the error body: HttpError and DomainError as they say, the database away as 503, the rest 500. */
function renderFailure(ctx: Context, err: unknown): void {
  if (err instanceof HttpError) {
    for (const k in err.headers) ctx.set(k, err.headers[k]);
    return renderError(ctx, err.status, err.code, err.message, err.details);
  }
  if (err instanceof DomainError) {
    if (err.retryAfterSeconds) ctx.set('Retry-After', String(err.retryAfterSeconds));
    return renderError(ctx, STATUS_BY_DOMAIN_CODE[err.code], err.code, err.message, err.details);
  }
  if (isDbUnavailable(err)) {
    // the database is away or cannot write: try again shortly (nothing was acknowledged)
    ctx.set('Retry-After', '2');
    renderError(ctx, 503, 'unavailable', 'the database is not reachable right now; try again shortly');
    ctx.log.warn({ reason: (err as Error)?.message }, 'database unavailable');
    return;
  }
  const e = err as { status?: number; expose?: boolean; message?: string };
  if (typeof e?.status === 'number' && e.status >= 400 && e.status < 500) {
    return renderError(ctx, e.status, CODE_BY_STATUS[e.status] ?? 'validation_failed', e.expose && e.message ? e.message : 'bad request');
  }
  ctx.log.error({ err }, 'unhandled error');
  renderError(ctx, 500, 'internal', 'internal error');
}

/** API answers load nothing and are framed by nobody; pages set their own policy (src/web). */
const SECURITY_HEADERS: Array<[string, string]> = [
  ['X-Content-Type-Options', 'nosniff'],
  ['Referrer-Policy', 'no-referrer'],
  ['X-Frame-Options', 'DENY'],
  ['Content-Security-Policy', "default-src 'none'; frame-ancestors 'none'"],
];

/**
 * What every request passes, in one middleware (each extra one costs an async hop on every
 * request): a request id (echoed when sane), a logger made on first use, the security headers,
 * /healthz and /readyz, the 503 gate on /api/* until IAM is ready, the body read for the methods
 * with one (@koa/bodyparser, 1 MiB or more for a route that says so: src/http/body.ts), the error
 * body for every failure, the route-pattern metric, and one access line when the log level is
 * info or finer.
 */
function core(deps: HttpAppDeps) {
  const { log, state, metrics } = deps;
  const version = deps.version ?? '0.0.0';
  const bodies = readBody();
  return async (ctx: Context, next: Next) => {
    const incoming = ctx.get('x-request-id');
    const id = incoming && REQUEST_ID.test(incoming) ? incoming : crypto.randomUUID();
    ctx.state.requestId = id;
    const res = ctx.res;
    res.setHeader('X-Request-Id', id);
    for (const [k, v] of SECURITY_HEADERS) res.setHeader(k, v);
    if (deps.secureCookies) ctx.cookies.secure = true;
    const started = metrics || log.isLevelEnabled('info') ? performance.now() : 0;
    try {
      const path = ctx.path;
      // HEAD too: a monitor may probe with it (Koa sends the status and headers without the body)
      if ((ctx.method === 'GET' || ctx.method === 'HEAD') && (path === '/healthz' || path === '/readyz' || path === '/metrics')) {
        if (path === '/healthz') ctx.body = { status: 'ok', version };
        else if (path === '/readyz') await readiness(ctx, state, version, deps.database);
        else if (metrics) await metrics.serve(ctx);
        else ctx.status = 404;
        return;
      }
      if (state.refusing) {
        ctx.set('Retry-After', '1');
        return renderError(ctx, 503, 'unavailable', 'the service is shutting down; try again');
      }
      if (!state.iamReady && (path === '/api' || path.startsWith('/api/') || path === '/ws')) {
        ctx.set('Retry-After', '5');
        return renderError(ctx, 503, 'booting', state.bootError ? `boot failed: ${state.bootError}` : 'the service is starting');
      }
      if (BODY_METHODS.has(ctx.method)) await bodies(ctx, next);
      else await next();
      if (ctx.body === undefined && ctx.status === 404) throw notFound(`route ${ctx.method} ${ctx.path}`);
      if (ctx.body === undefined && ctx.status === 405) renderError(ctx, 405, 'method_not_allowed', `method ${ctx.method} is not allowed here`);
    } catch (err) {
      // a refusal no writer recorded on its way up (a route's rule, its step-up, the enrolment wall) is recorded here, once
      if (ctx.state.identity && !isRecorded(err)) (ctx.state as { denials?: { refused(ctx: Context, err: unknown): void } }).denials?.refused(ctx, err);
      renderFailure(ctx, err);
    }
    try {
      if (deps.errorPage && ctx.status >= 400 && wantsPage(ctx)) deps.errorPage(ctx, ctx.status, (ctx.body as ErrorBody).error);
    } catch (err) {
      ctx.log.error({ err }, 'error page failed');
    } finally {
      if (started) {
        const ms = performance.now() - started;
        metrics?.observe(ctx, ms);
        // the path only: query strings may carry codes or tickets
        if (log.isLevelEnabled('info'))
          log.info({ request_id: id, method: ctx.method, path: ctx.path, status: ctx.status, ms: Math.round(ms * 10) / 10 }, 'request');
      }
    }
  };
}

type ErrorBody = { error: { code: string; message: string; details?: unknown } };

/** A browser asking for a page (not the API) that is about to get an error body: it gets a page instead. */
function wantsPage(ctx: Context): boolean {
  const body = ctx.body as Partial<ErrorBody> | undefined;
  if (!body || typeof body !== 'object' || !body.error || typeof body.error.message !== 'string') return false;
  const path = ctx.path;
  if (path === '/api' || path.startsWith('/api/') || path === '/ws' || path === '/metrics' || path === '/healthz' || path === '/readyz') return false;
  return (ctx.get('accept') || '').includes('text/html');
}

async function readiness(ctx: Context, state: BootState, version: string, database?: Readiness): Promise<void> {
  ctx.set('Cache-Control', 'no-store');
  if (!state.bootComplete || state.stopping) {
    ctx.status = 503;
    ctx.set('Retry-After', '5');
    // the shape of the database-away answer below, with the error body beside it
    // a database boot is still waiting for is named with its words (a missing database waits forever)
    const dbAway = !state.stopping && !state.bootError && state.dbError ? `database unreachable: ${state.dbError}` : null;
    const reason = state.stopping ? 'stopping' : state.bootError ? 'boot_failed' : dbAway ? 'database_unavailable' : 'booting';
    ctx.body = {
      status: 'unavailable',
      reason,
      error: {
        code: state.stopping || dbAway ? 'unavailable' : 'booting',
        message: state.bootError ?? (state.stopping ? 'shutting down' : (dbAway ?? 'booting')),
      },
    };
    return;
  }
  // a balancer stops sending traffic here while the database is away
  const db = database ? await database.check() : { ok: true, reason: null };
  ctx.status = db.ok ? 200 : 503;
  if (!db.ok) ctx.set('Retry-After', '2');
  ctx.body = db.ok ? { status: 'ready', version } : { status: 'unavailable', reason: db.reason, error: { code: 'unavailable', message: db.reason } };
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
  /** renders an error as a page for a browser outside /api (the web area's layout) */
  errorPage?: (ctx: Context, status: number, error: ErrorBody['error']) => void;
}

/** The Koa app with the middleware every request passes; areas add theirs with mount(). */
export function createHttpApp(deps: HttpAppDeps): Koa {
  // maxIpsCount: the client is the entry the nearest proxy added; entries before it are the client's own words
  const hops = deps.proxyHops ?? 0;
  // Koa and find-my-way are loaded when a service makes its app: a CLI command never does
  const KoaApp = createRequire(import.meta.url)('koa') as typeof Koa;
  const app = new KoaApp({ keys: deps.keys, proxy: hops > 0, maxIpsCount: hops });
  app.silent = true; // errors are logged by the core middleware
  // the request's logger, made on first use (most requests never log beyond the access line)
  const log = deps.log;
  Object.defineProperty(app.context, 'log', {
    configurable: true,
    get(this: Context & { _log?: Logger }) {
      return (this._log ??= log.child({ request_id: this.state.requestId }));
    },
  });
  app.use(core(deps));
  return app;
}

/** The request's lines go to `log` from here on (a plugin's route: the plugin's logger). */
export function setRequestLogger(ctx: Context, log: Logger): void {
  (ctx as Context & { _log?: Logger })._log = log.child({ request_id: ctx.state.requestId });
}

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

/** A mounted dispatch, and the area routers it serves (for the OpenAPI document: collectEndpoints). */
export type Dispatch = Koa.Middleware & { routers: Router[] };

/**
 * Mounts every area's routes as ONE radix-tree router (find-my-way): a request is matched once,
 * in time that does not grow with the number of routes, instead of router after router and
 * pattern after pattern. Areas still write @koa/router routes (the route definitions feed the
 * OpenAPI document); their layers are compiled here. A path known for other methods answers 405
 * with Allow (OPTIONS: 204 with Allow).
 */
export function mountRouters(app: Koa, routers: Router[]): void {
  const tree = (createRequire(import.meta.url)('find-my-way') as typeof FindMyWay)({ ignoreTrailingSlash: true, caseSensitive: false });
  for (const router of routers) {
    for (const layer of router.stack) {
      if (!layer.methods.length || typeof layer.path !== 'string') throw new Error(`only plain routes can be mounted (${String(layer.path)})`);
      const chain = compose(layer.stack as Koa.Middleware[]);
      tree.on(layer.methods as FindMyWay.HTTPMethod[], layer.path, () => undefined, { chain, pattern: layer.path });
    }
  }
  const dispatch = (async (ctx: Context, next: Next) => {
    const found = tree.find(ctx.method as FindMyWay.HTTPMethod, ctx.path);
    if (found) {
      const { chain, pattern } = found.store as { chain: Koa.Middleware; pattern: string };
      ctx.params = { ...found.params };
      (ctx as { _matchedRoute?: string })._matchedRoute = pattern;
      return chain(ctx, next);
    }
    await next();
    if (ctx.body !== undefined || ctx.status !== 404) return;
    const allowed = METHODS.filter((m) => tree.find(m, ctx.path));
    if (!allowed.length) return;
    ctx.set('Allow', allowed.join(', '));
    if (ctx.method === 'OPTIONS') ctx.status = 204;
    else ctx.status = 405;
  }) as Dispatch;
  dispatch.routers = routers;
  app.use(dispatch);
}
