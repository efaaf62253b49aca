import type { RawData } from 'ws';
import type { ApiIdentity } from '../auth/identity.js';
import type { ClientErrorCode, ClientFrameDef } from '../bus/channels.js';
import { DomainError, fieldErrorsOf, fieldErrorsText, isRecorded, type DomainErrorCode } from '../errors.js';
import { isDbUnavailable } from '../db/knex.js';
import type { Logger } from '../log.js';
import type { Connection } from './connection.js';
import { parseFrame } from './frames.js';
import type { GatewayOptions } from './options.js';

/**
 * A client frame's dispatch (src/gateway/gateway.ts): the frame rate, the frame parsed, its
 * declaration found, the caller's permission checked as IAM holds it now, the payload checked
 * against its schema, and the handler run as the caller; a DomainError answered with its ws code.
 */

/** A DomainError as ws answers it (DESIGN 7's codes, and the service's own): the one mapping of the ws transport. */
const WS_CODE: Record<DomainErrorCode, ClientErrorCode> = {
  validation_failed: 'invalid_args',
  not_found: 'invalid_args',
  conflict: 'invalid_args',
  unauthorized: 'forbidden',
  forbidden: 'forbidden',
  mfa_required: 'forbidden',
  step_up_required: 'forbidden',
  mfa_enrollment_required: 'forbidden',
  rate_limited: 'rate_limited',
  unavailable: 'unavailable',
};

/** What the dispatch needs of the gateway. */
export interface FrameDispatch {
  /** the frames the areas declared, by event */
  frames: ReadonlyMap<string, ClientFrameDef>;
  /** the gateway's options, as they are when a frame arrives (frameRate: frames a second a connection may send) */
  options: Pick<GatewayOptions, 'frameRate'>;
  log: Logger;
  /** a frame refused to its caller (GatewayDeps.refused) */
  refused?: (actor: ApiIdentity, event: string, err: unknown) => void;
  /** the identity as IAM sees it now; null: the connection was dropped */
  currentIdentity(conn: Connection): Promise<ApiIdentity | null>;
  /** unregisters and closes a connection */
  drop(conn: Connection, code: number, reason: string): void;
}

export async function dispatchFrame(g: FrameDispatch, conn: Connection, data: RawData, isBinary: boolean): Promise<void> {
  if (conn.gone) return;
  if (!conn.takeFrame()) {
    conn.error('rate_limited', `more than ${g.options.frameRate} frames a second`);
    g.drop(conn, 1008, 'frame rate exceeded');
    return;
  }
  await conn.welcomed;
  if (conn.gone) return;
  if (isBinary) return conn.error('bad_frame', 'frames are JSON text');
  const text = Array.isArray(data) ? Buffer.concat(data).toString('utf8') : Buffer.from(data as Buffer).toString('utf8');
  const parsed = parseFrame(text);
  if (!parsed.frame) return conn.error('bad_frame', parsed.error, parsed.ref);
  const frame = parsed.frame;
  const ref = frame.ref ?? null;
  const def = g.frames.get(frame.event);
  if (!def) return conn.error('unknown_event', `unknown event ${JSON.stringify(frame.event)}`, ref);
  let identity: ApiIdentity | null = conn.identity;
  try {
    // every frame but a ping acts as the caller: with the permissions IAM holds now
    if (def.event !== 'gateway:ping') {
      identity = await g.currentIdentity(conn);
      if (!identity) return;
      if (def.permission !== null && !identity.allows(def.permission)) {
        const refusal = new DomainError('forbidden', `missing permission ${def.permission}`);
        g.refused?.(conn.actor, def.event, refusal);
        return conn.error('forbidden', refusal.message, ref);
      }
    }
    let payload: unknown = frame.payload;
    if (def.schema) {
      // each problem by the field it is about, never the value (joi's own message may quote it)
      const { value, error } = def.schema.validate(frame.payload, { convert: false, abortEarly: false });
      if (error) return conn.error('invalid_args', fieldErrorsText(fieldErrorsOf(error)), ref);
      payload = value;
    }
    await def.handle(conn, payload, ref);
  } catch (err) {
    // the database is away: the connection stays, the client tries again later
    if (isDbUnavailable(err)) return conn.error('unavailable', 'the database is not reachable right now; try again shortly', ref);
    if (err instanceof DomainError) {
      if (identity && !isRecorded(err)) g.refused?.(conn.actor, def.event, err);
      return conn.error(WS_CODE[err.code], err.message, ref);
    }
    g.log.error({ err, event: frame.event }, 'websocket frame failed');
    conn.error('internal', 'internal error', ref);
  }
}
