import crypto from 'node:crypto';
import type { Knex } from 'knex';
import type { EventBus } from '../bus/bus.js';
import type { NotificationLevel, NotificationPush, OutboundNotification } from '../bus/events.js';
import type { Logger } from '../log.js';
import { checkNotify, type NotifyKind, type ValidNotify } from './schema.js';
import {
  NotifyError,
  type ClearView,
  type NotificationView,
  type NotifyResult,
  type PushFrame,
  type UserDirectory,
  type UserRef,
  type Viewer,
} from './types.js';

const COUNTER = 'notifications';
const iso = (ms: number) => new Date(Number(ms)).toISOString();

export interface NotifyOptions {
  /** who sent it (username, `bus`, `scm:github`): stored for audit, never shown */
  sender?: string;
  /** source used when the payload names none */
  defaultSource?: string | null;
  /** runs inside the writing transaction (webhook: records the delivery id); throwing aborts all */
  within?: (trx: Knex.Transaction, note: { id: string }) => Promise<void>;
}

export interface HistoryQuery {
  since?: number;
  limit: number;
  unread: boolean;
}

export interface HistoryPage {
  notifications: NotificationView[];
  unread: number;
  last_seq: number;
}

interface Row {
  id: string;
  seq: number;
  user_id: string | null;
  title: string;
  message: string;
  level: NotificationLevel;
  source: string | null;
  link: string | null;
  toast: boolean | number;
  cleared: boolean | number;
  created_at: number;
  updated_at: number;
  read_seq?: number | null;
}

export interface NotificationsServiceDeps {
  db: Knex;
  bus: EventBus;
  log: Logger;
  users: UserDirectory;
}

/**
 * Persists notifications and their per-user state, and hands every committed change to the
 * publisher (the ws gateway) and to `notification:outbound`.
 *
 * Writes are serialised in this process (one promise chain) and, across instances, by the
 * counters row lock: seqs commit in order, and live pushes leave in seq order. A broadcast is
 * one row; read and dismissed state rows exist only once a user acts.
 */
export class NotificationsService {
  private chain: Promise<unknown> = Promise.resolve();
  private markReady!: () => void;
  /** resolves when the schema exists (iam:ready: migrations ran) */
  readonly ready: Promise<void> = new Promise((resolve) => (this.markReady = resolve));

  constructor(private readonly deps: NotificationsServiceDeps) {}

  setReady(): void {
    this.markReady();
  }

