import type { Context, Middleware, Next, Request } from 'koa';
import type FindMyWay from 'find-my-way';
import { createRequire } from 'node:module';
import type getRawBodyType from 'raw-body';
import { loneSurrogateIn } from '../unicode.js';
import { HttpError, payloadTooLarge, badField } from './errors.js';

export const DEFAULT_BODY_LIMIT = 1024 * 1024;

declare module 'koa' {
  interface Request {
    /** what @koa/bodyparser parsed (a JSON or form body); routes read it through jsonBody / formBody */
    body?: unknown;
    /** the exact bytes, only on a route that reads its own body (readOwnBytes: the SCM webhook) */
    rawBody?: Buffer;
  }
  interface ExtendableContext {
    /** set for a route that reads its own bytes: @koa/bodyparser leaves the body unread */
    disableBodyParser?: boolean;
  }
}

/** The options of @koa/bodyparser this module sets. */
interface ParserOptions {
  parsedMethods: string[];
  enableTypes: Array<'json' | 'form'>;
  extendTypes: { json: string[] };
  jsonStrict: boolean;
  jsonLimit: number;
  formLimit: number;
  encoding: string;
  detectJSON: (ctx: Context) => boolean;
  onError: (err: Error, ctx: Context) => void;
}
// Loaded without its type declarations: they declare `ctx.request.rawBody` a string on every
// request (the text it decoded), where here it is the webhook's bytes and nothing elsewhere.
// Loaded at the first parser made (a CLI command never makes one).
let koaBodyParser: ((opts: ParserOptions) => Middleware) | undefined;
const bodyParser = (opts: ParserOptions): Middleware =>
  (koaBodyParser ??= (createRequire(import.meta.url)('@koa/bodyparser') as { bodyParser(opts: ParserOptions): Middleware }).bodyParser)(opts);

/** The methods whose bodies are read; any other request passes the body stage untouched. */
export const BODY_METHODS: ReadonlySet<string> = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** What a route registered here reads unlike the rest: a larger limit, or its own bytes. */
interface RouteBody {
  limit?: number;
  ownBytes?: boolean;
}
// matched as the dispatch matches (src/http/app.ts mountRouters): any case, with or without a trailing slash
// (find-my-way and raw-body are loaded at first use: a CLI command loads this module and reads no body)
let tree: FindMyWay.Instance<FindMyWay.HTTPVersion.V1> | undefined;
const routes = () => (tree ??= (createRequire(import.meta.url)('find-my-way') as typeof FindMyWay)({ ignoreTrailingSlash: true, caseSensitive: false }));
let rawBody: typeof getRawBodyType | undefined;
const getRawBody: typeof getRawBodyType = ((...args: Parameters<typeof getRawBodyType>) =>
  (rawBody ??= createRequire(import.meta.url)('raw-body') as typeof getRawBodyType)(...args)) as typeof getRawBodyType;
const registered = new Map<string, RouteBody>();

function setRoute(method: string, path: string, change: RouteBody): void {
  const key = `${method} ${path}`;
  const known = registered.get(key);
  if (known) {
    Object.assign(known, change);
    return;
  }
  const store: RouteBody = { ...change };
  registered.set(key, store);
  routes().on(method as FindMyWay.HTTPMethod, path, () => undefined, store);
}

function routeOf(ctx: Context): RouteBody | undefined {
  return routes().find(ctx.method as FindMyWay.HTTPMethod, ctx.path)?.store as RouteBody | undefined;
}

/** Lets one route (a fixed path) take bodies up to `limit` bytes (`POST /api/notifications/batch`: 8 MiB). */
export function allowLargerBody(method: string, path: string, limit: number): void {
  setRoute(method, path, { limit });
}

/** The parser leaves this route's body unread: the route reads the exact bytes itself (readOwnBytes). */
export function readsOwnBody(method: string, path: string): void {
  setRoute(method, path, { ownBytes: true });
}

/**
 * How the body stage left a request: parsed (ctx.request.body), empty (parsed as {}), malformed
 * JSON (the route that reads it answers 400), or unread (a type the parser does not take).
 * Nothing: the stage did not parse it (a route that reads its own bytes).
 */
