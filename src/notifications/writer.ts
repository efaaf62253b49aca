import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { onPostgres } from '../db/knex.js';
import { toView, type Row } from './rows.js';
import { allocate, insertFresh, insertRows, lockCounter } from './statements.js';
import type { NotifyKind, ValidNotify } from './schema.js';
import { NotifyError, type ClearView, type NotifyResult, type PushFrame, type UserDirectory, type UserRef } from './types.js';

/** ids per look-up (SQLite and PostgreSQL both take this many bound values) */
const CHUNK = 500;

export interface WriteOptions {
  /** who sent it (username, `bus`, `scm:github`): stored for audit, never shown */
  sender?: string;
  /** source used when the payload names none */
  defaultSource?: string | null;
  /** runs inside the writing transaction (webhook: records the delivery id); throwing fails this notification only */
  within?: (trx: Knex.Transaction, note: { id: string }) => Promise<void>;
}

/** One notification to store: validated, its id chosen, `field` the prefix of its problems (`notifications[3].`). */
export interface WriteJob {
  kind: NotifyKind;
  n: ValidNotify;
  id: string;
  field: string;
  opts: WriteOptions;
}

/** What a committed job hands on: its answer, its push, and the target for notification:outbound. */
export interface Committed {
  result: NotifyResult;
  push: PushFrame;
  target: UserRef | null;
  /** the stored notification (not for clears) */
  view: ReturnType<typeof toView> | null;
}

interface Pending {
  jobs: WriteJob[];
  resolve(items: Committed[]): void;
  reject(err: unknown): void;
}

interface Planned {
  job: WriteJob;
  target: UserRef | null;
  action: NotifyResult['action'];
  /** index of the seq it takes, or null (a clear of something never stored) */
  slot: number | null;
}

export interface WriterDeps {
  db: Knex;
  users: UserDirectory;
  /** jobs per transaction at most (a larger group is written alone, in one transaction) */
  maxBatch?: number;
  /** how long the first submission waits for others to join its batch */
  lingerMs?: number;
}

/**
 * Group commit for notifications: concurrent submissions are written together, one transaction
 * per batch (on PostgreSQL a batch of new notifications is one statement), one seq range per
 * batch (one counter update), multi-row inserts. A submission is a
 * group that is written whole or not at all (the bulk API's thousand items, or one notify);
 * the caller is answered once its batch committed. A group whose user is unknown or whose id
 * belongs to another audience is refused alone (NotifyError); a database error fails every group
 * of its batch, and nothing of that batch is visible. Batches run one after another, so seqs,
 * and the pushes that follow the commits, leave in order.
 */
export class NotificationWriter {
  private readonly queue: Pending[] = [];
  private running: Promise<void> | null = null;
  /** set by refuse(): every later submission is refused with it */
  private refusal: Error | null = null;
  private readonly maxBatch: number;
  /** transactions written (for /metrics and tests) */
  readonly stats = { batches: 0, notifications: 0 };

  constructor(private readonly deps: WriterDeps) {
    this.maxBatch = deps.maxBatch ?? 1000;
  }

  submit(jobs: WriteJob[]): Promise<Committed[]> {
    if (this.refusal) return Promise.reject(this.refusal);
    return new Promise((resolve, reject) => {
      this.queue.push({ jobs, resolve, reject });
      // the first submission waits a moment, so callers of the same moment share its batch
      this.running ??= new Promise<void>((r) => setTimeout(r, this.deps.lingerMs ?? 2)).then(() => this.run());
    });
  }

  /**
   * Refuses with `err` every submission not yet taken into a batch, and every later one (a stop
   * whose grace ran out: its callers are answered rather than cut). A batch being written goes on
   * to its commit and answers its callers as usual.
   */
  refuse(err: Error): void {
    this.refusal = err;
    for (const p of this.queue.splice(0)) p.reject(err);
  }

