/**
 * A client of the service's WebSocket gateway, for browsers and Node alike (it imports nothing):
 * the web UI, the tests and third-party programs use it. It connects with any credential the
 * gateway takes (cookie, headers in Node, a one-time ticket), reconnects with backoff and jitter
 * (to the next of several URLs, when given), resumes the notification stream from the last seq
 * it has with no gap and no duplicate, and correlates socket:request with its socket:response.
 * docs/client.md has examples.
 */

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
}

export type ClientState = 'connecting' | 'resuming' | 'live' | 'reconnecting' | 'refused' | 'closed';

/** What the client reports besides the server's frames. */
export interface ClientEvents {
  /** every notification push exactly once, in order, whether live or replayed */
  notification: { event: 'system:notify' | 'user:notify'; payload: NotificationFrame };
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
}

export type SocketFactory = new (url: string, protocols?: string | string[], options?: { headers?: Record<string, string> }) => SocketLike;

export interface GatewayClientOptions {
  /** ws(s)://host/ws; several: each reconnect tries the next (failover without a balancer) */
  url: string | string[];
  /** the WebSocket constructor (default: the global one; in Node pass `ws`'s) */
  WebSocket?: SocketFactory;
  /** Node only: credential headers for the upgrade (X-API-Key, Authorization) */
  headers?: Record<string, string>;
  /** fetches a fresh one-time ticket before each connection (browsers on another origin) */
  ticket?: () => Promise<string>;
  /** the seq to resume from (e.g. the last_seq of the history the page loaded); default: the welcome's */
  since?: number;
  /** reconnect delays: the first, doubling to the last, each with full jitter */
  backoff?: { initialMs: number; maxMs: number };
  /** default timeout of request() */
  requestTimeoutMs?: number;
}

type Listener = (payload: any) => void;

const OPEN = 1;
/** closes after which reconnecting would repeat the refusal: policy (1008) */
const FINAL_CLOSES = new Set([1008]);

export class GatewayClient {
  private socket: SocketLike | null = null;
  private readonly urls: string[];
  private urlIndex = 0;
  private attempt = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly pending = new Map<string, { resolve: (r: SocketResponse) => void; reject: (e: Error) => void; timer: ReturnType<typeof setTimeout> }>();
  private nextRef = 0;
  private stateValue: ClientState = 'connecting';
  /** everything visible up to here has been received (or superseded) */
  private cursor: number | null;
  /** seqs handed to the application lately: a frame seen twice (live and replayed) goes out once */
  private readonly seen = new Set<number>();
  /** notifications that arrive while a resume runs (replayed and live ones interleave): handed on in seq order after it */
  private pendingResume: Array<{ event: 'system:notify' | 'user:notify'; payload: NotificationFrame }> = [];
  private stopped = false;

  constructor(private readonly options: GatewayClientOptions) {
    this.urls = Array.isArray(options.url) ? [...options.url] : [options.url];
    if (this.urls.length === 0) throw new Error('GatewayClient needs a url');
    this.cursor = options.since ?? null;
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
  on(event: string, listener: (payload: any) => void): () => void;
  on(event: string, listener: Listener): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener);
    return () => set!.delete(listener);
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