const STATE = Symbol('body state');
/** the field of a JSON body holding a lone surrogate (state 'lone_surrogate') */
const FIELD = Symbol('body field');
type BodyRequest = Request & {
  [STATE]?: 'parsed' | 'empty' | 'malformed' | 'prototype' | 'unread' | 'not_utf8' | 'lone_surrogate';
  [FIELD]?: string;
};

/** What @hapi/bourne (the parser's JSON.parse) says of a "__proto__" key. */
const PROTOTYPE_REFUSED = 'Object contains forbidden prototype property';

/** The parser's errors as the project's: 413 with the limit, 415 for an encoding it cannot undo, malformed JSON left to the route. */
function parserFailed(err: Error, ctx: Context, limit: number): void {
  const e = err as Error & { type?: string; status?: number };
  if (e.type === 'entity.too.large') throw payloadTooLarge(limit);
  if (e.type === 'request.aborted') throw new HttpError(400, 'validation_failed', 'request aborted');
  if (e.status === 415) throw new HttpError(415, 'unsupported_media_type', e.message);
  if (err instanceof SyntaxError && e.status === 400) {
    // a route that never reads the body answers as if it were not there, as before the parser
    // (its JSON parser also refuses a "__proto__" key, which could reach an object's prototype)
    (ctx.request as BodyRequest)[STATE] = err.message === PROTOTYPE_REFUSED ? 'prototype' : 'malformed';
    return;
  }
  throw new HttpError(400, 'validation_failed', 'unreadable request body');
}

function parser(limit: number): Middleware {
  return bodyParser({
    parsedMethods: [...BODY_METHODS],
    enableTypes: ['json', 'form'],
    // application/json and any */*+json, as the API takes them (its own list stays after these)
    extendTypes: { json: ['application/json', '+json'] },
    // any JSON value: a scalar body reaches the route's validation, which names the field
    jsonStrict: false,
    jsonLimit: limit,
    formLimit: limit,
    encoding: 'utf-8',
    // a body without a content type is read as JSON, as the API always did
    detectJSON: (ctx) => !ctx.get('content-type'),
    onError: (err, ctx) => parserFailed(err, ctx, limit),
  });
}

/** One parser per limit: the default one, and one for each larger limit a route registered. */
const parsers = new Map<number, Middleware>();
function parserFor(limit: number): Middleware {
  let p = parsers.get(limit);
  if (!p) parsers.set(limit, (p = parser(limit)));
  return p;
}

/** What the parser kept beside the parsed body: how it left the request (its text is not kept). */
function settle(ctx: Context): void {
  const request = ctx.request as BodyRequest;
  if (request[STATE] !== undefined || ctx.disableBodyParser) return;
  // the parser's text of the body (declared a Buffer here: the webhook's bytes)
  const text: unknown = request.rawBody;
  if (typeof text === 'string') {
    request.rawBody = undefined;
    request[STATE] = text.length === 0 ? 'empty' : 'parsed';
    if (text.length === 0) request.body = {};
    else unicodeProblem(ctx, request, text);
  } else {
    // the parser answers {} for a type it does not read: nothing was parsed
    request[STATE] = 'unread';
    request.body = undefined;
  }
}

/**
 * Text that would not be stored as sent: bytes that are not UTF-8 (the parser puts U+FFFD in
 * their place, so the text is longer than the declared length; an uncompressed body only), or a
 * `\uD800`-style escape of half a surrogate pair (no UTF-8 holds it). Looked for only where the
 * text shows a sign of either: a plain body costs two scans.
 */
function unicodeProblem(ctx: Context, request: BodyRequest, text: string): void {
  const declared = ctx.get('content-length');
  if (text.includes('\uFFFD') && declared && !ctx.get('content-encoding') && Buffer.byteLength(text) !== Number(declared)) {
    request[STATE] = 'not_utf8';
    return;
  }
  const field = loneSurrogateIn(text, request.body, 'body');
  if (field) {
    request[STATE] = 'lone_surrogate';
    request[FIELD] = field;
  }
}

/**
 * The body stage, for the methods with a body (BODY_METHODS; the caller skips it for the rest):
 * a declared length over the route's limit is 413 before anything is read, then @koa/bodyparser
 * reads JSON and form bodies up to that limit into ctx.request.body. A route registered with
 * readsOwnBody gets `ctx.disableBodyParser` and reads its bytes itself. Other types stay unread
 * (jsonBody answers 415 for them).
 */
