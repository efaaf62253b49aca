import type { Knex } from 'knex';
import type { Logger } from '../log.js';
import type { EventBus } from './bus.js';
import { CLUSTER_EVENTS, type EventName } from './events.js';

/** How many relayed events the table keeps, the newest (each writer prunes by id: no clock is trusted). */
const KEEP_ROWS = 10_000;
/** How often an instance reads the table. */
export const RELAY_EVERY_MS = 1000;
/**
 * Rows are read again for this long after they were first seen: on PostgreSQL two writers' ids
 * can commit out of order (a lower id becomes visible after a higher one was read).
 */
const REREAD_MS = 5000;
/** At most this many rows per read (the rest come at the next). */
const BATCH = 1000;

/**
 * The cluster-wide events a process without a Redis link hands to the running instances through
 * the database. Notifications are not among them: an instance without Redis already reads the
 * notification counter every second (src/notifications/channels.ts).
 */
const RELAYED = Object.entries(CLUSTER_EVENTS).filter(([event]) => event !== 'notification:push') as Array<
  [EventName, NonNullable<(typeof CLUSTER_EVENTS)[EventName]>]
>;
const RELAYED_SCHEMAS = new Map(RELAYED);

/**
 * The writing side, for the CLI without SERVICE_REDIS_URL: each cluster-wide event it emits (a
 * user disabled, a key revoked, a setting changed, audit rows appended) becomes a row of
 * `bus_relay`, in the order emitted. A failed write is a warning: the instances still notice
 * within their cache lifetime and the 30 s re-check of connections.
 */
export class DatabaseRelayWriter {
  private readonly detach: Array<() => void>;
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly deps: { db: Knex; bus: EventBus; origin: string; log: Logger }) {
    this.detach = RELAYED.map(([event]) => deps.bus.on(event, (payload) => this.write(event, payload)));
  }

  private write(event: EventName, payload: unknown): void {
    const { db, origin, log } = this.deps;
    this.queue = this.queue.then(async () => {
      const now = Date.now();
      try {
        const [row] = (await db('bus_relay')
          .insert({ event, payload: JSON.stringify(payload), origin, created_at: now })
          .returning('id')) as Array<{ id: number | string }>;
        await db('bus_relay')
          .where('id', '<=', Number(row!.id) - KEEP_ROWS)
          .delete();
      } catch (err) {
        log.warn({ err: (err as Error).message, event }, 'telling the running instances of a change failed: they see it within their cache lifetime');
      }
    });
  }

  /** Stops listening; resolves once every event emitted so far is written. */
  async close(): Promise<void> {
    for (const off of this.detach) off();
    await this.queue;
  }
}

/**
 * The reading side, on an instance without SERVICE_REDIS_URL: every RELAY_EVERY_MS it reads the
 * rows written since it started and emits each on its own bus, once, after checking its payload
 * as the Redis bridge does (exactly the event's fields). What was written before it started is
 * not replayed: a fresh instance holds no stale state to correct. An instance starts it before
 * its API opens, so no change made through the CLI after that is missed.
 */
export class DatabaseRelayReader {
  /** rows up to this id were read and will not be read again (null: not known yet, the database was away at the start) */
  private floor: number | null = null;
  /** when start() ran: with the database away then, the rows written since are the first read's */
  private startedAt = 0;
  private readonly seen = new Set<number>();
  /** [when, highest id seen then]: the floor follows REREAD_MS behind */
  private readonly marks: Array<[number, number]> = [];
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private lastWarning = 0;
  /** counters for tests */
  readonly stats = { emitted: 0, dropped: 0 };

  constructor(private readonly deps: { db: Knex; bus: EventBus; origin: string; log: Logger; everyMs?: number }) {}

  /**
   * Starts after what the table holds now, then reads it every RELAY_EVERY_MS. The database away
   * at this moment fails nothing: the first read that reaches it starts after the rows written
   * before this moment (by their writers' clocks: the one place a clock decides).
   */
  async start(): Promise<void> {
    this.startedAt = Date.now();
    await this.startFloor().catch((err: unknown) => this.warn(err));
    const next = () => {
      if (this.stopped) return;
      this.timer = setTimeout(async () => {
        await this.read().catch((err: unknown) => this.warn(err));
        next();
      }, this.deps.everyMs ?? RELAY_EVERY_MS);
      this.timer.unref();
    };
    next();
  }

  private async startFloor(late = false): Promise<number> {
    const before = this.deps.db('bus_relay');
    if (late) before.where('created_at', '<', this.startedAt);
    const row = (await before.max({ top: 'id' }).first()) as { top: number | string | null } | undefined;
    this.floor ??= Number(row?.top ?? 0);
    return this.floor;
  }

  /** The database is away: the next read tries again; one line a minute at most. */
  private warn(err: unknown): void {
    const now = Date.now();
    if (this.stopped || now - this.lastWarning < 60_000) return;
    this.lastWarning = now;
    this.deps.log.warn({ err: (err as Error).message }, 'reading the changes of other processes failed');
  }

  /** One read: emits what is new; exposed for tests. */
  async read(now = Date.now()): Promise<void> {
    const floor = this.floor ?? (await this.startFloor(true));
    const rows = (await this.deps.db('bus_relay').where('id', '>', floor).orderBy('id').limit(BATCH).select('id', 'event', 'payload', 'origin')) as Array<{
      id: number | string;
      event: string;
      payload: string;
      origin: string;
    }>;
    let top = floor;
    for (const row of rows) {
      const id = Number(row.id);
      top = Math.max(top, id);
      if (this.seen.has(id) || this.stopped) continue;
      this.seen.add(id);
      if (row.origin !== this.deps.origin) this.emit(row);
    }
    this.marks.push([now, Math.max(top, this.marks.at(-1)?.[1] ?? 0)]);
    let moved = floor;
    while (this.marks.length && now - this.marks[0]![0] >= REREAD_MS) moved = Math.max(moved, this.marks.shift()![1]);
    this.floor = moved;
    for (const id of this.seen) if (id <= moved) this.seen.delete(id);
  }

  private emit(row: { event: string; payload: string }): void {
    const schema = RELAYED_SCHEMAS.get(row.event as EventName);
    let payload: unknown;
    try {
      payload = JSON.parse(row.payload);
    } catch {
      payload = undefined;
    }
    const checked = schema?.validate(payload, { convert: false, allowUnknown: false, stripUnknown: false, presence: 'optional' });
    if (!checked || checked.error || payload === undefined) {
      this.stats.dropped++;
      this.deps.log.warn({ event: row.event, problem: checked?.error?.message ?? 'not a relayed event' }, 'a relayed change was dropped');
      return;
    }
    this.stats.emitted++;
    this.deps.bus.emit(row.event as EventName, checked.value as never);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