  /** Resolves when every submission so far has been written (shutdown). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  private async run(): Promise<void> {
    try {
      while (this.queue.length) await this.write(this.take());
    } finally {
      this.running = null;
    }
  }

  private take(): Pending[] {
    const batch: Pending[] = [];
    let size = 0;
    while (this.queue.length && (batch.length === 0 || size + this.queue[0].jobs.length <= this.maxBatch)) {
      const next = this.queue.shift()!;
      batch.push(next);
      size += next.jobs.length;
    }
    return batch;
  }

  private async write(batch: Pending[]): Promise<void> {
    let targets: Map<string, UserRef>;
    try {
      // the targets of every user notification of the batch: one query
      targets = await this.deps.users.findMany([...new Set(batch.flatMap((p) => p.jobs.filter((j) => j.kind === 'user').map((j) => j.n.user!)))]);
    } catch (err) {
      for (const p of batch) p.reject(err);
      return;
    }
    const live = batch.filter((p) => {
      const unknown = p.jobs.filter((j) => j.kind === 'user' && !targets.has(j.n.user!));
      if (unknown.length)
        p.reject(
          new NotifyError(
            'unknown_user',
            unknown.map((j) => ({ field: `${j.field}user`, message: `no user ${JSON.stringify(j.n.user)}` })),
          ),
        );
      return unknown.length === 0;
    });
    if (!live.length) return;

    const refused = new Map<Pending, unknown>();
    let written: Map<Pending, Committed[]>;
    try {
      written =
        onPostgres(this.deps.db) && live.every((p) => p.jobs.every(isFresh))
          ? await this.storeFresh(live, targets)
          : await this.deps.db.transaction(async (trx) => {
              await lockCounter(trx);
              // a failing hook (a webhook delivery seen before) fails its own group, in a savepoint
              for (const p of live) {
                for (const job of p.jobs) {
                  if (!job.opts.within || refused.has(p)) continue;
                  try {
                    await trx.transaction((sp) => job.opts.within!(sp, { id: job.id }));
                  } catch (err) {
                    refused.set(p, err);
                  }
                }
              }
              const groups = live.filter((p) => !refused.has(p));
              return this.store(trx, groups, targets, refused);
            });
    } catch (err) {
      for (const p of live) p.reject(err);
      return;
    }
    this.stats.batches++;
    for (const p of live) {
      const items = written.get(p);
      this.stats.notifications += items?.length ?? 0;
      if (items) p.resolve(items);
      else p.reject(refused.get(p));
    }
  }

  /** Plans every group against what exists, takes one seq range, writes the rows. */
  private async store(
    trx: Knex.Transaction,
    groups: Pending[],
    targets: Map<string, UserRef>,
    refused: Map<Pending, unknown>,
  ): Promise<Map<Pending, Committed[]>> {
    // only an id the sender chose can exist already; a generated one is new
    const ids = [...new Set(groups.flatMap((p) => p.jobs.filter((j) => j.n.id !== undefined).map((j) => j.id)))];
    const stored = new Map<string, Row>();
    for (let i = 0; i < ids.length; i += CHUNK) {
      for (const r of (await trx('notifications').whereIn('id', ids.slice(i, i + CHUNK))) as Row[]) stored.set(r.id, r);
    }
    const { plans, slots } = plan(groups, targets, stored, refused);
    const { rows, placed } = place(plans, stored);
    if (slots) seqFrom(placed, (await allocate(trx, slots)) - slots + 1);

    const inserts: Row[] = [];
    for (const [id, row] of rows) {
      if (stored.has(id)) {
        const { id: _id, created_at: _created, read_seq: _read, ...changes } = { ...row, toast: Boolean(row.toast), cleared: Boolean(row.cleared) };
        await trx('notifications').where({ id }).update(changes);
      } else {
        inserts.push(row);
      }
    }
    await insertRows(trx, inserts);
    return itemsOf(placed);
  }

  /**
   * A batch of new notifications with generated ids (no clear, no hook) on PostgreSQL: one
   * statement takes the seq range and inserts the rows, a transaction of its own. It holds the
   * counter's row lock as the transaction of store() does, in one round trip instead of five
   * (BEGIN, the lock, the counter, the INSERT, COMMIT): each waits for a turn of a busy event loop.
   */
  private async storeFresh(groups: Pending[], targets: Map<string, UserRef>): Promise<Map<Pending, Committed[]>> {
    // generated ids are new: nothing to look up, nothing refused
    const { plans } = plan(groups, targets, new Map(), new Map());
    const { rows, placed } = place(plans, new Map());
    seqFrom(placed, await insertFresh(this.deps.db, [...rows.values()]));
    return itemsOf(placed);
  }
}

/** A new notification with a generated id, no clear and no hook: nothing stored can stand in its way. */
const isFresh = (job: WriteJob): boolean => job.n.id === undefined && job.n.action !== 'clear' && !job.opts.within;

/**
 * What each group does to the notifications known so far (those stored, then those the batch
 * writes before it), and the seq slots it takes. A group that names an id of another audience
 * is refused whole (in `refused`).
 */
