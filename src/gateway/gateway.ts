import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import type { ApiIdentity } from '../auth/identity.js';
import { HttpError } from '../http/errors.js';
import type { Logger } from '../log.js';
import type { NotifyKind } from '../notifications/schema.js';
import { resumeSchema } from '../notifications/schema.js';
import { NotifyError, viewerOf, type NotificationPublisher, type NotifyResult, type PushFrame, type Viewer } from '../notifications/types.js';
import { encodeFrame, noSocketProviders, parseFrame, type ClientFrame, type GatewayErrorCode, type SocketRequestHandler } from './frames.js';
import type { UpgradeAuthResult } from './upgrade-auth.js';

/** What the gateway needs of the notifications service. */
export interface NotificationFeed {
  lastSeq(): Promise<number>;
  missedSince(viewer: Viewer, since: number, limit: number): Promise<PushFrame[]>;
  notify(kind: NotifyKind, raw: unknown, opts: { sender?: string }): Promise<NotifyResult>;
}

export interface GatewayOptions {
  path: string;
  /** larger frames close the connection with 1009 (ws does it) */
  maxPayload: number;
  /** ping every interval; a peer that did not pong since the last one is dropped */
  heartbeatMs: number;
  /** a connection with more than this queued for sending is closed with 1013 */
  maxBufferedBytes: number;
  /** how long a closed slow consumer may take to drain the close frame before it is cut */
  slowCloseGraceMs: number;
  /** frames replayed by one notifications:resume at most (the client resumes again if `more`) */
  resumeLimit: number;
  /** live pushes held back during a welcome or replay at most; beyond that the client is slow (1013) */
  maxHeldFrames: number;
  /** how often every open connection's credential is checked again (a backstop to the change events) */
  revalidateMs: number;
  /** open connections per user (or system key) on this instance; one more gets gateway:error and 1008 */
  maxConnectionsPerUser: number;
  /** client frames per second a connection may send on average, and in a burst; beyond: gateway:error and 1008 */
  frameRate: number;
  frameBurst: number;
  /** a replay pauses while this much is queued for the socket, so a resume cannot flood memory */
  replayHighWaterBytes: number;
}

export const DEFAULT_GATEWAY_OPTIONS: GatewayOptions = {
  path: '/ws',
  maxPayload: 64 * 1024,
  heartbeatMs: 30_000,
  maxBufferedBytes: 1024 * 1024,
  slowCloseGraceMs: 10_000,
  resumeLimit: 1000,
  maxHeldFrames: 5000,
  revalidateMs: 30_000,
  maxConnectionsPerUser: 20,
  frameRate: 20,
  frameBurst: 60,
  replayHighWaterBytes: 256 * 1024,
};

export interface GatewayDeps {
  log: Logger;
  /** boot state: no upgrades before iam:ready or while stopping */
  state: { iamReady: boolean; stopping: boolean };
  authenticate: (req: http.IncomingMessage) => Promise<UpgradeAuthResult>;
  feed: NotificationFeed;
  /** re-reads a user's permissions before a permission-checked frame (cached by IAM); null = gone */
  refreshIdentity?: (identity: ApiIdentity) => Promise<ApiIdentity | null>;
  socketHandler?: SocketRequestHandler;
  /**
   * Checks the identities of open connections against what holds now (credential revoked or
   * expired, owner disabled or deleted, password or system key changed): fresh identity or null.
   */
  revalidate?: (identities: readonly ApiIdentity[]) => Promise<Array<ApiIdentity | null>>;
  options?: Partial<GatewayOptions>;
}

interface Held {
  data: Buffer;
  seq: number | null;
}

class Connection {
  alive = true;
  /** live pushes wait here while the welcome or a resume replay is being sent */
  hold: Held[] | null = [];
  /**
   * seqs pushed live to this connection until its first resume completes: that replay skips
   * exactly these (a seq committed on another instance was never pushed here, so it is replayed).
   * null once the first resume is done, so the set does not grow for the life of the connection.
   */
  liveSeqs: Set<number> | null = new Set();
  /** a notifications:resume is being answered: a second one waits for none, it is refused */
  resuming = false;
  welcomed!: Promise<void>;
  gone = false;
  /** token bucket of client frames */
  tokens: number;
  tokensAt = Date.now();
  /** re-checks the credential when it expires */
  expiry: NodeJS.Timeout | null = null;
  readonly viewer: Viewer;

  constructor(
    readonly ws: WebSocket,
    public identity: ApiIdentity,
    burst: number,
  ) {
    this.viewer = viewerOf(identity);
    this.tokens = burst;
  }
}

