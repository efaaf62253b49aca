import type { ClientChannels } from '../bus/channels.js';
import type { NotificationPush } from '../bus/events.js';
import type { Logger } from '../log.js';
import type { PushFrame } from './types.js';

export interface FanoutDeps {
  channels: ClientChannels;
  /** committed changes with after < seq < before, from the database */
  committedBetween(after: number, before: number): Promise<PushFrame[]>;
  log: Logger;
  /** the highest seq the database holds now (the counter) */
  lastSeq(): Promise<number>;
  /** the highest seq this instance committed itself: its own pushes need no look at the database */
  committedHere(): number;
  /** how long a missing seq is waited for before it is read from the database */
  gapWaitMs?: number;
}

/** pushes waiting for the database to confirm their seq, at most (beyond: dropped, resume serves them) */
const MAX_UNCHECKED = 10_000;
/** one log line about refused pushes at most this often */
const REFUSAL_LOG_EVERY_MS = 10_000;

/**
 * Delivers committed notifications to this instance's ws clients in seq order, whichever
 * instance committed them. Local commits and (through the bus bridge) other instances' arrive
 * as `notification:push`, possibly out of order across instances. Seqs commit in order (the
 * counter row lock), so a push with seq N means every seq below N is committed: a missing one is
 * waited for briefly, then read from the database. So a client never sees seq 6 before 5, and
 * one that resumes from its last seq misses nothing. Pushes without a seq (not stored) go at once.
 *
 * A seq is never taken on another's word: a push this instance did not commit, with a seq beyond
 * the highest one known to be in the database, waits until the database's counter is read again,
 * and is dropped if the counter is still below it. So nothing arriving from elsewhere (another
 * instance over the bus) moves the stream, and with it `last_seq` and every client's cursor,
 * past what the database holds.
 */
export class OrderedFanout {
  /** the highest seq delivered in order (everything up to it has gone out or was superseded) */
  private delivered = -1;
  private readonly pending = new Map<number, PushFrame>();
  private gapTimer: NodeJS.Timeout | null = null;
  private filling: Promise<void> | null = null;
  private readonly gapWaitMs: number;
  /** the highest seq known to be committed (read from the database, or committed here) */
  private known = -1;
  /** pushes whose seq is beyond `known`, waiting for the counter to be read */
  private unchecked: PushFrame[] = [];
  private checking: Promise<void> | null = null;
  private stopped = false;
  private lastRefusalLog = 0;
  /** pushes dropped for a seq the database does not hold (tests, logs) */
  refused = 0;

  constructor(private readonly deps: FanoutDeps) {
    this.gapWaitMs = deps.gapWaitMs ?? 100;
  }

  /** Starts after `lastSeq` (the counter at boot): earlier seqs are history, served by resume. */
  start(lastSeq: number): void {
    this.delivered = lastSeq;
    this.known = Math.max(this.known, lastSeq);
  }

  get position(): number {
    return this.delivered;
  }

  accept(push: NotificationPush): void {
    const frame: PushFrame = { event: push.event, userId: push.user_id, seq: push.seq, payload: push.payload as unknown as PushFrame['payload'] };
    if (frame.seq === null) return this.send(frame);
    if (frame.seq > this.known) this.known = Math.max(this.known, this.deps.committedHere());
    if (frame.seq > this.known) return this.check(frame);
    this.place(frame);
  }

  /**
   * Reads the counter and sends, in seq order, what was committed up to it and has not gone out:
   * notifications another process wrote (the CLI, an instance without the bus bridge), which
   * reach this one as no push at all. Never beyond the counter just read, so the stream (and
   * `last_seq`) stays within what the database holds. One call at a time (the caller's loop).
   */
  async catchUp(): Promise<void> {
    if (this.delivered < 0 || this.stopped) return;
    const counter = await this.deps.lastSeq();
    this.known = Math.max(this.known, counter);
    if (counter <= this.delivered) return;
    const committed = await this.deps.committedBetween(this.delivered, counter + 1);
    if (this.stopped) return;
    // with the pushes already waiting here (a local commit after one of another process), in seq order
    for (const f of committed) if (f.seq !== null && f.seq > this.delivered) this.pending.set(f.seq, f);
    const due = [...this.pending.keys()].filter((seq) => seq <= counter).sort((x, y) => x - y);
    for (const seq of due) {
      const next = this.pending.get(seq)!;
      this.pending.delete(seq);
      if (seq > this.delivered) this.send(next);
    }
    // seqs up to the counter that were not found were superseded (an update moves a notification to a new seq)
    this.delivered = Math.max(this.delivered, counter);
    this.drain();
  }

