import type { Knex } from 'knex';
import type { EventBus } from '../bus/bus.js';
import type { NotificationPush, OutboundNotification } from '../bus/events.js';
import { DomainError } from '../errors.js';
import type { Logger } from '../log.js';
import { checkNotify, type FieldProblem, type HistoryQuery, type NotifyKind, type ValidNotify } from './schema.js';
import { NotifyError, type NotificationView, type NotifyResult, type PushFrame, type UserDirectory, type UserRef, type Viewer } from './types.js';
import { isRead, iso, toFrame, toView, type Row } from './rows.js';
import { SEQ_COUNTER } from './statements.js';
import { NotificationWriter, newNotificationId, type WriteJob, type WriteOptions } from './writer.js';

export type NotifyOptions = WriteOptions;

export interface HistoryPage {
  notifications: NotificationView[];
  unread: number;
  last_seq: number;
  /** present (true) when retention deleted notifications after `since` */
  truncated?: true;
}

export interface NotificationsServiceDeps {
  db: Knex;
  bus: EventBus;
  log: Logger;
  users: UserDirectory;
  /** the highest seq retention deleted: a history from before it is partial (none: nothing was deleted) */
  truncatedBefore?: () => Promise<number>;
}

/**
 * Persists notifications and their per-user state, and hands every committed change to every
 * instance's ws clients (`notification:push`) and to `notification:outbound`.
 *
 * Writes go through the group-commit writer (src/notifications/writer.ts): concurrent notify
 * calls share a transaction and a seq range; across instances the counters row lock orders the
 * batches, so seqs commit in order and pushes leave in seq order. A broadcast is one row; read
 * and dismissed state rows exist only once a user acts.
 */
export class NotificationsService {
  private markReady!: () => void;
  /** resolves when the schema exists (iam:ready: migrations ran) */
  readonly ready: Promise<void> = new Promise((resolve) => (this.markReady = resolve));
  private readonly writer: NotificationWriter;
  /** the highest seq this instance committed (the database holds at least this one) */
  committedSeq = 0;
  readonly truncatedBefore: () => Promise<number>;
  constructor(private readonly deps: NotificationsServiceDeps) {
    this.truncatedBefore = deps.truncatedBefore ?? (async () => 0);
    this.writer = new NotificationWriter({ db: deps.db, users: deps.users });
  }

  /** group commit counters: transactions and notifications written */
  get stats(): { batches: number; notifications: number } {
    return this.writer.stats;
  }

  setReady(): void {
    this.markReady();
  }

  /**
   * Validates, stores (unless persist: false), then pushes and emits outbound after the commit.
   * Throws NotifyError for anything the sender got wrong.
   */
  async notify(kind: NotifyKind, raw: unknown, opts: NotifyOptions = {}): Promise<NotifyResult> {
    const checked = checkNotify(kind, raw);
    if (!checked.value) throw new NotifyError('invalid_args', checked.problems);
    const n = checked.value;
    await this.ready;
    if (!n.persist) return this.transient(kind, n, opts);
    const [done] = await this.write([{ kind, n, id: n.id ?? newNotificationId(), field: '', opts }]);
    return done;
  }

  /**
   * Many notifications, each with its own audience, validated as a whole (problems named
   * `notifications[i].field`) and written in one transaction: all or nothing.
   */
  async notifyMany(items: Array<{ kind: NotifyKind; raw: unknown }>, opts: NotifyOptions = {}): Promise<NotifyResult[]> {
    const jobs: WriteJob[] = [];
    const problems: FieldProblem[] = [];
    items.forEach(({ kind, raw }, i) => {
      const field = `notifications[${i}].`;
      const checked = checkNotify(kind, raw);
      if (!checked.value) return problems.push(...checked.problems.map((p) => ({ field: `${field}${p.field}`, message: p.message })));
      if (!checked.value.persist) return problems.push({ field: `${field}persist`, message: 'must be true in a batch' });
      jobs.push({ kind, n: checked.value, id: checked.value.id ?? newNotificationId(), field, opts });
    });
    if (problems.length) throw new NotifyError('invalid_args', problems);
    await this.ready;
    return this.write(jobs);
  }