/**
 * The WebSocket endpoint /ws: authenticates at the upgrade, relays frames, and fans committed
 * notifications out: a broadcast is encoded once and the same buffer is written to every
 * socket; a targeted one goes through the userId -> connections map.
 */
export class Gateway implements NotificationPublisher {
  readonly options: GatewayOptions;
  private readonly wss: WebSocketServer;
  private readonly all = new Set<Connection>();
  /** connections by viewer subject: the user id, or `system:<name>` for the system key */
  private readonly bySubject = new Map<string, Set<Connection>>();
  private heartbeat: NodeJS.Timeout | null = null;
  private revalidator: NodeJS.Timeout | null = null;
  private socketHandler: SocketRequestHandler;
  private closing = false;
  private readonly upgradeListener = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void this.handleUpgrade(req, socket, head);
  private server: http.Server | null = null;
  /** counters for tests and metrics */
  readonly stats = { accepted: 0, slowClosed: 0, deadDropped: 0, refused: 0 };

  constructor(private readonly deps: GatewayDeps) {
    this.options = { ...DEFAULT_GATEWAY_OPTIONS, ...deps.options };
    this.socketHandler = deps.socketHandler ?? noSocketProviders;
    // no compression: at 10,000 sockets it costs CPU and memory per connection
    this.wss = new WebSocketServer({ noServer: true, maxPayload: this.options.maxPayload, perMessageDeflate: false, clientTracking: false });
  }

  /** Takes over the 'upgrade' event of the service's HTTP server and starts the heartbeat. */
  attach(server: http.Server): void {
    this.server = server;
    server.on('upgrade', this.upgradeListener);
    this.setHeartbeat(this.options.heartbeatMs);
    this.revalidator = setInterval(() => void this.revalidate(), this.options.revalidateMs);
    this.revalidator.unref();
  }

  /** Checks every open connection's credential again (periodic backstop to the change events). */
  revalidate(): Promise<void> {
    return this.recheck([...this.all]);
  }

  /** A user's credentials or account changed: their connections are checked at once. */
  recheckUser(userId: string): Promise<void> {
    return this.recheck([...(this.bySubject.get(userId) ?? [])]);
  }

  /** The system key changed: connections made with it are checked at once. */
  recheckSystem(): Promise<void> {
    return this.recheck([...this.all].filter((c) => c.identity.is_system));
  }

  /** Connections whose credential has ended are closed with 1008; the others get fresh permissions. */
  private async recheck(conns: Connection[]): Promise<void> {
    const check = this.deps.revalidate;
    if (!check || conns.length === 0) return;
    let fresh: Array<ApiIdentity | null>;
    try {
      fresh = await check(conns.map((c) => c.identity));
    } catch (err) {
      this.deps.log.warn({ err }, 'credential revalidation failed');
      return;
    }
    conns.forEach((conn, i) => {
      if (conn.gone) return;
      const identity = fresh[i];
      if (identity) conn.identity = identity;
      else this.drop(conn, 1008, 'the credential of this connection has ended');
    });
  }

  /** Unregisters and closes a connection. */
  private drop(conn: Connection, code: number, reason: string): void {
    this.unregister(conn);
    conn.ws.close(code, reason);
  }

