import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer } from 'ws';
import type { ApiIdentity } from '../auth/identity.js';
import type { ClientChannels, ClientFrameDef, ClientPush, ClientSession, TypedPayload } from '../bus/channels.js';
import { HttpError, STATUS_BY_DOMAIN_CODE } from '../http/errors.js';
import { DomainError } from '../errors.js';
import type { Logger } from '../log.js';
import { Connection } from './connection.js';
import { encodeFrame } from './frames.js';
import { dispatchFrame, type FrameDispatch } from './dispatch.js';
import type { UpgradeAuthResult } from './upgrade-auth.js';
import { DEFAULT_GATEWAY_OPTIONS, type GatewayOptions } from './options.js';

export { DEFAULT_GATEWAY_OPTIONS, type GatewayOptions };

export interface GatewayDeps {
  log: Logger;
  /** boot state: no upgrades before iam:ready or while stopping */
  state: { iamReady: boolean; stopping: boolean };
  authenticate: (req: http.IncomingMessage) => Promise<UpgradeAuthResult>;
  /** re-reads a user's permissions before a permission-checked frame (cached by IAM); null = gone */
  refreshIdentity?: (identity: ApiIdentity) => Promise<ApiIdentity | null>;
  /**
   * Checks the identities of open connections against what holds now (credential revoked or
   * expired, owner disabled or deleted, password or system key changed): fresh identity or null.
   */
  revalidate?: (identities: readonly ApiIdentity[]) => Promise<Array<ApiIdentity | null>>;
  /**
   * The permissions the welcome lists for an identity that holds them all (the system key, a
   * superadmin): every one the catalog has, as /api/me/access lists them. Without it, or for
   * anyone else, the welcome lists the identity's own grants.
   */
  allPermissions?: (identity: ApiIdentity) => string[];
  /** the client's address of an upgrade request, as the HTTP app reads it */
  clientAddress?: (req: http.IncomingMessage) => string;
  /** a frame refused to its caller (a permission, a rule, step-up): the audit trail's request.denied */
  refused?: (actor: ApiIdentity, event: string, err: unknown) => void;
  options?: Partial<GatewayOptions>;
}

/**
 * The WebSocket transport at /ws: authenticates at the upgrade (401 before a socket exists),
 * keeps every connection's credential honest, and carries what the areas declare (ClientChannels):
 * the frames clients may send, with their permission and schema, and the pushes clients may
 * see, each encoded once for all its recipients. It knows no area.
 */
export class Gateway implements ClientChannels {
  readonly options: GatewayOptions;
  private readonly wss: WebSocketServer;
  private readonly all = new Set<Connection>();
  /**
   * every upgraded socket until it is closed, registered or not (one refused for too many
   * connections, or dropped, is still closing): a stop closes them all, or its drain waits for
   * a peer that never answers the close
   */
  private readonly sockets = new Set<WebSocket>();
  /** upgrade requests being authenticated: a stop answers them (503) rather than wait for the answer */
  private readonly upgrading = new Set<Duplex>();
  /** connections by viewer subject: the user id, or `system:<name>` for the system key */
  private readonly bySubject = new Map<string, Set<Connection>>();
  private readonly frames = new Map<string, ClientFrameDef>();
  private readonly welcomes: Array<(session: ClientSession) => Promise<Record<string, unknown>>> = [];
  private heartbeat: NodeJS.Timeout | null = null;
  private revalidator: NodeJS.Timeout | null = null;
  private closing = false;
  private readonly upgradeListener = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void this.handleUpgrade(req, socket, head);
  /** counters for tests and metrics */
  readonly stats = { accepted: 0, slowClosed: 0, deadDropped: 0, refused: 0 };
  /** what a client frame's dispatch needs (src/gateway/dispatch.ts) */
  private readonly dispatch: FrameDispatch;

  constructor(private readonly deps: GatewayDeps) {
    this.options = { ...DEFAULT_GATEWAY_OPTIONS, ...deps.options };
    // no compression: at 10,000 sockets it costs CPU and memory per connection
    this.wss = new WebSocketServer({ noServer: true, maxPayload: this.options.maxPayload, perMessageDeflate: false, clientTracking: false });
    this.dispatch = {
      frames: this.frames,
      options: this.options,
      log: deps.log,
      refused: deps.refused,
      currentIdentity: (conn) => this.currentIdentity(conn),
      drop: (conn, code, reason) => this.drop(conn, code, reason),
    };
    this.frame({ event: 'gateway:ping', permission: null, handle: (s, _p, ref) => s.send('gateway:pong', { time: new Date().toISOString() }, ref) });
  }

