import type { ClientChannels, ClientSession } from '../bus/channels.js';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { OrderedFanout } from './fanout.js';
import { resumeSchema, type NotifyKind } from './schema.js';
import type { NotificationsService } from './service.js';
import { NotifyError } from './types.js';

/** Frames replayed by one notifications:resume at most (the client resumes again when `more`). */
export const RESUME_LIMIT = 1000;

/**
 * What clients see of notifications over the ws gateway: the pushes (in seq order, from every
 * instance: OrderedFanout), `last_seq` in the welcome, and the frames they may send:
 * `notifications:resume {since}`, `system:notify` and `user:notify`.
 */
export class NotificationChannels {
  readonly fanout: OrderedFanout;
  private followTimer: NodeJS.Timeout | null = null;
  private stopped = false;
  private lastFollowWarning = 0;

  constructor(private readonly deps: { channels: ClientChannels; service: NotificationsService; bus: EventBus; log: Logger }) {
    const { channels, service, bus } = deps;
    this.fanout = new OrderedFanout({
      channels,
      committedBetween: (a, b) => service.committedBetween(a, b),
      lastSeq: () => service.lastSeq(),
      committedHere: () => service.committedSeq,
      log: deps.log,
    });
    bus.on('notification:push', (push) => this.fanout.accept(push));
    // once the link to the other instances is back, clients fetch what they missed meanwhile
    bus.on('bus:bridge_state', ({ up }) => {
      if (up) channels.push({ event: 'notifications:catch_up', payload: {}, audience: { all: true } });
    });

    channels.welcome(async () => ({ last_seq: this.fanout.position >= 0 ? this.fanout.position : await service.lastSeq() }));
    channels.frame({ event: 'notifications:resume', permission: null, schema: resumeSchema, handle: (s, p, ref) => this.resume(s, p.since, ref) });
    channels.frame({ event: 'system:notify', permission: 'feature:notifications.broadcast', handle: (s, p, ref) => this.notify(s, 'broadcast', p, ref) });
    channels.frame({ event: 'user:notify', permission: 'feature:notifications.send', handle: (s, p, ref) => this.notify(s, 'user', p, ref) });
  }

  /** The schema exists: pushes go out in order from the current counter on. */
  async start(): Promise<void> {
    this.fanout.start(await this.deps.service.lastSeq());
  }

  /**
   * Without the bus bridge nothing tells this instance of what another process commits (the
   * CLI, another instance on the same database): every `everyMs` it reads the counter, and what
   * is new goes out through the same ordered fan-out as its own commits (`OrderedFanout.catchUp`).
   */
  follow(everyMs: number): void {
    const tick = async () => {
      this.followTimer = null;
      try {
        await this.fanout.catchUp();
      } catch (err) {
        // the database is away: the next look tries again; one line a minute at most
        const now = Date.now();
        if (!this.stopped && now - this.lastFollowWarning >= 60_000) {
          this.lastFollowWarning = now;
          this.deps.log.warn({ err: (err as Error).message }, 'looking for notifications of other processes failed');
        }
      }
      if (this.stopped) return;
      this.followTimer = setTimeout(tick, everyMs);
      this.followTimer.unref();
    };
    if (this.stopped || this.followTimer) return;
    this.followTimer = setTimeout(tick, everyMs);
    this.followTimer.unref();
  }

  private async notify(session: ClientSession, kind: NotifyKind, payload: unknown, ref: string | null): Promise<void> {
    try {
      await this.deps.service.notify(kind, payload, { sender: session.identity.username });
    } catch (err) {
      if (err instanceof NotifyError) return session.error('invalid_args', err.message, ref);
      throw err;
    }
  }

  /** Replays what this viewer missed after `since`, then `notifications:resumed {last_seq, count, more}`. */
  private async resume(session: ClientSession, since: number, ref: string | null): Promise<void> {
    const { service } = this.deps;
    await session.replay(ref, async (write) => {
      // read the counter first: every seq up to it is committed, so nothing falls between
      const counter = await service.lastSeq();
      const frames = await service.missedSince(session.viewer, since, RESUME_LIMIT);
      let count = 0;
      for (const f of frames) if (await write(f.event, f.payload, f.seq)) count++;
      const more = frames.length === RESUME_LIMIT;
      const lastFrameSeq = frames.length ? (frames[frames.length - 1].seq ?? since) : since;
      const resumed: Record<string, unknown> = { last_seq: more ? lastFrameSeq : Math.max(counter, lastFrameSeq), count, more };
      // retention deleted notifications after `since`: the client holds a partial history
      if (since < (await service.truncatedBefore())) resumed.truncated = true;
      session.send('notifications:resumed', resumed, ref);
    });
  }

  stop(): void {
    this.stopped = true;
    if (this.followTimer) clearTimeout(this.followTimer);
    this.followTimer = null;
    this.fanout.stop();
  }
}
