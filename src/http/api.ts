import Router from '@koa/router';
import type Joi from 'joi';
import type Koa from 'koa';
import type { Context, Middleware } from 'koa';
import { requireIdentity, requireIdentityThatChanges, requirePermission } from './guards.js';
import { allowLargerBody, jsonBody, readOwnBytes, readsOwnBody } from './body.js';
import type { Dispatch } from './app.js';
import { validate } from './validate.js';
import type { JsonSchema } from './joi-schema.js';

/**
 * One way to write an HTTP API route: method, path, tag, summary, the guard, and the joi
 * schemas of params, query and body. The same definition validates requests (through
 * validate(), so a 400 looks the same everywhere) and feeds the OpenAPI document
 * (src/http/openapi.ts), so the documentation cannot drift from what is enforced.
 */

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/**
 * Who may call: nobody needs to be known (`none`), an identity is used when present
 * (`optional`), any identity (`identity`, else 401), or one permission (401 / 403).
 */
export type RouteAuth = 'none' | 'optional' | 'identity' | { permission: string };

export interface ResponseDoc {
  description: string;
  /** a joi schema or a JSON Schema of the body */
  schema?: Joi.Schema<unknown> | JsonSchema;
  /** defaults to application/json when a schema is given */
  contentType?: string;
  headers?: Record<string, string>;
}

/** How a route's body is read: see EndpointDef.bodyMode. */
export type BodyMode = 'json' | 'manual' | 'raw';

export interface EndpointDef<P = unknown, Q = unknown, B = unknown, M extends BodyMode = BodyMode> {
  method: HttpMethod;
  /** relative to the router's prefix, in router syntax (`/:id`) */
  path: string;
  /**
   * The operation's name in the API document, unique in it: a verb and what it acts on, in
   * camelCase (`listUsers`, `revokeUserKey`); generated clients name their functions after it.
   * Every route of the service names one; a plugin's route without one is named after its
   * method and path (docs/client.md).
   */
  operationId?: string;
  summary: string;
  description?: string;
  /** defaults to the router's tag */
  tag?: string;
  auth: RouteAuth;
  /**
   * what the document says the operation needs, when the route checks the credential itself
   * (logout, which needs a session; the ws upgrade, authenticated before Koa): generated clients
   * and Swagger UI then send one
   */
  documentedAuth?: RouteAuth;
  params?: Joi.ObjectSchema<P>;
  query?: Joi.ObjectSchema<Q>;
  body?: Joi.Schema<B>;
  /**
   * Request headers the route reads, documented as header parameters (keys as the headers'
   * names; the handler checks them, e.g. a webhook's event and delivery headers).
   */
  headers?: Joi.ObjectSchema<unknown>;
  /**
   * `json` (default): the JSON body is parsed and validated before the handler.
   * `manual`: documented only; the handler validates (e.g. a 409 that must come before a 400).
   * `raw`: the handler reads ctx.request.rawBody itself (signature checks over the raw bytes).
   */
  bodyMode?: M;
  /** content type documented for a `raw` body */
  bodyContentType?: string;
  /** by status; `default`: any other status (an answer the route does not describe) */
  responses?: Partial<Record<number | 'default', string | ResponseDoc>>;
  /** run after the guard and before validation (e.g. a "still loading" check) */
  middleware?: Middleware[];
  /** served, but left out of the OpenAPI document */
  hidden?: boolean;
  /** bodies up to this many bytes (default 1 MiB); for fixed paths only */
  bodyLimit?: number;
  /**
   * The action reaches the host or changes who is trusted: a web session of an account with a
   * second factor must have verified it recently (403 step_up_required). Checked after the
   * guard, before the body, by the function the authentication middleware puts on ctx.state.
   */
  stepUp?: boolean;
  /**
   * `operation`: the route's permission (documented as usual) is judged by the operation it
   * runs, which records its own refusal (a socket operation: the same event over HTTP, ws and
   * the bus); the route itself only requires an identity.
   */
  permissionCheck?: 'route' | 'operation';
  /**
   * A change with `auth: 'identity'` that a key scoped to reads may still make: what only reads
   * or gives up access (a ws ticket, a key revoking itself). Every other change of a route that
   * names no permission needs a key scoped with api:write (src/http/guards.ts).
   */
  readScopedMay?: boolean;
}

/** What the authentication middleware offers routes beside the identity (src/auth). */
interface StepUpState {
  identity?: unknown;
  stepUp?: { require(identity: unknown): Promise<void> };
}

export interface Input<P = unknown, Q = unknown, B = unknown> {
  params: P;
  query: Q;
  body: B;
}

/** Sets ctx.body itself, or returns the body (anything but undefined). */
export type EndpointHandler<P = unknown, Q = unknown, B = unknown> = (ctx: Context, input: Input<P, Q, B>) => unknown;

/** true for `any` (and only for it). */
type IsAny<T> = 0 extends 1 & T ? true : false;

/**
 * A schema that says nothing of its value (`ObjectSchema<any>`, what a plain `Joi.object({...})`
 * is) would hand the handler `any`: endpoint() refuses it, the error naming the remedy.
 */
type Typed<K extends 'params' | 'query' | 'body', T> = IsAny<T> extends true ? { [k in K]?: `untyped ${K} schema: write Joi.object<T, true>({...})` } : unknown;

/** Every schema of a definition declares its type (see Typed). */
export type TypedSchemas<P, Q, B> = Typed<'params', P> & Typed<'query', Q> & Typed<'body', B>;