  private async write(jobs: WriteJob[]): Promise<NotifyResult[]> {
    const committed = await this.writer.submit(jobs);
    // committed: now tell the connected clients and the integrations, in seq order
    for (const c of committed) {
      if (c.push.seq !== null && c.push.seq > this.committedSeq) this.committedSeq = c.push.seq;
      this.publish(c.push);
      if (c.view) this.outbound(c.view, c.target);
    }
    return committed.map((c) => c.result);
  }

  private async transient(kind: NotifyKind, n: ValidNotify, opts: NotifyOptions): Promise<NotifyResult> {
    let target: UserRef | null = null;
    if (kind === 'user') {
      target = (await this.deps.users.findMany([n.user!])).get(n.user!) ?? null;
      if (!target) throw new NotifyError('unknown_user', [{ field: 'user', message: `no user ${JSON.stringify(n.user)}` }]);
    }
    const id = n.id ?? newNotificationId();
    if (opts.within) await this.deps.db.transaction((trx) => opts.within!(trx, { id }));
    const event = kind === 'broadcast' ? 'system:notify' : 'user:notify';
    const userId = target?.id ?? null;
    if (n.action === 'clear') {
      this.publish({ event, userId, seq: null, payload: { id, seq: null, action: 'clear', broadcast: userId === null } });
      return { id, seq: null, action: 'cleared' };
    }
    const at = iso(Date.now());
    const view: NotificationView = {
      id,
      seq: null,
      title: n.title!,
      message: n.message!,
      level: n.level,
      source: n.source ?? opts.defaultSource ?? null,
      link: n.link ?? null,
      created_at: at,
      updated_at: at,
      read: false,
      broadcast: userId === null,
      toast: n.toast,
      persist: false,
    };
    this.publish({ event, userId, seq: null, payload: view });
    this.outbound(view, target);
    return { id, seq: null, action: 'transient' };
  }

  /** Hands a committed change to every instance's ws clients (notification:push is cluster-wide). */
  private publish(frame: PushFrame): void {
    // delivery problems never undo or block a committed notification: the bus isolates its handlers
    this.deps.bus.emit('notification:push', {
      event: frame.event,
      user_id: frame.userId,
      seq: frame.seq,
      payload: frame.payload as unknown as NotificationPush['payload'],
    });
  }

  private outbound(view: NotificationView, target: UserRef | null): void {
    const out: OutboundNotification = {
      id: view.id,
      seq: view.seq,
      title: view.title,
      message: view.message,
      level: view.level,
      source: view.source,
      link: view.link,
      user: target ? { id: target.id, username: target.username } : null,
      created_at: view.created_at,
    };
    this.deps.bus.emit('notification:outbound', out);
  }

  /** The highest seq handed out so far (0 on a fresh database). */
  async lastSeq(db: Knex = this.deps.db): Promise<number> {
    const row = await db('counters').where({ name: SEQ_COUNTER }).first('value');
    return row ? Number(row.value) : 0;
  }

  private async readAllSeq(viewer: Viewer): Promise<number> {
    const row = await this.deps.db('notification_cursors').where({ subject: viewer.subject }).first('read_all_seq');
    return row ? Number(row.read_all_seq) : 0;
  }

  /** Notifications this viewer may see and has not dismissed (in the version it dismissed). */
  private visible(viewer: Viewer) {
    const { db } = this.deps;
    return db('notifications as n')
      .leftJoin('notification_states as s', function () {
        this.on('s.notification_id', '=', 'n.id').andOnVal('s.subject', '=', viewer.subject);
      })
      .where((b) => {
        b.whereNull('n.user_id');
        if (viewer.userId) b.orWhere('n.user_id', viewer.userId);
      })
      .where((b) => b.whereNull('s.dismissed_seq').orWhereRaw('?? < ??', ['s.dismissed_seq', 'n.seq']));
  }

  private unreadOnly(q: Knex.QueryBuilder, readAll: number): Knex.QueryBuilder {
    return q
      .where('n.cleared', false)
      .where('n.seq', '>', readAll)
      .where((b) => b.whereNull('s.read_seq').orWhereRaw('?? < ??', ['s.read_seq', 'n.seq']));
  }

