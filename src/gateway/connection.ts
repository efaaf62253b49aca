import type { Duplex } from 'node:stream';
import { WebSocket } from 'ws';
import type { ApiIdentity } from '../auth/identity.js';
import { viewerOf, type ClientErrorCode, type ClientSession, type Viewer } from '../bus/channels.js';
import { actingFrom } from '../request-context.js';
import { encodeFrame } from './frames.js';

/** What a connection needs of the gateway's settings. */
export interface ConnectionLimits {
  maxBufferedBytes: number;
  maxHeldFrames: number;
  frameRate: number;
  frameBurst: number;
  replayHighWaterBytes: number;
}

/** frames a tick holds back for one write at most (bytes): beyond, they go out at once */
const CORKED_BYTES_MAX = 16 * 1024;

interface Held {
  data: Buffer;
  seq: number | null;
}

/**
 * One WebSocket connection: its identity, the pushes it holds back while its welcome or a replay
 * is being written, the seqs it got live (so a replay skips them), its frame budget.
 */
export class Connection implements ClientSession {
  alive = true;
  gone = false;
  /** the client's address, as the HTTP app reads it (the address its frames act from) */
  ip: string | null = null;
  welcomed!: Promise<void>;
  /** re-checks the credential when it expires */
  expiry: NodeJS.Timeout | null = null;
  readonly viewer: Viewer;
  /** live pushes wait here while the welcome or a replay is being written */
  private hold: Held[] | null = [];
  /**
   * seqs written to this connection as live pushes until its first replay completes: that
   * replay skips exactly these (a seq committed elsewhere and never pushed here is replayed).
   * null once the first replay is done, so the set does not grow for the life of the connection.
   */
  private liveSeqs: Set<number> | null = new Set();
  /** the highest seq written to this connection: a live push at or below it was replayed already */
  private streamMax = 0;
  private replaying = false;
  private tokens: number;
  private tokensAt = Date.now();
  /** the socket holds this tick's frames, written together when the tick ends */
  private corked = false;

  constructor(
    readonly ws: WebSocket,
    public identity: ApiIdentity,
    private readonly limits: ConnectionLimits,
    /** called when the connection cannot keep up (it is closed with 1013) */
    private readonly onSlow: (conn: Connection) => void,
    /** the connection's socket (the upgrade's), corked while a tick writes several frames */
    private readonly socket: Duplex | null = null,
  ) {
    this.viewer = viewerOf(identity);
    this.tokens = limits.frameBurst;
  }

  /** the identity acting from the client's address, as a request's is (src/request-context.ts) */
  get actor(): ApiIdentity {
    return actingFrom(this.identity, this.ip);
  }

  /** Takes one client frame from the budget; false when the connection is over its rate. */
  takeFrame(): boolean {
    const now = Date.now();
    this.tokens = Math.min(this.limits.frameBurst, this.tokens + ((now - this.tokensAt) * this.limits.frameRate) / 1000);
    this.tokensAt = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  private readonly uncork = () => {
    if (!this.corked) return;
    this.corked = false;
    this.socket!.uncork();
  };

  /** Writes now, unless the consumer is not draining (then it is closed as slow). */
  write(data: Buffer | string): void {
    const ws = this.ws;
    if (this.gone || ws.readyState !== WebSocket.OPEN) return;
    // what the tick holds goes out before it counts against the consumer (a fast one takes it at once)
    if (this.corked && this.socket!.writableLength >= CORKED_BYTES_MAX) this.uncork();
    if (ws.bufferedAmount > this.limits.maxBufferedBytes) return this.onSlow(this);
    // the frames of one tick (a group commit's pushes) leave in one write, not one system call each
    if (this.socket && !this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(this.uncork);
    }
    // a Buffer sent as a text frame: ws frames it without copying or re-encoding
    ws.send(data, { binary: false });
  }

  send(event: string, payload: unknown, ref?: string | null): void {
    this.write(encodeFrame(event, payload, ref));
  }

  error(code: ClientErrorCode, message: string, ref: string | null = null): void {
    this.send('gateway:error', { code, message, ref }, ref);
  }

  /** A live push (they come in seq order): written now, or held while a welcome or replay is being written. */
  deliver(data: Buffer, seq: number | null): void {
    if (this.hold) {
      if (this.hold.length >= this.limits.maxHeldFrames) return this.onSlow(this);
      this.hold.push({ data, seq });
      return;
    }
    this.writeLive(data, seq);
  }

  private writeLive(data: Buffer, seq: number | null): void {
    if (seq !== null) {
      // replayed already (a commit seen by a replay's query before its push arrived)
      if (seq <= this.streamMax) return;
      this.streamMax = seq;
      if (this.liveSeqs) {
        this.liveSeqs.add(seq);
        // a client that never resumes must not make the set grow without bound
        if (this.liveSeqs.size > this.limits.maxHeldFrames) this.liveSeqs = null;
      }
    }
    this.write(data);
  }

  /** Sends what was held back, in order (what a replay wrote meanwhile is not sent twice), and stops holding. */
  release(): void {
    const held = this.hold ?? [];
    this.hold = null;
    for (const h of held) this.writeLive(h.data, h.seq);
  }

  async replay<T>(ref: string | null, fn: (write: (event: string, payload: unknown, seq: number | null) => Promise<boolean>) => Promise<T>): Promise<T | null> {
    if (this.replaying) {
      this.error('busy', 'a resume is already in progress on this connection', ref);
      return null;
    }
    this.replaying = true;
    this.hold = this.hold ?? [];
    const live = this.liveSeqs;
    try {
      const result = await fn(async (event, payload, seq) => {
        // written live already: not again (a push held meanwhile is sent after, unless written here)
        if (this.gone || (live && seq !== null && live.has(seq))) return false;
        if (seq !== null && seq > this.streamMax) this.streamMax = seq;
        await this.writePaced(encodeFrame(event, payload));
        return true;
      });
      this.liveSeqs = null;
      return result;
    } finally {
      this.replaying = false;
      // held pushes at or below what the replay wrote are dropped by writeLive
      if (!this.gone) this.release();
    }
  }

  /** Writes a frame; while the socket holds more than the high-water mark, waits until it has flushed. */
  private writePaced(data: string): Promise<void> {
    const ws = this.ws;
    if (this.gone || ws.readyState !== WebSocket.OPEN) return Promise.resolve();
    if (ws.bufferedAmount <= this.limits.replayHighWaterBytes) {
      ws.send(data);
      return Promise.resolve();
    }
    // the callback runs once this frame has been handed to the kernel: the queue ahead of it is gone
    return new Promise((resolve) => ws.send(data, () => resolve()));
  }

  /** Marks the connection gone (it receives nothing more). */
  end(): void {
    this.gone = true;
    this.hold = null;
    if (this.expiry) clearTimeout(this.expiry);
  }
}