/** The body a handler is given: the validated one, unless it reads the body itself (`manual`, `raw`). */
type BodyOf<B, M extends BodyMode> = M extends 'json' ? B : undefined;

/** A registered definition with its full path and tag, as the OpenAPI generator reads it. */
export interface Endpoint extends EndpointDef {
  fullPath: string;
  tag: string;
}

const registry = new WeakMap<Router, Endpoint[]>();

/** The definitions registered on a router (empty for a plain @koa/router). */
export function endpointsOf(router: Router): readonly Endpoint[] {
  return registry.get(router) ?? [];
}

/** A change of the caller's own things (a route that names no permission): a key scoped to reads may not ask for it. */
export function changesOwn(def: Pick<EndpointDef, 'auth' | 'method' | 'readScopedMay' | 'permissionCheck'>): boolean {
  return def.auth === 'identity' && def.method !== 'GET' && !def.readScopedMay && def.permissionCheck !== 'operation';
}

export function guardFor(auth: RouteAuth, permissionCheck: EndpointDef['permissionCheck'] = 'route', change = false): Middleware | null {
  if (auth === 'none' || auth === 'optional') return null;
  if (auth === 'identity' || permissionCheck === 'operation') return change ? requireIdentityThatChanges : requireIdentity;
  return requirePermission(auth.permission);
}

function joinPath(prefix: string, path: string): string {
  const full = `${prefix}${path === '/' && prefix ? '' : path}`;
  return full.length > 1 ? full.replace(/\/+$/, '') : full || '/';
}

export class ApiRouter {
  readonly router: Router;
  private readonly prefix: string;
  private readonly tag: string;
  private readonly list: Endpoint[] = [];

  constructor(opts: { prefix?: string; tag: string }) {
    this.prefix = opts.prefix ?? '';
    this.tag = opts.tag;
    this.router = new Router(this.prefix ? { prefix: this.prefix } : {});
    registry.set(this.router, this.list);
  }

  /** The handler's input is typed by the schemas; a body it reads itself (`manual`, `raw`) is not given it (undefined). */
  endpoint<P = unknown, Q = unknown, B = unknown, M extends BodyMode = 'json'>(
    def: EndpointDef<P, Q, B, M> & TypedSchemas<P, Q, B>,
    handler: EndpointHandler<P, Q, BodyOf<B, M>>,
  ): this {
    const guard = guardFor(def.auth, def.permissionCheck, changesOwn(def));
    const parseBody = def.body !== undefined && (def.bodyMode ?? 'json') === 'json';
    const fullPath = joinPath(this.prefix, def.path);
    // `raw`: the parser leaves the body alone; its exact bytes are ctx.request.rawBody when the handler runs
    const ownBytes = def.bodyMode === 'raw';
    if (ownBytes) readsOwnBody(def.method, fullPath);
    const run = async (ctx: Context) => {
      if (def.stepUp) {
        const state = ctx.state as StepUpState;
        await state.stepUp?.require(state.identity);
      }
      if (ownBytes) await readOwnBytes(ctx);
      const input: Input = {
        params: def.params ? validate(def.params, { ...ctx.params }, 'params') : ctx.params,
        query: def.query ? validate(def.query, { ...ctx.query }, 'query') : undefined,
        body: parseBody ? validate(def.body!, jsonBody(ctx), 'body') : undefined,
      };
      const out = await handler(ctx, input as Input<P, Q, BodyOf<B, M>>);
      if (out !== undefined) ctx.body = out;
    };
    // the guard and the handler in one function, unless the route adds middleware of its own
    const chain: Middleware[] = def.middleware?.length
      ? [...(guard ? [guard] : []), ...def.middleware, run]
      : [(ctx: Context) => (guard ? guard(ctx, () => run(ctx)) : run(ctx))];
    const method = def.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'delete';
    (this.router[method] as (path: string, ...mw: Middleware[]) => unknown)(def.path, ...chain);
    if (def.bodyLimit) {
      if (fullPath.includes(':')) throw new Error(`bodyLimit needs a fixed path: ${fullPath}`);
      allowLargerBody(def.method, fullPath, def.bodyLimit);
    }
    this.list.push({ ...def, fullPath, tag: def.tag ?? this.tag } as Endpoint);
    return this;
  }

  routes(): Router {
    return this.router;
  }
}

/** Every area router mounted on the app (mountRouters keeps them on its dispatch). */
export function mountedRouters(app: Koa): Router[] {
  return app.middleware.flatMap((mw) => (mw as Partial<Dispatch>).routers ?? []);
}

/** The documented endpoints of an app, and the /api routes mounted without a definition. */
export function collectEndpoints(app: Koa): { endpoints: Endpoint[]; undocumented: { method: string; path: string }[] } {
  const endpoints: Endpoint[] = [];
  const undocumented: { method: string; path: string }[] = [];
  for (const router of mountedRouters(app)) {
    const defs = endpointsOf(router);
    endpoints.push(...defs);
    const known = new Set(defs.map((d) => `${d.method} ${d.fullPath}`));
    for (const layer of router.stack) {
      const path = typeof layer.path === 'string' ? joinPath('', layer.path) : '';
      if (!(path === '/api' || path.startsWith('/api/'))) continue;
      for (const method of layer.methods) {
        if (method === 'HEAD' || method === 'OPTIONS') continue;
        if (!known.has(`${method} ${path}`)) undocumented.push({ method, path });
      }
    }
  }
  return { endpoints, undocumented };
}
