import type { ClientChannels } from '../bus/channels.js';
import type { NotificationPush } from '../bus/events.js';
import type { Logger } from '../log.js';
import type { PushFrame } from './types.js';

export interface FanoutDeps {
  channels: ClientChannels;
  /** committed changes with after < seq < before, from the database */
  committedBetween(after: number, before: number): Promise<PushFrame[]>;
  log: Logger;
  /** how long a missing seq is waited for before it is read from the database */
  gapWaitMs?: number;
}

/**
 * Delivers committed notifications to this instance's ws clients in seq order, whichever
 * instance committed them. Local commits and (through the bus bridge) other instances' arrive
 * as `notification:push`, possibly out of order across instances. Seqs commit in order (the
 * counter row lock), so a push with seq N means every seq below N is committed: a missing one is
 * waited for briefly, then read from the database. So a client never sees seq 6 before 5, and
 * one that resumes from its last seq misses nothing. Pushes without a seq (not stored) go at once.
 */
export class OrderedFanout {
  /** the highest seq delivered in order (everything up to it has gone out or was superseded) */
  private delivered = -1;
  private readonly pending = new Map<number, PushFrame>();
  private gapTimer: NodeJS.Timeout | null = null;
  private filling: Promise<void> | null = null;
  private readonly gapWaitMs: number;

  constructor(private readonly deps: FanoutDeps) {
    this.gapWaitMs = deps.gapWaitMs ?? 100;
  }

  /** Starts after `lastSeq` (the counter at boot): earlier seqs are history, served by resume. */
  start(lastSeq: number): void {
    this.delivered = lastSeq;
  }

  get position(): number {
    return this.delivered;
  }

  accept(push: NotificationPush): void {
    const frame: PushFrame = { event: push.event, userId: push.user_id, seq: push.seq, payload: push.payload as unknown as PushFrame['payload'] };
    if (frame.seq === null || this.delivered < 0) return this.send(frame);
    if (frame.seq <= this.delivered || this.pending.has(frame.seq)) return; // already out
    this.pending.set(frame.seq, frame);
    this.drain();
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
    if (this.gapTimer) clearTimeout(this.gapTimer);
    this.gapTimer = null;
  }
}