  // ---- what areas declare ----------------------------------------------------------------

  frame<P>(def: ClientFrameDef<P> & TypedPayload<P>): void {
    if (this.frames.has(def.event)) throw new Error(`the client frame ${def.event} is declared twice`);
    this.frames.set(def.event, def as ClientFrameDef);
  }

  welcome(fields: (session: ClientSession) => Promise<Record<string, unknown>>): void {
    this.welcomes.push(fields);
  }

  push(push: ClientPush): void {
    const a = push.audience;
    const targets = 'all' in a ? this.all : 'userId' in a ? this.bySubject.get(a.userId) : this.all;
    if (!targets || targets.size === 0) return;
    // encoded once for every recipient
    const data = Buffer.from(encodeFrame(push.event, push.payload));
    const seq = push.seq ?? null;
    for (const conn of targets) {
      if ('permission' in a && !conn.identity.allows(a.permission)) continue;
      conn.deliver(data, seq);
    }
  }

  // ---- life cycle ------------------------------------------------------------------------

  /** Takes over the 'upgrade' event of the service's HTTP server and starts the heartbeat. */
  attach(server: http.Server): void {
    server.on('upgrade', this.upgradeListener);
    this.setHeartbeat(this.options.heartbeatMs);
    this.revalidator = setInterval(() => void this.revalidate(), this.options.revalidateMs);
    this.revalidator.unref();
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

  // ---- credentials -----------------------------------------------------------------------

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
    return this.recheck([...this.all].filter((c) => c.identity.isSystem));
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

  /** The identity as IAM sees it now (permissions may have changed since the upgrade). */
  private async currentIdentity(conn: Connection): Promise<ApiIdentity | null> {
    if (!this.deps.refreshIdentity || conn.identity.isSystem) return conn.identity;
    const fresh = await this.deps.refreshIdentity(conn.identity);
    if (!fresh) {
      this.drop(conn, 1008, 'the identity is no longer valid');
      return null;
    }
    conn.identity = fresh;
    return fresh;
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
    if (this.closing || this.deps.state.stopping) return this.reject(socket, 503, 'unavailable', 'shutting down', { 'Retry-After': '1' });
    if (!this.deps.state.iamReady) return this.reject(socket, 503, 'booting', 'the service is starting', { 'Retry-After': '5' });

    let result: UpgradeAuthResult;
    this.upgrading.add(socket);
    try {
      result = await this.deps.authenticate(req);
    } catch (err) {
      // answered already by close(): what the authentication met after the stop (its database closed) is not worth an error line
      if (socket.destroyed || socket.writableEnded) return;
      if (err instanceof HttpError) return this.reject(socket, err.status, err.code, err.message, err.headers);
      if (err instanceof DomainError)
        return this.reject(
          socket,
          STATUS_BY_DOMAIN_CODE[err.code],
          err.code,
          err.message,
          err.retryAfterSeconds ? { 'Retry-After': String(err.retryAfterSeconds) } : {},
        );
      this.deps.log.error({ err }, 'upgrade authentication failed');
      return this.reject(socket, 500, 'internal', 'internal error');
    } finally {
      this.upgrading.delete(socket);
    }
    if (!result.ok) {
      this.stats.refused++;
      return this.reject(socket, 401, 'unauthorized', result.message, { 'WWW-Authenticate': 'Bearer, Basic realm="service"' });
    }
    // gone, or answered by close() while it was authenticated
    if (socket.destroyed || socket.writableEnded) return;
    const identity = result.identity;
    const ip = this.deps.clientAddress?.(req) ?? null;
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      this.sockets.add(ws);
      ws.once('close', () => this.sockets.delete(ws));
      this.onConnection(ws, identity, ip, socket);
    });
  }

  private reject(socket: Duplex, status: number, code: string, message: string, headers: Record<string, string> = {}): void {
    if (socket.destroyed || socket.writableEnded) return;
    const body = JSON.stringify({ error: { code, message } });
    const lines = [
      `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}`,
      'Connection: close',
      'Content-Type: application/json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    ];
    // closed once the answer is written: a socket handed to 'upgrade' is no longer the HTTP
    // server's to close, and one its peer leaves half-open would hold a stop's drain
    socket.once('finish', () => socket.destroy());
    socket.end(`${lines.join('\r\n')}\r\n\r\n${body}`);
  }

  // ---- connections -----------------------------------------------------------------------

  private onConnection(ws: WebSocket, identity: ApiIdentity, ip: string | null, socket: Duplex): void {
    const conn = new Connection(ws, identity, this.options, (c) => this.closeSlow(c), socket);
    conn.ip = ip;
    const subject = conn.viewer.subject;
    if ((this.bySubject.get(subject)?.size ?? 0) >= this.options.maxConnectionsPerUser) {
      this.stats.refused++;
      conn.error('too_many_connections', `at most ${this.options.maxConnectionsPerUser} connections per user`);
      ws.close(1008, 'too many connections');
      return;
    }
    // registered before the welcome is built: whatever is pushed meanwhile is held until it is out
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
      void dispatchFrame(this.dispatch, conn, data, isBinary);
    });
    ws.on('close', () => this.unregister(conn));
    ws.on('error', (err) => {
      // too-large frames (1009) and protocol errors end here; ws closes the socket itself
      this.deps.log.debug({ err: (err as Error).message, user: identity.username }, 'websocket error');
    });
    conn.welcomed = this.sendWelcome(conn);
  }

  private async sendWelcome(conn: Connection): Promise<void> {
    try {
      const id = conn.identity;
      // what this connection may actually do: a scoped key narrows the user's permissions
      const permissions =
        (id.isSystem || id.isSuperadmin) && this.deps.allPermissions ? this.deps.allPermissions(id) : [...id.permissions].filter((p) => id.allows(p)).sort();
      const extra = await Promise.all(this.welcomes.map((w) => w(conn)));
      conn.send('gateway:welcome', Object.assign({ username: id.username, permissions }, ...extra));
    } catch (err) {
      this.deps.log.error({ err }, 'welcome failed');
      conn.ws.close(1011, 'internal error');
      return;
    }
    conn.release();
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
    conn.end();
    this.all.delete(conn);
    const subject = conn.viewer.subject;
    const set = this.bySubject.get(subject);
    set?.delete(conn);
    if (set && set.size === 0) this.bySubject.delete(subject);
  }

  /** Unregisters and closes a connection. */
  private drop(conn: Connection, code: number, reason: string): void {
    this.unregister(conn);
    conn.ws.close(code, reason);
  }

  /** A consumer that does not drain is closed (1013); it reconnects and resumes with `since`. */
  private closeSlow(conn: Connection): void {
    if (conn.gone) return;
    this.stats.slowClosed++;
    this.deps.log.warn({ user: conn.identity.username, buffered: conn.ws.bufferedAmount }, 'slow consumer closed');
    this.drop(conn, 1013, 'slow consumer: reconnect and resume');
    const cut = setTimeout(() => conn.ws.terminate(), this.options.slowCloseGraceMs);
    cut.unref();
    conn.ws.once('close', () => clearTimeout(cut));
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

  // ---- shutdown --------------------------------------------------------------------------

  /**
   * Answers the upgrades still being authenticated (503), closes every connection (1012), waits
   * briefly for the close handshakes, then cuts the rest.
   */
  async close(graceMs = 1000): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    if (this.revalidator) clearInterval(this.revalidator);
    // the upgrade listener stays: an upgrade that still arrives while the server drains is refused
    // (503, which a balancer passes to another instance) instead of reaching the app as a plain GET
    for (const socket of this.upgrading) this.reject(socket, 503, 'unavailable', 'shutting down', { 'Retry-After': '1' });
    const sockets = [...this.sockets];
    for (const conn of [...this.all]) this.unregister(conn);
    // 1012 (service restart): clients reconnect, to this instance's successor or another one
    const closed = sockets.map(
      (ws) =>
        new Promise<void>((resolve) => {
          if (ws.readyState === WebSocket.CLOSED) return resolve();
          ws.once('close', () => resolve());
          // one closing already (refused, dropped, slow) keeps its own code
          if (ws.readyState === WebSocket.OPEN) ws.close(1012, 'service restart');
        }),
    );
    const timer = new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref());
    await Promise.race([Promise.all(closed), timer]);
    for (const ws of sockets) if (ws.readyState !== WebSocket.CLOSED) ws.terminate();
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }
}

const STATUS_TEXT: Record<number, string> = {
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};