export function readBody(defaultLimit = DEFAULT_BODY_LIMIT) {
  // made at the first body, not with the app: the parser's packages are not a start's work
  let byDefault: Middleware | undefined;
  return async (ctx: Context, next: Next) => {
    const route = routeOf(ctx);
    const limit = route?.limit ?? defaultLimit;
    const declared = Number(ctx.get('content-length') || 0);
    if (declared > limit) throw payloadTooLarge(limit);
    if (route?.ownBytes) ctx.disableBodyParser = true;
    const parse = limit === defaultLimit ? (byDefault ??= parserFor(defaultLimit)) : parserFor(limit);
    await parse(ctx, () => {
      settle(ctx);
      return next();
    });
  };
}

/** Whether the request carries a body at all (chunked, or a length other than 0). */
function hasBody(ctx: Context): boolean {
  const length = ctx.req.headers['content-length'];
  return ctx.req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

const isJsonType = (type: string) => type === 'application/json' || type.endsWith('+json');

/** The JSON body (an empty body is {}); another content type -> 415, malformed JSON -> 400 naming `body`. */
export function jsonBody(ctx: Context): unknown {
  // a method without a body, as before: its body is not read
  if (!BODY_METHODS.has(ctx.method)) return {};
  const request = ctx.request as BodyRequest;
  const state = request[STATE];
  if (state === undefined) throw new Error(`${ctx.method} ${ctx.path} reads its own bytes (readsOwnBody): it has no parsed body`);
  if (state === 'empty' || (state === 'unread' && !hasBody(ctx))) return {};
  const type = request.type;
  // form bodies are not accepted on the API: a cross-site HTML form could send them; unread ones are of another type
  if (state === 'unread' || (type && !isJsonType(type))) {
    throw new HttpError(415, 'unsupported_media_type', `content type ${type || 'none'} is not accepted, send application/json`);
  }
  if (state === 'malformed') throw badField('body', 'is not valid JSON');
  if (state === 'prototype') throw badField('body', 'must not hold a "__proto__" key');
  if (state === 'not_utf8') throw badField('body', 'is not valid UTF-8');
  if (state === 'lone_surrogate') throw badField(request[FIELD] ?? 'body', 'is not well-formed Unicode (half of a surrogate pair)');
  return request.body;
}

/** The form body (application/x-www-form-urlencoded) as flat fields: a repeated field keeps its last value. */
export function formBody(ctx: Context): Record<string, string> {
  const out: Record<string, string> = {};
  const body = ctx.request.body;
  if (ctx.request.type !== 'application/x-www-form-urlencoded' || !body || typeof body !== 'object') return out;
  for (const [k, v] of Object.entries(body)) {
    const value = Array.isArray(v) ? v[v.length - 1] : v;
    if (typeof value === 'string') out[k] = value;
  }
  return out;
}

/**
 * The exact bytes of the body, for a route registered with readsOwnBody (a signature over them):
 * read once with raw-body up to the route's limit (413 past it), kept as ctx.request.rawBody.
 */
export async function readOwnBytes(ctx: Context): Promise<Buffer> {
  const request = ctx.request as BodyRequest;
  if (request.rawBody) return request.rawBody;
  if (request.body !== undefined || request[STATE] !== undefined)
    throw new Error(`${ctx.method} ${ctx.path}: the body was parsed before the route read its bytes`);
  if (!BODY_METHODS.has(ctx.method)) return (request.rawBody = Buffer.alloc(0));
  const limit = routeOf(ctx)?.limit ?? DEFAULT_BODY_LIMIT;
  try {
    request.rawBody = await getRawBody(ctx.req, { limit });
  } catch (err) {
    const e = err as { type?: string };
    if (e.type === 'entity.too.large') throw payloadTooLarge(limit);
    if (e.type === 'request.aborted') throw new HttpError(400, 'validation_failed', 'request aborted');
    throw new HttpError(400, 'validation_failed', 'unreadable request body');
  }
  return request.rawBody;
}

/** Answers with JSON that is already text (a view made once and kept). */
export function sendJson(ctx: Context, json: string): void {
  // set directly: koa's type setter looks the type up every time
  ctx.res.setHeader('Content-Type', 'application/json; charset=utf-8');
  ctx.body = json;
}