  /**
   * GET /api/notifications. Without `since`: the newest first, cleared ones left out. With
   * `since`: oldest first after `since`, cleared ones included (marked `cleared`) so a
   * catching-up client can drop them; `last_seq` is where to continue from.
   */
  async history(viewer: Viewer, q: HistoryQuery): Promise<HistoryPage> {
    // read the counter first: every seq <= it is committed, so nothing falls between
    const counter = await this.lastSeq();
    const readAll = await this.readAllSeq(viewer);
    let list = this.visible(viewer).select('n.*', 's.read_seq');
    if (q.unread) list = this.unreadOnly(list, readAll);
    if (q.since !== undefined) list = list.where('n.seq', '>', q.since).orderBy('n.seq', 'asc');
    else {
      if (q.before !== undefined) list = list.where('n.seq', '<', q.before);
      list = list.where('n.cleared', false).orderBy('n.seq', 'desc');
    }
    const rows: Row[] = await list.limit(q.limit);
    const countRow = await this.unreadOnly(this.visible(viewer), readAll).count({ c: '*' }).first();
    const notifications = rows.map((r) => toView(r, isRead(r, readAll), true));
    const full = rows.length === q.limit;
    const lastSeq = q.since !== undefined && full ? Number(rows[rows.length - 1].seq) : Math.max(counter, ...rows.map((r) => Number(r.seq)));
    const page: HistoryPage = { notifications, unread: Number(countRow?.c ?? 0), last_seq: lastSeq };
    // retention deleted notifications after `since`: what follows is not the whole story
    if (q.since !== undefined && q.since < (await this.truncatedBefore())) page.truncated = true;
    return page;
  }

  /** What a reconnecting client missed after `since`, oldest first, as push frames. */
  async missedSince(viewer: Viewer, since: number, limit: number): Promise<PushFrame[]> {
    const readAll = await this.readAllSeq(viewer);
    const rows: Row[] = await this.visible(viewer).select('n.*', 's.read_seq').where('n.seq', '>', since).orderBy('n.seq', 'asc').limit(limit);
    return rows.map((r) => toFrame(r, isRead(r, readAll)));
  }

  /**
   * Every committed change with a seq after `after` and before `before`, for everyone, oldest
   * first, as they were pushed (unread): what this instance's ws clients missed when pushes from
   * other instances did not arrive.
   */
  async committedBetween(after: number, before: number): Promise<PushFrame[]> {
    const rows: Row[] = await this.deps.db('notifications').where('seq', '>', after).andWhere('seq', '<', before).orderBy('seq', 'asc').limit(10_000);
    return rows.map((r) => toFrame(r, false));
  }

  /** The stored row if `viewer` may see it (audience, not cleared). */
  private async visibleRow(viewer: Viewer, id: string): Promise<Row | null> {
    const row: Row | undefined = await this.deps.db('notifications').where({ id }).first();
    if (!row || Boolean(row.cleared)) return null;
    if (row.user_id !== null && row.user_id !== viewer.userId) return null;
    return row;
  }

  /** Marks one notification read for the viewer; false when it is not visible to them. */
  async markRead(viewer: Viewer, id: string): Promise<boolean> {
    const row = await this.visibleRow(viewer, id);
    if (!row) return false;
    await this.deps
      .db('notification_states')
      .insert({ notification_id: id, subject: viewer.subject, read_seq: row.seq, updated_at: Date.now() })
      .onConflict(['notification_id', 'subject'])
      .merge(['read_seq', 'updated_at']);
    return true;
  }

  /** Everything up to now is read for the viewer: one row, whatever the number of notifications. */
  async readAll(viewer: Viewer): Promise<void> {
    const seq = await this.lastSeq();
    await this.deps
      .db('notification_cursors')
      .insert({ subject: viewer.subject, read_all_seq: seq, updated_at: Date.now() })
      .onConflict('subject')
      .merge(['read_all_seq', 'updated_at']);
  }

  /** Hides one notification for the viewer (until it is updated again). */
  async dismiss(viewer: Viewer, id: string): Promise<boolean> {
    const row = await this.visibleRow(viewer, id);
    if (!row) return false;
    await this.deps
      .db('notification_states')
      .insert({ notification_id: id, subject: viewer.subject, dismissed_seq: row.seq, updated_at: Date.now() })
      .onConflict(['notification_id', 'subject'])
      .merge(['dismissed_seq', 'updated_at']);
    return true;
  }

  /** From now on refuses (503) every write not yet being written (a stop whose grace ran out). */
  refuseWrites(): void {
    this.writer.refuse(new DomainError('unavailable', 'the service is shutting down; try again', undefined, 1));
  }

  /** Waits for writes in flight (shutdown). */
  async drain(): Promise<void> {
    await this.writer.idle();
  }
}
