import Joi from 'joi';
import type { SocketResponsePayload } from '../bus/events.js';

/** Every frame is JSON `{"event", "payload", "ref"?}` (DESIGN section 7). */
export interface ClientFrame {
  event: string;
  payload: Record<string, unknown>;
  ref?: string;
}

export type GatewayErrorCode = 'bad_frame' | 'unknown_event' | 'forbidden' | 'invalid_args' | 'internal' | 'rate_limited' | 'busy' | 'too_many_connections';

const frameSchema = Joi.object({
  event: Joi.string().min(1).max(64).required(),
  payload: Joi.object().unknown(true).default({}),
  ref: Joi.string().max(128),
});

/** Parses one text frame; on failure returns the message and whatever ref could be read. */
export function parseFrame(text: string): { frame: ClientFrame; error: null } | { frame: null; error: string; ref: string | null } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { frame: null, error: 'the frame is not JSON', ref: null };
  }
  const ref = typeof raw === 'object' && raw !== null && typeof (raw as { ref?: unknown }).ref === 'string' ? String((raw as { ref: string }).ref).slice(0, 128) : null;
  const { value, error } = frameSchema.validate(raw, { abortEarly: true, convert: false });
  if (error) return { frame: null, error: error.message, ref };
  return { frame: value as ClientFrame, error: null };
}

export function encodeFrame(event: string, payload: unknown, ref?: string | null): string {
  return JSON.stringify(ref == null ? { event, payload } : { event, payload, ref });
}

/** Who sends a socket:request: the connection's identity (ApiIdentity fits). */
export interface SocketCallerLike {
  allows(permission: string): boolean;
}

/**
 * Serves a socket:request frame with the caller's permissions and answers only that connection
 * (src/sockets/bus-handler.ts createSocketRequestHandler fits this type).
 */
export type SocketRequestHandler = (request: unknown, caller: SocketCallerLike | null) => Promise<SocketResponsePayload>;

/** Until the socket registry is wired, every request is answered unknown_provider. */
export const noSocketProviders: SocketRequestHandler = async (request) => {
  const r = (typeof request === 'object' && request !== null ? request : {}) as Record<string, unknown>;
  return {
    request_id: typeof r.request_id === 'string' ? r.request_id.slice(0, 200) : '',
    operation: typeof r.operation === 'string' ? r.operation.slice(0, 200) : '',
    provider: typeof r.provider === 'string' ? r.provider.slice(0, 64) : null,
    ok: false,
    result: null,
    error: { code: 'unknown_provider', message: 'no socket providers are registered' },
  };
};