  /** A socket:request, answered by its own socket:response (rejects on timeout or disconnect). */
  request(operation: string, args: Record<string, unknown> = {}, opts: { provider?: string; timeoutMs?: number } = {}): Promise<SocketResponse> {
    const ref = `req-${++this.nextRef}`;
    return new Promise((resolve, reject) => {
      const timeoutMs = opts.timeoutMs ?? this.options.requestTimeoutMs ?? 10_000;
      const timer = setTimeout(() => {
        this.pending.delete(ref);
        reject(new Error(`${operation}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(ref, { resolve, reject, timer });
      try {
        this.send('socket:request', { request_id: ref, operation, ...(opts.provider ? { provider: opts.provider } : {}), args }, ref);
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(ref);
        reject(err as Error);
      }
    });
  }

  close(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.failPending('closed');
    this.socket?.close(1000, 'client closed');
    this.setState('closed');
  }

  // ---- connection ------------------------------------------------------------------------

  private async open(): Promise<void> {
    if (this.stopped) return;
    const Ctor = this.options.WebSocket ?? (globalThis as unknown as { WebSocket: SocketFactory }).WebSocket;
    let url = this.urls[this.urlIndex % this.urls.length];
    try {
      if (this.options.ticket) url += `${url.includes('?') ? '&' : '?'}ticket=${encodeURIComponent(await this.options.ticket())}`;
    } catch (err) {
      return this.retry(`ticket: ${(err as Error).message}`);
    }
    if (this.stopped) return;
    const socket = this.options.headers ? new Ctor(url, undefined, { headers: this.options.headers }) : new Ctor(url);
    this.socket = socket;
    let opened = false;
    let refusal: string | null = null;
    socket.onopen = () => {
      opened = true;
      this.attempt = 0;
    };
    socket.onerror = (ev) => {
      // Node's ws says why an upgrade failed; a 401 will not pass on the next try either
      const message = ev?.message ?? String((ev?.error as Error | undefined)?.message ?? '');
      if (/Unexpected server response: 401/.test(message)) refusal = 'the credential was refused (401)';
    };
    socket.onmessage = (ev) => this.onFrame(typeof ev.data === 'string' ? ev.data : String(ev.data));
    socket.onclose = (ev) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.failPending('disconnected');
      // what a broken resume brought is handed on now (the next resume starts from the same cursor)
      this.flushResumed();
      if (this.stopped) return;
      if (refusal) return this.setState('refused', refusal);
      if (opened && FINAL_CLOSES.has(ev.code)) {
        this.stopped = true;
        return this.setState('closed', ev.reason || `closed with ${ev.code}`);
      }
      this.retry(opened ? `closed with ${ev.code}` : 'could not connect');
    };
  }

  /** Next attempt after a delay (doubling, full jitter), on the next URL. */
  private retry(reason: string): void {
    if (this.stopped) return;
    this.setState('reconnecting', reason);
    this.urlIndex++;
    const { initialMs, maxMs } = this.options.backoff ?? { initialMs: 250, maxMs: 10_000 };
    const ceiling = Math.min(maxMs, initialMs * 2 ** Math.min(this.attempt++, 16));
    this.timer = setTimeout(() => void this.open(), Math.round(ceiling / 2 + (Math.random() * ceiling) / 2));
  }

  // ---- frames ----------------------------------------------------------------------------

  private onFrame(text: string): void {
    let frame: { event?: unknown; payload?: any; ref?: unknown };
    try {
      frame = JSON.parse(text);
    } catch {
      return;
    }
    const event = typeof frame.event === 'string' ? frame.event : '';
    const payload = frame.payload ?? {};
    switch (event) {
      case 'gateway:welcome':
        if (this.cursor === null) this.cursor = payload.last_seq ?? 0;
        this.resume();
        break;
      case 'notifications:resumed':
        // everything up to last_seq has been sent: live pushes carry on from here
        this.cursor = Math.max(this.cursor ?? 0, payload.last_seq ?? 0);
        if (payload.truncated) this.emit('truncated', { last_seq: payload.last_seq });
        this.flushResumed();
        if (payload.more) this.resume();
        else this.setState('live');
        break;
      case 'notifications:catch_up':
        if (this.stateValue === 'live') this.resume();
        break;
      case 'system:notify':
      case 'user:notify':
        this.notification(event, payload as NotificationFrame);
        break;
      case 'socket:response': {
        const ref = typeof frame.ref === 'string' ? frame.ref : payload.request_id;
        const waiting = this.pending.get(ref);
        if (waiting) {
          this.pending.delete(ref);
          clearTimeout(waiting.timer);
          waiting.resolve(payload as SocketResponse);
        }
        break;
      }
      case 'gateway:error': {
        const ref = typeof frame.ref === 'string' ? frame.ref : null;
        const waiting = ref ? this.pending.get(ref) : undefined;
        if (waiting) {
          this.pending.delete(ref!);
          clearTimeout(waiting.timer);
          waiting.reject(new Error(`${payload.code}: ${payload.message}`));
        }
        break;
      }
    }
    this.emit(event, payload);
  }

  private notification(event: 'system:notify' | 'user:notify', payload: NotificationFrame): void {
    if (this.stateValue === 'resuming') {
      this.pendingResume.push({ event, payload });
      return;
    }
    this.handOn(event, payload);
  }

  /** What arrived during a resume, in seq order (those without a seq last, as they came). */
  private flushResumed(): void {
    const batch = this.pendingResume;
    this.pendingResume = [];
    batch.sort((a, b) => (a.payload.seq ?? Infinity) - (b.payload.seq ?? Infinity));
    for (const n of batch) this.handOn(n.event, n.payload);
  }

  private handOn(event: 'system:notify' | 'user:notify', payload: NotificationFrame): void {
    const seq = typeof payload.seq === 'number' ? payload.seq : null;
    if (seq !== null) {
      if (this.seen.has(seq)) return;
      this.seen.add(seq);
      // a bounded memory of what went out: older seqs are below the cursor and never sent again
      if (this.seen.size > 10_000) this.seen.delete(this.seen.values().next().value!);
      // while a resume runs the cursor waits for its answer (replayed and live frames interleave)
      if (this.stateValue === 'live') this.cursor = Math.max(this.cursor ?? 0, seq);
    }
    this.emit('notification', { event, payload });
  }

  private resume(): void {
    this.setState('resuming');
    try {
      this.send('notifications:resume', { since: this.cursor ?? 0 }, 'resume');
    } catch {
      /* the close handler reconnects */
    }
  }

  private emit(event: string, payload: unknown): void {
    for (const l of [...(this.listeners.get(event) ?? [])]) {
      try {
        l(payload);
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

  private failPending(why: string): void {
    for (const [ref, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new Error(why));
      this.pending.delete(ref);
    }
  }
}