function plan(
  groups: Pending[],
  targets: Map<string, UserRef>,
  stored: Map<string, Row>,
  refused: Map<Pending, unknown>,
): { plans: Map<Pending, Planned[]>; slots: number } {
  // which notification each id stands for as the batch goes on: its audience, whether it is stored
  const known = new Map<string, { user_id: string | null }>([...stored].map(([id, r]) => [id, { user_id: r.user_id ?? null }]));
  const plans = new Map<Pending, Planned[]>();
  let slots = 0;
  for (const p of groups) {
    const overlay = new Map<string, { user_id: string | null }>();
    const planned: Planned[] = [];
    const problems: Array<{ field: string; message: string }> = [];
    // slots this request takes so far (a running count: a batch holds up to 1,000 jobs)
    let taken = 0;
    for (const job of p.jobs) {
      const target = job.kind === 'user' ? targets.get(job.n.user!)! : null;
      const userId = target?.id ?? null;
      const before = overlay.get(job.id) ?? known.get(job.id);
      if (before && before.user_id !== userId) {
        problems.push({ field: `${job.field}id`, message: 'is in use by a notification for another audience' });
        continue;
      }
      if (job.n.action === 'clear') {
        // never stored (or transient): clients may still show it, so the clear is pushed without a seq
        planned.push({ job, target, action: 'cleared', slot: before ? slots + taken++ : null });
      } else {
        planned.push({ job, target, action: before ? 'updated' : 'created', slot: slots + taken++ });
        overlay.set(job.id, { user_id: userId });
      }
    }
    if (problems.length) {
      refused.set(p, new NotifyError('conflict', problems));
      continue;
    }
    for (const [id, v] of overlay) known.set(id, v);
    slots += taken;
    plans.set(p, planned);
  }
  return { plans, slots };
}

/** A planned job and the row it leaves (null: a clear of a notification never stored). */
interface Placed {
  planned: Planned;
  row: Row | null;
}

/**
 * Each planned job's row, and the rows to write by id (the last write of an id wins). A row's
 * seq is its slot until seqFrom() adds the range's first seq.
 */
function place(plans: Map<Pending, Planned[]>, stored: Map<string, Row>): { rows: Map<string, Row>; placed: Map<Pending, Placed[]> } {
  const now = Date.now();
  const rows = new Map<string, Row>();
  const placed = new Map<Pending, Placed[]>();
  for (const [p, planned] of plans) {
    const out: Placed[] = [];
    for (const pl of planned) {
      const { job, target } = pl;
      const prev = rows.get(job.id) ?? stored.get(job.id);
      let row: Row | null = null;
      if (pl.action === 'cleared') {
        if (prev && pl.slot !== null) rows.set(job.id, (row = { ...prev, seq: pl.slot, cleared: true, updated_at: now }));
      } else {
        const n = job.n;
        // every column written out (no spread of the stored row): one object shape for every row
        row = {
          id: job.id,
          seq: pl.slot!,
          user_id: target?.id ?? null,
          title: n.title!,
          message: n.message!,
          level: n.level,
          source: n.source ?? job.opts.defaultSource ?? null,
          link: n.link ?? null,
          toast: n.toast,
          cleared: false,
          sender: job.opts.sender?.slice(0, 128) ?? null,
          created_at: prev ? prev.created_at : now,
          updated_at: now,
        };
        rows.set(job.id, row);
      }
      out.push({ planned: pl, row });
    }
    placed.set(p, out);
  }
  return { rows, placed };
}

/** Turns the rows' slots into seqs of the range that starts at `first` (each row is one job's own). */
function seqFrom(placed: Map<Pending, Placed[]>, first: number): void {
  for (const list of placed.values()) for (const { row } of list) if (row) row.seq = first + Number(row.seq);
}

/** Each group's answers and pushes, from the rows as written. */
function itemsOf(placed: Map<Pending, Placed[]>): Map<Pending, Committed[]> {
  const out = new Map<Pending, Committed[]>();
  for (const [p, list] of placed) {
    const items: Committed[] = [];
    for (const { planned, row } of list) {
      const { job, target, action } = planned;
      const event = job.kind === 'broadcast' ? 'system:notify' : 'user:notify';
      const userId = target?.id ?? null;
      if (action === 'cleared') {
        const seq = row ? Number(row.seq) : null;
        const clear: ClearView = { id: job.id, seq, action: 'clear', broadcast: userId === null };
        items.push({ result: { id: job.id, seq, action: 'cleared' }, push: { event, userId, seq, payload: clear }, target, view: null });
        continue;
      }
      const view = toView(row!, false);
      items.push({ result: { id: job.id, seq: view.seq, action }, push: { event, userId, seq: view.seq, payload: view }, target, view });
    }
    out.set(p, items);
  }
  return out;
}

/**
 * A fresh notification id: a UUIDv7 (RFC 9562), whose first 48 bits are the time in ms, so new
 * rows go to the right edge of the primary key's index instead of a random page each (a batch of
 * 40 random ids dirtied 40 index pages, each written to the log at its commit). Made from
 * randomUUID(), whose random bits it keeps after the time and the version digit: the uuid
 * package's v7() draws its random bytes on each call, 15 times the cost, at every notification.
 */
export function newNotificationId(): string {
  const time = Date.now().toString(16).padStart(12, '0');
  // xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx: from the version digit on, the 4 becoming a 7
  return `${time.slice(0, 8)}-${time.slice(8)}-7${crypto.randomUUID().slice(15)}`;
}