  /** A push whose seq the database holds: out now, or in order once the seqs before it are out. */
  private place(frame: PushFrame): void {
    const seq = frame.seq!;
    if (this.delivered < 0) return this.send(frame);
    if (seq <= this.delivered || this.pending.has(seq)) return; // already out
    this.pending.set(seq, frame);
    this.drain();
  }

  private check(frame: PushFrame): void {
    if (this.unchecked.length >= MAX_UNCHECKED) return this.refuse(frame, 'too many pushes waiting for the database');
    this.unchecked.push(frame);
    this.startChecking();
  }

  /** One read of the counter at a time; what arrives meanwhile waits for the next one. */
  private startChecking(): void {
    if (this.checking || this.stopped || !this.unchecked.length) return;
    this.checking = this.checkWaiting().finally(() => {
      this.checking = null;
      this.startChecking();
    });
  }

  /** Reads the counter once for every push waiting now: those it covers go on, the others are dropped. */
  private async checkWaiting(): Promise<void> {
    const batch = this.unchecked.splice(0);
    try {
      this.known = Math.max(this.known, await this.deps.lastSeq());
    } catch (err) {
      // the database is away: they wait, and the counter is read again shortly
      this.unchecked.unshift(...batch);
      this.deps.log.warn({ err: (err as Error).message }, 'reading the notification counter failed');
      await new Promise((r) => setTimeout(r, this.gapWaitMs * 10).unref());
      return;
    }
    for (const f of batch) {
      if (f.seq! <= this.known) this.place(f);
      else this.refuse(f, 'its seq is beyond the database');
    }
  }

  private refuse(frame: PushFrame, why: string): void {
    this.refused++;
    const now = Date.now();
    if (now - this.lastRefusalLog < REFUSAL_LOG_EVERY_MS) return;
    this.lastRefusalLog = now;
    this.deps.log.warn({ seq: frame.seq, known: this.known, refused: this.refused, why }, 'notification push dropped');
  }

  private drain(): void {
    while (this.pending.has(this.delivered + 1)) {
      const next = this.pending.get(this.delivered + 1)!;
      this.pending.delete(this.delivered + 1);
      this.delivered += 1;
      this.send(next);
    }
    if (this.pending.size && !this.gapTimer && !this.filling) {
      this.gapTimer = setTimeout(() => {
        this.gapTimer = null;
        this.filling = this.fillGap().finally(() => {
          this.filling = null;
          this.drain();
        });
      }, this.gapWaitMs);
      this.gapTimer.unref();
    }
  }

  /** Reads what is missing below the lowest waiting seq from the database and sends it in order. */
  private async fillGap(): Promise<void> {
    if (!this.pending.size) return;
    const first = Math.min(...this.pending.keys());
    let missing: PushFrame[];
    try {
      missing = await this.deps.committedBetween(this.delivered, first);
    } catch (err) {
      // the database is away: try again shortly, holding the later pushes meanwhile
      this.deps.log.warn({ err: (err as Error).message }, 'reading missed notifications failed');
      return;
    }
    for (const f of missing) {
      if (f.seq === null || f.seq <= this.delivered) continue;
      this.pending.delete(f.seq);
      this.send(f);
    }
    // seqs not found were superseded (an update moves a notification to a new seq): skip them
    this.delivered = Math.max(this.delivered, first - 1);
  }

  private send(frame: PushFrame): void {
    this.deps.channels.push({
      event: frame.event,
      payload: frame.payload,
      audience: frame.userId === null ? { all: true } : { userId: frame.userId },
      seq: frame.seq,
    });
  }

  stop(): void {
    this.stopped = true;
    this.unchecked = [];
    if (this.gapTimer) clearTimeout(this.gapTimer);
    this.gapTimer = null;
  }
}
