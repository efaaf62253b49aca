import type { Context, Next } from 'koa';
import getRawBody from 'raw-body';
import { HttpError, payloadTooLarge, badField } from './errors.js';

export const DEFAULT_BODY_LIMIT = 1024 * 1024;

declare module 'koa' {
  interface Request {
    /** the exact bytes the client sent (empty for body-less requests) */
    rawBody: Buffer;
  }
}

/** Routes that take larger bodies than the default (`POST /api/notifications/batch`), by `METHOD path`. */
const LARGER_BODIES = new Map<string, number>();

/** Lets one route (a fixed path) take bodies up to `limit` bytes. */
export function allowLargerBody(method: string, path: string, limit: number): void {
  LARGER_BODIES.set(`${method} ${path}`, limit);
}

/**
 * Reads the raw request body once, enforcing the size limit (413). Parsing is left to the
 * route (jsonBody / formBody) so a webhook can verify a signature over the raw bytes before
 * any parsing happens.
 */
export function readBody(defaultLimit = DEFAULT_BODY_LIMIT) {
  return async (ctx: Context, next: Next) => {
    ctx.request.rawBody = Buffer.alloc(0);
    if (['POST', 'PUT', 'PATCH', 'DELETE'].includes(ctx.method)) {
      const limit = LARGER_BODIES.get(`${ctx.method} ${ctx.path}`) ?? defaultLimit;
      const declared = Number(ctx.get('content-length') || 0);
      if (declared > limit) throw payloadTooLarge(limit);
      try {
        ctx.request.rawBody = await getRawBody(ctx.req, { limit });
      } catch (err) {
        const e = err as { type?: string; status?: number };
        if (e.type === 'entity.too.large') throw payloadTooLarge(limit);
        if (e.type === 'request.aborted') throw new HttpError(400, 'validation_failed', 'request aborted');
        throw new HttpError(400, 'validation_failed', 'unreadable request body');
      }
    }
    await next();
  };
}

/** The JSON body (an empty body is {}); malformed JSON -> 400. */
export function jsonBody(ctx: Context): unknown {
  const raw = ctx.request.rawBody;
  if (!raw || raw.length === 0) return {};
  const type = ctx.request.type;
  // form bodies are not accepted on the API: a cross-site HTML form could send them
  if (type && type !== 'application/json' && !type.endsWith('+json')) {
    throw new HttpError(415, 'unsupported_media_type', `content type ${type} is not accepted, send application/json`);
  }
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch {
    throw badField('body', 'is not valid JSON');
  }
}

export function formBody(ctx: Context): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(ctx.request.rawBody.toString('utf8'))) out[k] = v;
  return out;
}

/** Answers with JSON that is already text (a view made once and kept). */
export function sendJson(ctx: Context, json: string): void {
  // set directly: koa's type setter looks the type up every time
  ctx.res.setHeader('Content-Type', 'application/json; charset=utf-8');
  ctx.body = json;
}
