import type Joi from 'joi';

/**
 * The contract between the ws gateway (the transport, src/gateway) and the areas that reach
 * clients through it (notifications, sockets, plugins). Areas declare what clients may send and
 * push what clients may see; neither side imports the other. docs/plugins.md shows a plugin's
 * side, docs/architecture.md the whole picture.
 */

/** Who reads: the user id, or `system:<name>` for the system key. */
export interface Viewer {
  userId: string | null;
  /** the user id, or `system:<name>` for the system identity */
  subject: string;
}

export function viewerOf(identity: { userId: string | null; username: string }): Viewer {
  return identity.userId ? { userId: identity.userId, subject: identity.userId } : { userId: null, subject: `system:${identity.username}` };
}

/** The caller behind a connection, as a frame handler sees it (ApiIdentity fits). */
export interface ClientIdentity {
  username: string;
  userId: string | null;
  isSystem: boolean;
  allows(permission: string): boolean;
}

/** Who receives a push: every connection, one user's, or those holding a permission. */
export type Audience = { all: true } | { userId: string } | { permission: string };

export interface ClientPush {
  event: string;
  payload: unknown;
  audience: Audience;
  /**
   * Position in the notification stream, when the push is part of it: a replay skips what was
   * already pushed live, and live pushes wait while a replay runs.
   */
  seq?: number | null;
}

/** One connection, as a frame handler sees it. */
export interface ClientSession {
  /** the identity as IAM sees it now (refreshed before each permission-checked frame) */
  readonly identity: ClientIdentity;
  /** that identity acting from the connection's address: the actor of what a frame does (the trail records the address) */
  readonly actor: ClientIdentity;
  readonly viewer: Viewer;
  send(event: string, payload: unknown, ref?: string | null): void;
  error(code: ClientErrorCode, message: string, ref?: string | null): void;
  /**
   * Runs a replay: live pushes to this connection wait until it ends, writes pause while the
   * socket holds too much, and `write` skips (returns false) a seq already pushed live. One
   * replay at a time: a second one meanwhile is answered `busy` and `fn` does not run (null).
   */
  replay<T>(ref: string | null, fn: (write: (event: string, payload: unknown, seq: number | null) => Promise<boolean>) => Promise<T>): Promise<T | null>;
}

export type ClientErrorCode =
  'bad_frame' | 'unknown_event' | 'forbidden' | 'invalid_args' | 'internal' | 'rate_limited' | 'busy' | 'too_many_connections' | 'unavailable';

/** A frame clients may send: its event, the permission it needs, the schema of its payload. */
export interface ClientFrameDef<P = unknown> {
  event: string;
  /** null: any authenticated connection */
  permission: string | null;
  /** validates the payload before `handle` (a bad one is answered `invalid_args`) */
  schema?: Joi.Schema<P>;
  handle(session: ClientSession, payload: P, ref: string | null): Promise<void> | void;
}

/**
 * Refuses a schema that declares no type (a plain `Joi.object({...})` is `ObjectSchema<any>`):
 * `handle` would take an `any` payload. Without a schema the payload is `unknown`.
 */
export type TypedPayload<P> = 0 extends 1 & P ? { schema?: 'untyped payload schema: write Joi.object<T, true>({...})' } : unknown;

/** What the gateway offers areas. */
export interface ClientChannels {
  /** Declares a frame clients may send (one declaration per event); `handle` gets the payload as the schema types it. */
  frame<P>(def: ClientFrameDef<P> & TypedPayload<P>): void;
  /** Sends to every connection of the audience; the payload is encoded once. */
  push(push: ClientPush): void;
  /** Adds fields to `gateway:welcome` (e.g. the notification stream's last_seq). */
  welcome(fields: (session: ClientSession) => Promise<Record<string, unknown>>): void;
}
