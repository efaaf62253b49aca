/**
 * A client of the service's WebSocket gateway, for browsers and Node alike (at run time it imports
 * nothing but its own part beside it, gateway-client-requests.ts): the web UI, the tests and
 * third-party programs use it. It connects with any credential the gateway takes (cookie, headers
 * in Node, a one-time ticket per connection), reconnects with backoff and jitter (to the next of
 * several URLs, when given), resumes the notification stream from the last seq it has with no gap
 * and no duplicate, notices a dead connection with its own ping, and correlates socket:request
 * with its socket:response. docs/client.md has examples.
 */
import type {
  ClientEvents,
  ClientState,
  GatewayClientOptions,
  KeepaliveOptions,
  NotificationFrame,
  NotifyEvent,
  ServerEvents,
  SocketFactory,
  SocketLike,
  SocketResponse,
} from './types.js';
import { PendingRequests } from './gateway-client-requests.js';
import type { SocketArgs, SocketOperation, SocketResult } from './api-types.js';

interface RequestOptions {
  provider?: string;
  timeoutMs?: number;
}

/** A socket:response whose `result` (when `ok`) has the operation's type. */
export type TypedSocketResponse<R> = Omit<SocketResponse, 'result'> & { result: R | null };

export type * from './types.js';
export type { SocketArgs, SocketOperation, SocketResult } from './api-types.js';

/** Thrown by a `ticket` function when the credential behind it is refused (e.g. a 401): no retry. */
export class CredentialRefusedError extends Error {
  override readonly name = 'CredentialRefusedError';
}

type Listener = (payload: never) => void;

const OPEN = 1;
/** closes after which reconnecting would repeat the refusal: policy (1008) */
const FINAL_CLOSES = new Set([1008]);
const DEFAULT_KEEPALIVE: KeepaliveOptions = { intervalMs: 20_000, timeoutMs: 5_000 };
/** the ref of the client's notifications:resume frames (an error answering one names it) */
const RESUME_REF = 'resume';

export class GatewayClient {
  private socket: SocketLike | null = null;
  private readonly urls: string[];
  private urlIndex = 0;
  private attempt = 0;
  /** bumped whenever the current connection attempt is abandoned: an older one finishing late does nothing */
  private generation = 0;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private pingTimer: ReturnType<typeof setInterval> | null = null;
  private pongTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly keepalive: KeepaliveOptions | null;
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly requests = new PendingRequests();
  private stateValue: ClientState = 'connecting';
  /** everything visible up to here has been received (or superseded) */
  private cursor: number | null;
  /** seqs handed to the application lately: a frame seen twice (live and replayed) goes out once */
  private readonly seen = new Set<number>();
  /** notifications that arrive while a resume runs (replayed and live ones interleave): handed on in seq order after it */
  private pendingResume: Array<{ event: NotifyEvent; payload: NotificationFrame }> = [];
  private stopped = false;

  constructor(private readonly options: GatewayClientOptions) {
    this.urls = Array.isArray(options.url) ? [...options.url] : [options.url];
    if (this.urls.length === 0) throw new Error('GatewayClient needs a url');
    // the server refuses any other cursor, and a refused resume is asked again on each connection
    if (options.since !== undefined && !(Number.isSafeInteger(options.since) && options.since >= 0))
      throw new TypeError(`GatewayClient: since must be a whole number of 0 or more, not ${String(options.since)}`);
    this.cursor = options.since ?? null;
    this.keepalive = options.keepalive === false ? null : (options.keepalive ?? DEFAULT_KEEPALIVE);
    void this.open();
  }

  get state(): ClientState {
    return this.stateValue;
  }

  /** The resume cursor: every notification up to it has been delivered (store it to resume later). */
  get lastSeq(): number | null {
    return this.cursor;
  }

