/** The frames and options of the gateway client (src/client/gateway-client.ts re-exports them). */
import type { components } from './openapi.js';

/** A notification as pushed (`system:notify` / `user:notify`), or a clear of one. */
export interface NotificationFrame {
  id: string;
  seq: number | null;
  title?: string;
  message?: string;
  level?: 'info' | 'success' | 'warning' | 'error';
  source?: string | null;
  link?: string | null;
  created_at?: string;
  updated_at?: string;
  read?: boolean;
  broadcast: boolean;
  toast?: boolean;
  action?: 'clear';
  cleared?: true;
  persist?: false;
}

export interface SocketResponse {
  request_id: string;
  operation: string;
  provider: string | null;
  ok: boolean;
  result: unknown;
  error: null | { code: string; message: string; details?: unknown };
}

/** Frames the server sends (plugins add their own `plugin:<id>:<name>` events). */
/** An event of the audit trail, as GET /api/audit answers it (to holders of feature:admin.audit): the API document's AuditEvent. */
export type AuditEventFrame = components['schemas']['AuditEvent'];

export interface ServerEvents {
  'gateway:welcome': { username: string; permissions: string[]; last_seq: number };
  'gateway:pong': { time: string };
  'gateway:error': { code: string; message: string; ref: string | null };
  'system:notify': NotificationFrame;
  'user:notify': NotificationFrame;
  'notifications:resumed': { last_seq: number; count: number; more: boolean; truncated?: boolean };
  'notifications:catch_up': Record<string, never>;
  'socket:response': SocketResponse;
  'socket:providers_changed': { instance: string; providers: string[] };
  'audit:event': AuditEventFrame;
}

export type ClientState = 'connecting' | 'resuming' | 'live' | 'reconnecting' | 'refused' | 'closed';

export type NotifyEvent = 'system:notify' | 'user:notify';

/** What the client reports besides the server's frames. */
export interface ClientEvents {
  /**
   * Every notification push exactly once, in order, whether live or replayed. `replayed`: it was
   * handed on at the end of a resume (missed while away, or pushed while the resume ran).
   */
  notification: { event: NotifyEvent; payload: NotificationFrame; replayed: boolean };
  state: { state: ClientState; reason?: string };
  /** the history before the cursor was dropped by retention: what the client holds is partial */
  truncated: { last_seq: number };
}

/** The part of the WebSocket interface this client uses: browsers' and the `ws` package's fit. */
export interface SocketLike {
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: { message?: string; error?: unknown }) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  /** `ws` only: cuts the connection without waiting for a close handshake a dead peer never sends */
  terminate?(): void;
}

export type SocketFactory = new (url: string, protocols?: string | string[], options?: { headers?: Record<string, string> }) => SocketLike;

export interface KeepaliveOptions {
  /** a `gateway:ping` this often while connected */
  intervalMs: number;
  /** no frame from the server this long after a ping: the connection is dropped and made again */
  timeoutMs: number;
}

export interface GatewayClientOptions {
  /** ws(s)://host/ws; several: each reconnect tries the next (failover without a balancer) */
  url: string | string[];
  /** the WebSocket constructor (default: the global one; in Node pass `ws`'s) */
  WebSocket?: SocketFactory;
  /** Node only: credential headers for the upgrade (X-API-Key, Authorization) */
  headers?: Record<string, string>;
  /**
   * Fetches a fresh one-time ticket before each connection (browsers). Throwing a
   * CredentialRefusedError stops the client in state `refused`; any other error is retried.
   */
  ticket?: () => Promise<string>;
  /** the seq to resume from (e.g. the last_seq of the history the page loaded); default: the welcome's */
  since?: number;
  /** reconnect delays: the first, doubling to the last, each picked between half and all of it */
  backoff?: { initialMs: number; maxMs: number };
  /** default timeout of request() */
  requestTimeoutMs?: number;
  /** application-level keepalive (browsers cannot send ws pings); default 20 s / 5 s, false: off */
  keepalive?: KeepaliveOptions | false;
}
