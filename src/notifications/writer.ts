import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { onPostgres } from '../db/knex.js';
import { toView, type Row } from './rows.js';
import type { NotifyKind, ValidNotify } from './schema.js';
import { NotifyError, type ClearView, type NotifyResult, type PushFrame, type UserDirectory, type UserRef } from './types.js';

/** the counters row that hands out notification seqs */
export const SEQ_COUNTER = 'notifications';
/** ids per look-up, rows per INSERT on PostgreSQL (SQLite and PostgreSQL both take this many bound values) */
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
 * per batch, one seq range per batch (one counter update), multi-row inserts. A submission is a
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
      written = await this.deps.db.transaction(async (trx) => {
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

    const first = slots ? (await allocate(trx, slots)) - slots + 1 : 0;
    const now = Date.now();
    const finals = new Map<string, Row>();
    const out = new Map<Pending, Committed[]>();
    for (const [p, planned] of plans) {
      const items: Committed[] = [];
      for (const pl of planned) {
        const { job, target } = pl;
        const seq = pl.slot === null ? null : first + pl.slot;
        const prev = finals.get(job.id) ?? stored.get(job.id);
        const event = job.kind === 'broadcast' ? 'system:notify' : 'user:notify';
        const userId = target?.id ?? null;
        if (pl.action === 'cleared') {
          if (prev && seq !== null) finals.set(job.id, { ...prev, seq, cleared: true, updated_at: now });
          const clear: ClearView = { id: job.id, seq, action: 'clear', broadcast: userId === null };
          items.push({ result: { id: job.id, seq, action: 'cleared' }, push: { event, userId, seq, payload: clear }, target, view: null });
          continue;
        }
        const n = job.n;
        // every column written out (no spread of the stored row): one object shape for every row
        const row: Row = {
          id: job.id,
          seq: seq!,
          user_id: userId,
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
        finals.set(job.id, row);
        const view = toView(row, false);
        items.push({ result: { id: job.id, seq, action: pl.action }, push: { event, userId, seq, payload: view }, target, view });
      }
      out.set(p, items);
    }

    const inserts: Row[] = [];
    for (const [id, row] of finals) {
      if (stored.has(id)) {
        const { id: _id, created_at: _created, read_seq: _read, ...changes } = { ...row, toast: Boolean(row.toast), cleared: Boolean(row.cleared) };
        await trx('notifications').where({ id }).update(changes);
      } else {
        inserts.push(row);
      }
    }
    await insertRows(trx, inserts);
    return out;
  }
}

/** The columns of an inserted row, in the order of the statements below. */
const COLUMNS = ['id', 'seq', 'user_id', 'title', 'message', 'level', 'source', 'link', 'toast', 'cleared', 'sender', 'created_at', 'updated_at'] as const;
/** the statement sizes of an INSERT on SQLite, largest first */
const SQLITE_SIZES = [256, 64, 16, 4, 1];
/** INSERT statements by their number of rows, made once each */
const insertSql = new Map<number, string>();

function insertStatement(rows: number): string {
  let sql = insertSql.get(rows);
  if (!sql) {
    const tuple = `(${COLUMNS.map(() => '?').join(', ')})`;
    sql = `insert into notifications (${COLUMNS.join(', ')}) values ${Array.from({ length: rows }, () => tuple).join(', ')}`;
    insertSql.set(rows, sql);
  }
  return sql;
}

/**
 * Inserts new rows. On SQLite in statements of 256, 64, 16, 4 and 1 rows: a few texts that recur
 * batch after batch, so the connection reuses their prepared statements (src/db/knex.ts), where
 * one text per batch size was prepared anew for nearly every batch; running a statement there
 * is a call in this process. On PostgreSQL, where each statement is a round trip, one per 500.
 */
async function insertRows(trx: Knex.Transaction, rows: Row[]): Promise<void> {
  const sqlite = !onPostgres(trx);
  let at = 0;
  while (at < rows.length) {
    const left = rows.length - at;
    const size = sqlite ? SQLITE_SIZES.find((n) => n <= left)! : Math.min(left, CHUNK);
    const bindings: Knex.Value[] = [];
    for (let i = at; i < at + size; i++) {
      const r = rows[i];
      bindings.push(
        r.id,
        r.seq,
        r.user_id,
        r.title,
        r.message,
        r.level,
        r.source,
        r.link,
        Boolean(r.toast),
        Boolean(r.cleared),
        r.sender ?? null,
        r.created_at,
        r.updated_at,
      );
    }
    await trx.raw(insertStatement(size), bindings);
    at += size;
  }
}

/** Takes `n` seqs: one statement, whose row lock (PostgreSQL) orders this batch after every other writer's. */
async function allocate(trx: Knex.Transaction, n: number): Promise<number> {
  const rows: { value: number | string }[] = await trx('counters').where({ name: SEQ_COUNTER }).increment('value', n).returning('value');
  if (!rows.length) throw new Error('the notifications counter is missing (migration not applied?)');
  return Number(rows[0].value);
}

/** A fresh notification id. */
export const newNotificationId = () => crypto.randomUUID();