  on<E extends keyof ClientEvents>(event: E, listener: (payload: ClientEvents[E]) => void): () => void;
  on<E extends keyof ServerEvents>(event: E, listener: (payload: ServerEvents[E]) => void): () => void;
  on(event: string, listener: (payload: unknown) => void): () => void;
  on(event: string, listener: (payload: never) => void): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    const listeners = set;
    listeners.add(listener);
    return () => listeners.delete(listener);
  }

  /** Resolves once the client is live (welcomed and resumed), or rejects when it is refused or closed. */
  ready(timeoutMs = 10_000): Promise<void> {
    if (this.stateValue === 'live') return Promise.resolve();
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        off();
        reject(new Error(`not live within ${timeoutMs} ms`));
      }, timeoutMs);
      const off = this.on('state', ({ state, reason }) => {
        if (state === 'live') resolve();
        else if (state === 'refused' || state === 'closed') reject(new Error(reason ?? state));
        else return;
        clearTimeout(t);
        off();
      });
    });
  }

  /** Sends a frame as it is (e.g. `system:notify` with a permission for it). */
  send(event: string, payload: unknown = {}, ref?: string): void {
    if (this.socket?.readyState !== OPEN) throw new Error('not connected');
    this.socket.send(JSON.stringify(ref === undefined ? { event, payload } : { event, payload, ref }));
  }

  /**
   * A socket:request, answered by its own socket:response (rejects on timeout or disconnect).
   * An operation of the API document (every built-in one) takes and answers its own types.
   */
  request<O extends SocketOperation>(operation: O, args?: SocketArgs<O>, opts?: RequestOptions): Promise<TypedSocketResponse<SocketResult<O>>>;
  /** An operation the document does not list (a plugin's provider registered at run time): untyped. */
  request<S extends string>(operation: S extends SocketOperation ? never : S, args?: Record<string, unknown>, opts?: RequestOptions): Promise<SocketResponse>;
  request(operation: string, args: object = {}, opts: RequestOptions = {}): Promise<SocketResponse> {
    const timeoutMs = opts.timeoutMs ?? this.options.requestTimeoutMs ?? 10_000;
    return this.requests.add(operation, timeoutMs, (ref) =>
      this.send('socket:request', { request_id: ref, operation, ...(opts.provider ? { provider: opts.provider } : {}), args }, ref),
    );
  }

  /**
   * Gives up the connection (or the wait for the next attempt) and connects again at once, with
   * a fresh backoff: for when the network is back (the browser's `online` event) or a tab
   * becomes visible while offline. Also tries again after `refused`.
   */
  reconnectNow(): void {
    if (this.stopped) return;
    this.abandon('reconnecting now');
    this.attempt = 0;
    void this.open();
  }

  /** Drops the connection at once (the network went away) and reconnects with backoff. */
  drop(reason = 'dropped'): void {
    if (this.stopped || !this.socket) return;
    this.abandon(reason);
    this.retry(reason);
  }

  close(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.abandon('closed', 1000);
    this.setState('closed');
  }

  // ---- connection ------------------------------------------------------------------------

  private async open(): Promise<void> {
    if (this.stopped) return;
    const generation = ++this.generation;
    const Ctor = this.options.WebSocket ?? (globalThis as unknown as { WebSocket: SocketFactory }).WebSocket;
    let url = this.urls[this.urlIndex % this.urls.length]!;
    if (this.options.ticket) {
      try {
        const ticket = await this.options.ticket();
        if (generation !== this.generation) return;
        url += `${url.includes('?') ? '&' : '?'}ticket=${encodeURIComponent(ticket)}`;
      } catch (err) {
        if (generation !== this.generation) return;
        if (err instanceof CredentialRefusedError) return this.setState('refused', err.message);
        return this.retry(`ticket: ${(err as Error).message}`);
      }
    }
    if (this.stopped) return;
    const socket = this.options.headers ? new Ctor(url, undefined, { headers: this.options.headers }) : new Ctor(url);
    this.socket = socket;
    let opened = false;
    let refusal: string | null = null;
    socket.onopen = () => {
      // the backoff starts again once the client is live, not when a socket opens: a server that
      // accepts connections but cannot resume them is tried less and less often (up to maxMs apart)
      opened = true;
      this.startKeepalive(socket);
    };
    socket.onerror = (ev) => {
      // Node's ws says why an upgrade failed; a 401 will not pass on the next try either
      const message = ev?.message ?? String((ev?.error as Error | undefined)?.message ?? '');
      if (/Unexpected server response: 401/.test(message)) refusal = 'the credential was refused (401)';
    };
    socket.onmessage = (ev) => {
      if (this.socket === socket) this.onFrame(typeof ev.data === 'string' ? ev.data : String(ev.data));
    };
    socket.onclose = (ev) => {
      if (this.socket !== socket) return;
      this.detach('disconnected');
      if (this.stopped) return;
      if (refusal) return this.setState('refused', refusal);
      if (opened && FINAL_CLOSES.has(ev.code)) {
        this.stopped = true;
        return this.setState('closed', ev.reason || `closed with ${ev.code}`);
      }
      this.retry(opened ? `closed with ${ev.code}` : 'could not connect');
    };
  }

  /** Leaves the current connection, or the attempt or wait for one, behind. */
  private abandon(why: string, code?: number): void {
    this.generation++;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    const socket = this.socket;
    if (!socket) return;
    this.detach(why);
    socket.onopen = socket.onmessage = socket.onclose = null;
    // Node's ws reports a close while still connecting as an error event: with no listener it would be thrown
    socket.onerror = () => undefined;
    try {
      if (code === undefined && socket.terminate) socket.terminate();
      // browsers refuse a close reason over 123 bytes
      else socket.close(code ?? 1000, why.slice(0, 40));
    } catch {
      /* already closing */
    }
  }

  /** The connection is gone: what waited on it fails, what a broken resume brought is handed on. */
  private detach(why: string): void {
    this.socket = null;
    this.stopKeepalive();
    this.requests.failAll(why);
    // the next resume starts from the same cursor; the seen-set drops what it repeats
    this.flushResumed();
  }

  /** Next attempt after a delay (doubling; each between half and all of its ceiling), on the next URL. */
  private retry(reason: string): void {
    if (this.stopped) return;
    this.setState('reconnecting', reason);
    this.urlIndex++;
    const { initialMs, maxMs } = this.options.backoff ?? { initialMs: 250, maxMs: 10_000 };
    const ceiling = Math.min(maxMs, initialMs * 2 ** Math.min(this.attempt++, 16));
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(
      () => {
        this.retryTimer = null;
        void this.open();
      },
      Math.round(ceiling / 2 + (Math.random() * ceiling) / 2),
    );
  }

  /** A ping the server must answer: a connection that died without a close is noticed within seconds. */
  private startKeepalive(socket: SocketLike): void {
    const k = this.keepalive;
    if (!k) return;
    this.stopKeepalive();
    this.pingTimer = setInterval(() => {
      if (this.socket !== socket || this.pongTimer) return;
      try {
        this.send('gateway:ping', {}, 'keepalive');
      } catch {
        return;
      }
      this.pongTimer = setTimeout(() => {
        this.pongTimer = null;
        if (this.socket === socket) this.drop(`no answer to gateway:ping within ${k.timeoutMs} ms`);
      }, k.timeoutMs);
    }, k.intervalMs);
  }

  private stopKeepalive(): void {
    if (this.pingTimer) clearInterval(this.pingTimer);
    if (this.pongTimer) clearTimeout(this.pongTimer);
    this.pingTimer = this.pongTimer = null;
  }

  // ---- frames ----------------------------------------------------------------------------

  private onFrame(text: string): void {
    let frame: { event?: unknown; payload?: unknown; ref?: unknown };
    try {
      frame = JSON.parse(text);
    } catch {
      return;
    }
    // any frame proves the connection alive (a pong may queue behind a long replay)
    if (this.pongTimer) clearTimeout(this.pongTimer);
    this.pongTimer = null;
    const event = typeof frame.event === 'string' ? frame.event : '';
    const payload = frame.payload ?? {};
    const ref = typeof frame.ref === 'string' ? frame.ref : null;
    switch (event) {
      case 'gateway:welcome':
        if (this.cursor === null) this.cursor = (payload as ServerEvents['gateway:welcome']).last_seq ?? 0;
        this.resume();
        break;
      case 'notifications:resumed': {
        const resumed = payload as ServerEvents['notifications:resumed'];
        // everything up to last_seq has been sent: live pushes carry on from here
        this.cursor = Math.max(this.cursor ?? 0, resumed.last_seq ?? 0);
        if (resumed.truncated) this.emit('truncated', { last_seq: resumed.last_seq });
        this.flushResumed();
        if (resumed.more) this.resume();
        else {
          this.attempt = 0;
          this.setState('live');
        }
        break;
      }
      case 'notifications:catch_up':
        if (this.stateValue === 'live') this.resume();
        break;
      case 'system:notify':
      case 'user:notify':
        this.notification(event, payload as NotificationFrame);
        break;
      case 'socket:response': {
        const response = payload as SocketResponse;
        this.requests.settle(ref ?? response.request_id, (p) => p.resolve(response));
        break;
      }
      case 'gateway:error': {
        const error = payload as ServerEvents['gateway:error'];
        // a resume the server could not answer (its database away): connect again, with backoff
        // (to the next URL), and resume from the same cursor; waiting on would never be live
        if (ref === RESUME_REF) this.drop(`resume refused: ${error.code}`);
        else if (ref) this.requests.settle(ref, (p) => p.reject(new Error(`${error.code}: ${error.message}`)));
        break;
      }
    }
    this.emit(event, payload);
  }

  private notification(event: NotifyEvent, payload: NotificationFrame): void {
    if (this.stateValue === 'resuming') {
      this.pendingResume.push({ event, payload });
      return;
    }
    this.handOn(event, payload, false);
  }

  /** What arrived during a resume, in seq order (those without a seq last, as they came). */
  private flushResumed(): void {
    const batch = this.pendingResume;
    this.pendingResume = [];
    batch.sort((a, b) => (a.payload.seq ?? Infinity) - (b.payload.seq ?? Infinity));
    for (const n of batch) this.handOn(n.event, n.payload, true);
  }

  private handOn(event: NotifyEvent, payload: NotificationFrame, replayed: boolean): void {
    const seq = typeof payload.seq === 'number' ? payload.seq : null;
    if (seq !== null) {
      if (this.seen.has(seq)) return;
      this.seen.add(seq);
      // a bounded memory of what went out: older seqs are below the cursor and never sent again
      if (this.seen.size > 10_000) this.seen.delete(this.seen.values().next().value!);
      // while a resume runs the cursor waits for its answer (replayed and live frames interleave)
      if (this.stateValue === 'live') this.cursor = Math.max(this.cursor ?? 0, seq);
    }
    this.emit('notification', { event, payload, replayed });
  }

  private resume(): void {
    this.setState('resuming');
    try {
      this.send('notifications:resume', { since: this.cursor ?? 0 }, RESUME_REF);
    } catch {
      /* the close handler reconnects */
    }
  }

  private emit(event: string, payload: unknown): void {
    for (const l of [...(this.listeners.get(event) ?? [])]) {
      try {
        (l as (p: unknown) => void)(payload);
      } catch {
        /* a listener's failure is its own */
      }
    }
  }

  private setState(state: ClientState, reason?: string): void {
    if (state === this.stateValue && reason === undefined) return;
    this.stateValue = state;
    this.emit('state', reason === undefined ? { state } : { state, reason });
  }
}