  /**
   * Validates, resolves the target user, stores (unless persist: false), then pushes and emits
   * outbound after the commit. Throws NotifyError for anything the sender got wrong.
   */
  async notify(kind: NotifyKind, raw: unknown, opts: NotifyOptions = {}): Promise<NotifyResult> {
    const checked = checkNotify(kind, raw);
    if (!checked.value) throw new NotifyError('invalid_args', checked.problems);
    const n = checked.value;
    await this.ready;
    let target: UserRef | null = null;
    if (kind === 'user') {
      target = await this.deps.users.find(n.user!);
      if (!target) throw new NotifyError('unknown_user', [{ field: 'user', message: `no user ${JSON.stringify(n.user)}` }]);
    }
    return this.serial(() => (n.persist ? this.store(kind, n, target, opts) : this.transient(kind, n, target, opts)));
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async store(kind: NotifyKind, n: ValidNotify, target: UserRef | null, opts: NotifyOptions): Promise<NotifyResult> {
    const { db } = this.deps;
    const now = Date.now();
    const id = n.id ?? crypto.randomUUID();
    const targetId = target?.id ?? null;
    let result!: NotifyResult;
    let row: Row | null = null;
    await db.transaction(async (trx) => {
      // first: the counter row lock orders this writer after every other one
      const seq = await allocateSeq(trx);
      const existing: Row | undefined = await trx('notifications').where({ id }).first();
      if (existing && (existing.user_id ?? null) !== targetId) {
        throw new NotifyError('conflict', [{ field: 'id', message: 'is in use by a notification for another audience' }]);
      }
      if (n.action === 'clear') {
        if (existing) {
          await trx('notifications').where({ id }).update({ seq, cleared: true, updated_at: now });
          row = { ...existing, seq, cleared: true, updated_at: now };
          result = { id, seq, action: 'cleared' };
        } else {
          // never stored (or transient): clients may still show it, so the clear is pushed
          result = { id, seq: null, action: 'cleared' };
        }
      } else {
        const content = {
          title: n.title!,
          message: n.message!,
          level: n.level,
          source: n.source ?? opts.defaultSource ?? null,
          link: n.link ?? null,
          toast: n.toast,
          cleared: false,
          sender: opts.sender?.slice(0, 128) ?? null,
          updated_at: now,
        };
        if (existing) {
          await trx('notifications').where({ id }).update({ ...content, seq });
          row = { ...existing, ...content, seq };
          result = { id, seq, action: 'updated' };
        } else {
          const fresh = { id, seq, user_id: targetId, ...content, created_at: now };
          await trx('notifications').insert(fresh);
          row = fresh;
          result = { id, seq, action: 'created' };
        }
      }
      if (opts.within) await opts.within(trx, { id });
    });
    // committed: now tell the connected clients and the integrations
    const event = kind === 'broadcast' ? 'system:notify' : 'user:notify';
    const stored = row as Row | null;
    if (result.action === 'cleared') {
      const clear: ClearView = { id, seq: result.seq, action: 'clear', broadcast: targetId === null };
      this.publish({ event, userId: targetId, seq: result.seq, payload: clear });
    } else if (stored) {
      const view = toView(stored, false);
      this.publish({ event, userId: targetId, seq: stored.seq, payload: view });
      this.outbound(view, target);
    }
    return result;
  }

  private async transient(kind: NotifyKind, n: ValidNotify, target: UserRef | null, opts: NotifyOptions): Promise<NotifyResult> {
    const id = n.id ?? crypto.randomUUID();
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
    this.deps.bus.emit('notification:push', { event: frame.event, user_id: frame.userId, seq: frame.seq, payload: frame.payload as unknown as NotificationPush['payload'] });
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
    const row = await db('counters').where({ name: COUNTER }).first('value');
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
    else list = list.where('n.cleared', false).orderBy('n.seq', 'desc');
    const rows: Row[] = await list.limit(q.limit);
    const countRow = await this.unreadOnly(this.visible(viewer), readAll).count({ c: '*' }).first();
    const notifications = rows.map((r) => toView(r, isRead(r, readAll), true));
    const full = rows.length === q.limit;
    const lastSeq = q.since !== undefined && full ? Number(rows[rows.length - 1].seq) : Math.max(counter, ...rows.map((r) => Number(r.seq)));
    return { notifications, unread: Number(countRow?.c ?? 0), last_seq: lastSeq };
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

  /** Waits for writes in flight (shutdown). */
  async drain(): Promise<void> {
    await this.chain;
  }
}

/** One statement; on PostgreSQL its row lock is held until this transaction ends. */
async function allocateSeq(trx: Knex.Transaction): Promise<number> {
  const rows: { value: number | string }[] = await trx('counters').where({ name: COUNTER }).increment('value', 1).returning('value');
  if (!rows.length) throw new Error('the notifications counter is missing (migration not applied?)');
  return Number(rows[0].value);
}

function toFrame(r: Row, read: boolean): PushFrame {
  const seq = Number(r.seq);
  const payload: NotificationView | ClearView = Boolean(r.cleared) ? { id: r.id, seq, action: 'clear', broadcast: r.user_id === null } : toView(r, read);
  return { event: r.user_id ? 'user:notify' : 'system:notify', userId: r.user_id, seq, payload };
}

function isRead(r: Row, readAll: number): boolean {
  const seq = Number(r.seq);
  return seq <= readAll || (r.read_seq != null && Number(r.read_seq) >= seq);
}

function toView(r: Row, read: boolean, markCleared = false): NotificationView {
  const view: NotificationView = {
    id: r.id,
    seq: Number(r.seq),
    title: r.title,
    message: r.message,
    level: r.level,
    source: r.source ?? null,
    link: r.link ?? null,
    created_at: iso(r.created_at),
    updated_at: iso(r.updated_at),
    read,
    broadcast: r.user_id === null,
    toast: Boolean(r.toast),
  };
  if (markCleared && Boolean(r.cleared)) view.cleared = true;
  return view;
}