  /** Changes the heartbeat interval (tests use a short one). */
  setHeartbeat(ms: number): void {
    this.options.heartbeatMs = ms;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => this.beat(), ms);
    this.heartbeat.unref();
  }

  get connectionCount(): number {
    return this.all.size;
  }

  connectionsOf(userId: string): number {
    return this.bySubject.get(userId)?.size ?? 0;
  }

  // ---- upgrade ---------------------------------------------------------------------------

  private async handleUpgrade(req: http.IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    let pathname: string;
    try {
      pathname = new URL(req.url ?? '/', 'http://upgrade.invalid').pathname;
    } catch {
      pathname = '';
    }
    if (pathname !== this.options.path) return this.reject(socket, 404, 'not_found', 'no WebSocket endpoint here');
    if (this.closing || this.deps.state.stopping) return this.reject(socket, 503, 'unavailable', 'shutting down');
    if (!this.deps.state.iamReady) return this.reject(socket, 503, 'booting', 'the service is starting', { 'Retry-After': '5' });

    let result: UpgradeAuthResult;
    try {
      result = await this.deps.authenticate(req);
    } catch (err) {
      if (err instanceof HttpError) return this.reject(socket, err.status, err.code, err.message, err.headers);
      this.deps.log.error({ err }, 'upgrade authentication failed');
      return this.reject(socket, 500, 'internal', 'internal error');
    }
    if (!result.ok) {
      this.stats.refused++;
      return this.reject(socket, 401, 'unauthorized', result.message, { 'WWW-Authenticate': 'Bearer, Basic realm="service"' });
    }
    if (socket.destroyed || this.closing) return;
    const identity = result.identity;
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, identity));
  }

  private reject(socket: Duplex, status: number, code: string, message: string, headers: Record<string, string> = {}): void {
    if (socket.destroyed) return;
    const body = JSON.stringify({ error: { code, message } });
    const lines = [
      `HTTP/1.1 ${status} ${statusText(status)}`,
      'Connection: close',
      'Content-Type: application/json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    ];
    socket.end(`${lines.join('\r\n')}\r\n\r\n${body}`);
  }

  // ---- connections -----------------------------------------------------------------------

  private onConnection(ws: WebSocket, identity: ApiIdentity): void {
    const conn = new Connection(ws, identity, this.options.frameBurst);
    const subject = conn.viewer.subject;
    if ((this.bySubject.get(subject)?.size ?? 0) >= this.options.maxConnectionsPerUser) {
      this.stats.refused++;
      ws.send(encodeFrame('gateway:error', { code: 'too_many_connections', message: `at most ${this.options.maxConnectionsPerUser} connections per user`, ref: null }));
      ws.close(1008, 'too many connections');
      return;
    }
    // registered before last_seq is read: whatever commits after that read is pushed (held until the welcome is out)
    this.register(conn);
    const proof = identity.proof;
    if (proof?.kind === 'credential' && proof.expires_at !== null) {
      // a session that expires ends its live stream then, not at the next sweep
      conn.expiry = setTimeout(() => void this.recheck([conn]), Math.min(Math.max(0, proof.expires_at - Date.now()) + 50, 2 ** 31 - 1));
      conn.expiry.unref();
    }
    ws.on('pong', () => (conn.alive = true));
    ws.on('message', (data, isBinary) => {
      conn.alive = true;
      void this.onMessage(conn, data, isBinary);
    });
    ws.on('close', () => this.unregister(conn));
    ws.on('error', (err) => {
      // too-large frames (1009) and protocol errors end here; ws closes the socket itself
      this.deps.log.debug({ err: (err as Error).message, user: identity.username }, 'websocket error');
    });
    conn.welcomed = this.welcome(conn);
  }

  private async welcome(conn: Connection): Promise<void> {
    try {
      const lastSeq = await this.deps.feed.lastSeq();
      const id = conn.identity;
      // what this connection may actually do: a scoped key narrows the user's permissions
      const permissions = [...id.permissions].filter((p) => id.allows(p)).sort();
      this.write(conn, Buffer.from(encodeFrame('gateway:welcome', { username: id.username, permissions, last_seq: lastSeq })));
    } catch (err) {
      this.deps.log.error({ err }, 'welcome failed');
      conn.ws.close(1011, 'internal error');
      return;
    }
    this.release(conn);
  }

  private register(conn: Connection): void {
    this.all.add(conn);
    this.stats.accepted++;
    const subject = conn.viewer.subject;
    let set = this.bySubject.get(subject);
    if (!set) this.bySubject.set(subject, (set = new Set()));
    set.add(conn);
  }

  private unregister(conn: Connection): void {
    if (conn.gone) return;
    conn.gone = true;
    conn.hold = null;
    if (conn.expiry) clearTimeout(conn.expiry);
    this.all.delete(conn);
    const subject = conn.viewer.subject;
    const set = this.bySubject.get(subject);
    set?.delete(conn);
    if (set && set.size === 0) this.bySubject.delete(subject);
  }

  /** Sends what was held back, skipping what a replay already sent (seq <= `replayedUpTo`). */
  /** Sends what was held back; a replay never includes a held frame (it skips live seqs). */
  private release(conn: Connection): void {
    const held = conn.hold ?? [];
    conn.hold = null;
    for (const h of held) this.write(conn, h.data);
  }

  private write(conn: Connection, data: Buffer | string): void {
    const ws = conn.ws;
    if (conn.gone || ws.readyState !== WebSocket.OPEN) return;
    if (ws.bufferedAmount > this.options.maxBufferedBytes) return this.closeSlow(conn);
    // a Buffer sent as a text frame: ws frames it without copying or re-encoding
    ws.send(data, { binary: false });
  }

  /** A consumer that does not drain is closed (1013); it reconnects and resumes with `since`. */
  private closeSlow(conn: Connection): void {
    this.stats.slowClosed++;
    this.deps.log.warn({ user: conn.identity.username, buffered: conn.ws.bufferedAmount }, 'slow consumer closed');
    this.drop(conn, 1013, 'slow consumer: reconnect and resume');
    const cut = setTimeout(() => conn.ws.terminate(), this.options.slowCloseGraceMs);
    cut.unref();
    conn.ws.once('close', () => clearTimeout(cut));
  }

  private send(conn: Connection, event: string, payload: unknown, ref?: string | null): void {
    this.write(conn, encodeFrame(event, payload, ref));
  }

  private error(conn: Connection, code: GatewayErrorCode, message: string, ref: string | null): void {
    this.send(conn, 'gateway:error', { code, message, ref }, ref);
  }

  /** Takes one frame from the connection's bucket; false when it is over the rate. */
  private takeFrame(conn: Connection): boolean {
    const now = Date.now();
    conn.tokens = Math.min(this.options.frameBurst, conn.tokens + ((now - conn.tokensAt) * this.options.frameRate) / 1000);
    conn.tokensAt = now;
    if (conn.tokens < 1) return false;
    conn.tokens -= 1;
    return true;
  }

  private beat(): void {
    for (const conn of this.all) {
      if (!conn.alive) {
        this.stats.deadDropped++;
        this.unregister(conn);
        conn.ws.terminate();
        continue;
      }
      conn.alive = false;
      try {
        conn.ws.ping();
      } catch {
        /* socket already closing */
      }
    }
  }

  // ---- fan-out ---------------------------------------------------------------------------

  /** Called by the notifications service after each commit, in seq order. */
  publish(frame: PushFrame): void {
    const targets = frame.userId === null ? this.all : this.bySubject.get(frame.userId);
    if (!targets || targets.size === 0) return;
    // encoded once for every recipient
    const data = Buffer.from(encodeFrame(frame.event, frame.payload));
    for (const conn of targets) this.deliver(conn, data, frame.seq);
  }

  private deliver(conn: Connection, data: Buffer, seq: number | null): void {
    if (seq !== null && conn.liveSeqs) {
      conn.liveSeqs.add(seq);
      // a client that never resumes must not make the set grow without bound
      if (conn.liveSeqs.size > this.options.maxHeldFrames) conn.liveSeqs = null;
    }
    if (!conn.hold) return this.write(conn, data);
    if (conn.hold.length >= this.options.maxHeldFrames) return this.closeSlow(conn);
    conn.hold.push({ data, seq });
  }

  // ---- client frames ---------------------------------------------------------------------

  private async onMessage(conn: Connection, data: RawData, isBinary: boolean): Promise<void> {
    if (conn.gone) return;
    if (!this.takeFrame(conn)) {
      this.error(conn, 'rate_limited', `more than ${this.options.frameRate} frames a second`, null);
      this.drop(conn, 1008, 'frame rate exceeded');
      return;
    }
    await conn.welcomed;
    if (conn.gone) return;
    if (isBinary) return this.error(conn, 'bad_frame', 'frames are JSON text', null);
    const text = Array.isArray(data) ? Buffer.concat(data).toString('utf8') : Buffer.from(data as Buffer).toString('utf8');
    const parsed = parseFrame(text);
    if (!parsed.frame) return this.error(conn, 'bad_frame', parsed.error, parsed.ref);
    const frame = parsed.frame;
    const ref = frame.ref ?? null;
    try {
      switch (frame.event) {
        case 'gateway:ping':
          return this.send(conn, 'gateway:pong', { time: new Date().toISOString() }, ref);
        case 'notifications:resume':
          return await this.resume(conn, frame);
        case 'system:notify':
          return await this.clientNotify(conn, 'broadcast', frame);
        case 'user:notify':
          return await this.clientNotify(conn, 'user', frame);
        case 'socket:request':
          return await this.socketRequest(conn, frame);
        default:
          return this.error(conn, 'unknown_event', `unknown event ${JSON.stringify(frame.event)}`, ref);
      }
    } catch (err) {
      this.deps.log.error({ err, event: frame.event }, 'websocket frame failed');
      this.error(conn, 'internal', 'internal error', ref);
    }
  }

  /** The identity as IAM sees it now (permissions may have changed since the upgrade). */
  private async currentIdentity(conn: Connection): Promise<ApiIdentity | null> {
    if (!this.deps.refreshIdentity || conn.identity.is_system) return conn.identity;
    const fresh = await this.deps.refreshIdentity(conn.identity);
    if (!fresh) {
      this.drop(conn, 1008, 'the identity is no longer valid');
      return null;
    }
    conn.identity = fresh;
    return fresh;
  }

  private async clientNotify(conn: Connection, kind: NotifyKind, frame: ClientFrame): Promise<void> {
    const ref = frame.ref ?? null;
    const identity = await this.currentIdentity(conn);
    if (!identity) return;
    const permission = kind === 'broadcast' ? 'feature:notifications.broadcast' : 'feature:notifications.send';
    if (!identity.allows(permission)) return this.error(conn, 'forbidden', `missing permission ${permission}`, ref);
    try {
      await this.deps.feed.notify(kind, frame.payload, { sender: identity.username });
    } catch (err) {
      if (err instanceof NotifyError) return this.error(conn, 'invalid_args', err.message, ref);
      throw err;
    }
  }

  private async socketRequest(conn: Connection, frame: ClientFrame): Promise<void> {
    const identity = await this.currentIdentity(conn);
    if (!identity) return;
    const response = await this.socketHandler(frame.payload, identity);
    // the answer goes to this connection only
    this.send(conn, 'socket:response', response, frame.ref ?? null);
  }

  /**
   * Replays what this user missed after `since`, then `notifications:resumed`. One resume at a
   * time per connection; the replay waits whenever the socket has more than a high-water mark
   * queued, so a client cannot make the server hold its history in memory. Live pushes are held
   * meanwhile; rows already pushed live are skipped.
   */
  private async resume(conn: Connection, frame: ClientFrame): Promise<void> {
    const ref = frame.ref ?? null;
    const { value, error } = resumeSchema.validate(frame.payload, { convert: false });
    if (error) return this.error(conn, 'invalid_args', error.message, ref);
    if (conn.resuming) return this.error(conn, 'busy', 'a resume is already in progress on this connection', ref);
    const since = (value as { since: number }).since;
    conn.resuming = true;
    conn.hold = conn.hold ?? [];
    try {
      const counter = await this.deps.feed.lastSeq();
      const frames = await this.deps.feed.missedSince(conn.viewer, since, this.options.resumeLimit);
      const live = conn.liveSeqs;
      let count = 0;
      for (const f of frames) {
        if (conn.gone) return;
        // pushed live already (or waiting in `hold`): not again
        if (live && f.seq !== null && live.has(f.seq)) continue;
        await this.writePaced(conn, encodeFrame(f.event, f.payload));
        count++;
      }
      conn.liveSeqs = null;
      const more = frames.length === this.options.resumeLimit;
      const lastFrameSeq = frames.length ? (frames[frames.length - 1].seq ?? since) : since;
      const lastSeq = more ? lastFrameSeq : Math.max(counter, lastFrameSeq);
      this.send(conn, 'notifications:resumed', { last_seq: lastSeq, count, more }, ref);
    } catch (err) {
      this.deps.log.error({ err }, 'resume failed');
      this.error(conn, 'internal', 'resume failed', ref);
    } finally {
      conn.resuming = false;
      if (!conn.gone) this.release(conn);
    }
  }

  /** Writes a frame; while the socket holds more than the high-water mark, waits until it has flushed. */
  private writePaced(conn: Connection, data: string): Promise<void> {
    const ws = conn.ws;
    if (conn.gone || ws.readyState !== WebSocket.OPEN) return Promise.resolve();
    if (ws.bufferedAmount <= this.options.replayHighWaterBytes) {
      ws.send(data);
      return Promise.resolve();
    }
    // the callback runs once this frame has been handed to the kernel: the queue ahead of it is gone
    return new Promise((resolve) => ws.send(data, () => resolve()));
  }

  // ---- shutdown --------------------------------------------------------------------------

  /** Closes every connection (1012), waits briefly for the close handshakes, then cuts the rest. */
  async close(graceMs = 1000): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    if (this.revalidator) clearInterval(this.revalidator);
    this.server?.off('upgrade', this.upgradeListener);
    const sockets = [...this.all].map((c) => c.ws);
    for (const conn of [...this.all]) this.unregister(conn);
    // 1012 (service restart): clients reconnect, to this instance's successor or another one
    const closed = sockets.map(
      (ws) =>
        new Promise<void>((resolve) => {
          if (ws.readyState === WebSocket.CLOSED) return resolve();
          ws.once('close', () => resolve());
          ws.close(1012, 'service restart');
        }),
    );
    const timer = new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref());
    await Promise.race([Promise.all(closed), timer]);
    for (const ws of sockets) if (ws.readyState !== WebSocket.CLOSED) ws.terminate();
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }
}

function statusText(status: number): string {
  return (
    { 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 429: 'Too Many Requests', 500: 'Internal Server Error', 503: 'Service Unavailable' }[status] ??
    'Error'
  );
}
