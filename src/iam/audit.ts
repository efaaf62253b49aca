import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { onPostgres } from '../db/knex.js';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { addressOf } from '../request-context.js';
import type { Actor } from './policy.js';
import { detailsOf, eventHash, eventOf, rowOf, wellFormed, type Row } from './audit-chain.js';
import { exportEvents, listEvents, pruneChain, verifyChain } from './audit-reader.js';
import type { AuditActor, AuditEvent, AuditFilter, AuditInput, VerifyResult } from './audit-types.js';

export { AUDIT_ACTIONS } from './audit-types.js';
export type { AuditAction, AuditActor, AuditEvent, AuditFilter, AuditInput, AuditOutcome, AuditTarget, VerifyResult } from './audit-types.js';
export { canonicalJson, eventHash, wellFormed } from './audit-chain.js';

/**
 * The audit trail: who did what, when, from where, and whether it was allowed, in one
 * append-only hash chain per database (docs/security.md, "Audit trail"). Each event's `hash` is
 * the SHA-256 of the previous event's hash and this event's canonical JSON; the chain's head
 * (last seq and hash) and start (after pruning) live in `audit_chain`; a pruning is itself an
 * event in the chain (`audit.pruned`), which verify holds the recorded start to. An event is
 * appended in the transaction of the change it records (`append`, `within`), taking the head
 * row's lock, so seq has no gaps and the chain no forks across instances; events that record no
 * change (sign-ins, refusals) are batched (`record`). The chain's pure functions are in
 * audit-chain.ts, the reader (list, export, verify, prune) in audit-reader.ts, the types in
 * audit-types.ts.
 */

const BATCH_MS = 50;
const BATCH_MAX = 500;
/** repeats of a refusal within this window after its first event become one event with their `count` */
export const COALESCE_MS = 5_000;
/** refusal windows open at most (beyond, the oldest is closed early: its count written) */
const WINDOWS_MAX = 10_000;
/** events waiting for the database at most (then the oldest go) */
const QUEUE_MAX = 100_000;

/** Rows a single insert statement carries (SQLite's compound-select limit is 500, PostgreSQL's bind limit 65,535). */
const INSERT_CHUNK = 100;

function isAuditActor(a: Actor | AuditActor): a is AuditActor {
  return 'user_id' in a;
}

/** An Actor as the trail records it, with the client address it carries (src/request-context.ts). */
export function auditActor(actor: Actor | AuditActor): AuditActor {
  if (isAuditActor(actor)) return actor;
  const method = (actor as { method?: unknown }).method;
  return {
    user_id: actor.userId ?? null,
    username: actor.username,
    method: typeof method === 'string' ? method : actor.isSystem ? (actor.username === 'cli' ? 'cli' : 'system') : null,
    ip: addressOf(actor),
  };
}

/** The group a refusal is coalesced in: who (user, else name) from where, what, on what, how it ended, and why. */
function coalesceKey(input: AuditInput): string {
  const actor = auditActor(input.actor);
  const t = input.target;
  const reason = input.details?.reason ?? input.details?.error;
  return [
    input.action,
    actor.user_id ?? `name:${actor.username}`,
    actor.ip ?? '',
    t?.type ?? '',
    t?.id ?? '',
    t?.name ?? '',
    input.outcome ?? '',
    typeof reason === 'string' ? reason : '',
  ].join('\0');
}

export interface AuditDeps {
  db: Knex;
  bus: EventBus;
  log: Logger;
  /** this process's name in `audit:appended` (the others read what it appended from the database) */
  instanceId?: string;
  /** the window of a refusal's repeats (COALESCE_MS; shorter in tests) */
  coalesceMs?: number;
}

export class AuditTrail {
  private queue: Array<Omit<AuditEvent, 'seq' | 'hash'>> = [];
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private readonly postgres: boolean;
  /** refusals by their group (coalesceKey): until when the window is open, and its repeats so far */
  private readonly windows = new Map<string, { until: number; count: number; last: AuditInput | null }>();
  private windowTimer: NodeJS.Timeout | null = null;
  /** events dropped because the database took none for too long */
  private dropped = 0;

  constructor(private readonly deps: AuditDeps) {
    this.postgres = onPostgres(deps.db);
    // another instance (or the CLI) appended events: they are read from the database, never
    // taken from the message, and handed to this instance's live tail
    deps.bus.on('audit:appended', ({ from, to, origin }) => {
      if (origin === this.origin) return;
      void this.announce(from, to).catch((err) => deps.log.warn({ err }, 'audit events appended elsewhere could not be read'));
    });
  }

  private get origin(): string {
    return this.deps.instanceId ?? 'local';
  }

  /** Events [from, to] (at most 500) as `audit:event` on this instance's bus. */
  private async announce(from: number, to: number): Promise<void> {
    const rows = await this.deps
      .db<Row>('audit_events')
      .whereBetween('seq', [from, Math.min(to, from + 499)])
      .orderBy('seq');
    for (const r of rows) this.deps.bus.emit('audit:event', eventOf(r));
  }

  /** An event as it will be chained (no seq or hash yet). */
  private draft(input: AuditInput): Omit<AuditEvent, 'seq' | 'hash'> {
    const actor = auditActor(input.actor);
    const text = (v: string | null | undefined, max: number) => (v === null || v === undefined ? null : wellFormed(String(v), max));
    return {
      id: crypto.randomUUID(),
      at: new Date().toISOString(),
      actor: { user_id: text(actor.user_id, 36), username: text(actor.username, 256) ?? '', method: text(actor.method, 32), ip: text(actor.ip, 64) },
      action: input.action,
      target: { type: text(input.target?.type, 32) ?? 'none', id: text(input.target?.id, 256), name: text(input.target?.name, 256) },
      outcome: input.outcome ?? 'success',
      details: detailsOf(input.details),
    };
  }

  /**
   * Appends events in `trx`, the transaction of the change they record: the chain head is
   * locked, so the events get the next seqs and chain to the head, or (the transaction rolled
   * back) never existed. Published (bus, log) once the caller's transaction committed: call
   * `published()` with the result then, or use within().
   */
  async append(trx: Knex, inputs: Array<AuditInput | Omit<AuditEvent, 'seq' | 'hash'>>): Promise<AuditEvent[]> {
    if (inputs.length === 0) return [];
    // the head row (made by the migration) is locked: appends of every instance take turns. On
    // SQLite a write takes the lock first: a transaction that read before writing could find
    // another connection's in the way with no way to wait (SQLITE_BUSY)
    if (!this.postgres)
      await trx('audit_chain')
        .where({ id: 1 })
        .update({ head_seq: trx.raw('head_seq') });
    const q = trx('audit_chain').where({ id: 1 });
    const head = await (this.postgres ? q.forUpdate() : q).first('head_seq', 'head_hash');
    if (!head) throw new Error('the audit chain has no head row (run the migrations)');
    let seq = Number(head.head_seq);
    let prev: string = head.head_hash;
    const out: AuditEvent[] = [];
    for (const input of inputs) {
      const draft = 'id' in input ? input : this.draft(input);
      seq += 1;
      const event = { seq, ...draft };
      const full: AuditEvent = { ...event, hash: eventHash(prev, event) };
      out.push(full);
      prev = full.hash;
    }
    const rows = out.map(rowOf);
    for (let i = 0; i < rows.length; i += INSERT_CHUNK) await trx('audit_events').insert(rows.slice(i, i + INSERT_CHUNK));
    await trx('audit_chain').where({ id: 1 }).update({ head_seq: seq, head_hash: prev });
    return out;
  }

  /** Runs `change` and appends its event in one transaction; the event is published after the commit. */
  async within<T>(change: (trx: Knex.Transaction) => Promise<T>, event: (result: T) => AuditInput | AuditInput[] | null): Promise<T> {
    let events: AuditEvent[] = [];
    const result = await this.deps.db.transaction(async (trx) => {
      const r = await change(trx);
      const e = event(r);
      events = await this.append(trx, e === null ? [] : Array.isArray(e) ? e : [e]);
      return r;
    });
    this.published(events);
    return result;
  }

  /**
   * Records an event that goes with no change (a sign-in, a refusal): batched, appended within
   * ~50 ms. A refusal (outcome `denied`) or a failed sign-in (`auth.*` with outcome `failure`)
   * that repeats is coalesced: the first of its group (coalesceKey: actor or address, action,
   * target, outcome, reason) is written at once, and the repeats within the next COALESCE_MS
   * become one event carrying their `count` (details.count), written when the window closes. So
   * a script hammering a refusal cannot flood the trail, and every attempt is still counted. A
   * privileged operation that failed (a socket operation's error) is written each time, with
   * its own args.
   */
  record(input: AuditInput): void {
    if (input.outcome === 'denied' || (input.outcome === 'failure' && input.action.startsWith('auth.'))) {
      const key = coalesceKey(input);
      const now = Date.now();
      const open = this.windows.get(key);
      if (open && now < open.until) {
        open.count += 1;
        open.last = input;
        this.scheduleWindows(open.until - now);
        return;
      }
      if (open) this.closeWindow(key, open);
      this.windows.set(key, { until: now + (this.deps.coalesceMs ?? COALESCE_MS), count: 0, last: null });
      if (this.windows.size > WINDOWS_MAX) {
        const [oldest, w] = this.windows.entries().next().value!;
        this.closeWindow(oldest, w);
      }
    }
    this.enqueue(input);
  }

  private enqueue(input: AuditInput): void {
    // the database away for long: the oldest waiting events go (with an error line) rather than the process's memory
    if (this.queue.length >= QUEUE_MAX) {
      this.queue.shift();
      this.dropped += 1;
      if (this.dropped === 1 || this.dropped % 1000 === 0)
        this.deps.log.error({ dropped: this.dropped }, 'audit events dropped: the database has not taken them for too long');
    }
    this.queue.push(this.draft(input));
    if (this.queue.length >= BATCH_MAX) void this.drain();
    else if (!this.timer) {
      this.timer = setTimeout(() => void this.drain(), BATCH_MS);
      this.timer.unref();
    }
  }

  /** Ends a refusal window: its repeats, if any, as one event with their count. */
  private closeWindow(key: string, w: { count: number; last: AuditInput | null }): void {
    this.windows.delete(key);
    if (w.count > 0 && w.last) this.enqueue({ ...w.last, details: { ...w.last.details, count: w.count } });
  }

  /** Closes the windows whose time is up (every window when `all`); runs again for those still counting. */
  private closeWindows(all = false): void {
    if (this.windowTimer) {
      clearTimeout(this.windowTimer);
      this.windowTimer = null;
      this.windowTimerAt = Infinity;
    }
    const now = Date.now();
    let next = Infinity;
    for (const [key, w] of this.windows) {
      if (all || now >= w.until) this.closeWindow(key, w);
      else if (w.count > 0) next = Math.min(next, w.until);
    }
    if (next !== Infinity) this.scheduleWindows(next - now);
  }

  /** when the pending window timer fires (a window that closes earlier moves it up) */
  private windowTimerAt = Infinity;

  private scheduleWindows(inMs: number): void {
    const at = Date.now() + Math.max(0, inMs);
    if (this.windowTimer && this.windowTimerAt <= at) return;
    if (this.windowTimer) clearTimeout(this.windowTimer);
    this.windowTimerAt = at;
    this.windowTimer = setTimeout(() => this.closeWindows(), Math.max(0, inMs));
    this.windowTimer.unref();
  }

  /** Appends everything recorded so far, the counts of open refusal windows included (shutdown, reading, tests). */
  async flush(): Promise<void> {
    this.closeWindows(true);
    await this.drain();
  }

  /** Appends what record() queued (one transaction for the batch). */
  private async drain(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    while (this.flushing) await this.flushing;
    if (this.queue.length === 0) return;
    const batch = this.queue.splice(0, BATCH_MAX);
    let written = false;
    this.flushing = (async () => {
      // a busy database (another writer) is tried again at once, a few times; one that is away
      // keeps the events for the next try rather than lose them
      for (let attempt = 1; ; attempt++) {
        try {
          const events = await this.deps.db.transaction((trx) => this.append(trx, batch));
          this.published(events);
          written = true;
          return;
        } catch (err) {
          if (attempt < 3) {
            await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
            continue;
          }
          // the database answers, yet the batch does not go in: one event of it cannot; each is
          // written alone, and one that still fails is dropped with an error line (never the queue stuck)
          if (await this.databaseAnswers()) {
            for (const event of batch) {
              try {
                this.published(await this.deps.db.transaction((trx) => this.append(trx, [event])));
              } catch (one) {
                this.deps.log.error({ err: one, action: event.action, id: event.id }, 'audit event could not be written: dropped');
              }
            }
            written = true;
            return;
          }
          this.queue.unshift(...batch);
          this.deps.log.warn({ err, pending: this.queue.length }, 'audit events not written yet');
          if (!this.timer) {
            this.timer = setTimeout(() => void this.drain(), 1000);
            this.timer.unref();
          }
          return;
        }
      }
    })();
    try {
      await this.flushing;
    } finally {
      this.flushing = null;
    }
    // more than a batch was queued: the rest goes in the next transaction (while the database takes them)
    if (written && this.queue.length >= BATCH_MAX) await this.drain();
    else if (this.queue.length && !this.timer) {
      this.timer = setTimeout(() => void this.drain(), BATCH_MS);
      this.timer.unref();
    }
  }

  private async databaseAnswers(): Promise<boolean> {
    try {
      await this.deps.db.raw('select 1');
      return true;
    } catch {
      return false;
    }
  }

  /**
   * After the commit: a JSON log line per event (`"audit": true`), the `audit:event` bus event
   * here, and `audit:appended` (just the seqs) for the other instances.
   */
  published(events: AuditEvent[]): void {
    for (const e of events) {
      this.deps.log.info({ audit: true, ...e }, `audit: ${e.action} ${e.outcome}`);
      this.deps.bus.emit('audit:event', e);
    }
    if (events.length) this.deps.bus.emit('audit:appended', { from: events[0]!.seq, to: events[events.length - 1]!.seq, origin: this.origin });
  }

  /** Newest first; `before` is a seq (the next page's cursor is the last seq answered): listEvents (src/iam/audit-reader.ts). */
  async list(filter: AuditFilter = {}): Promise<{ events: AuditEvent[]; next_before: number | null }> {
    return listEvents(this.deps.db, filter);
  }

  /** Every event from `since` (ms), oldest first, in pages (for export): exportEvents. */
  async *export(since = 0): AsyncGenerator<AuditEvent> {
    yield* exportEvents(this.deps.db, since);
  }

  /** Checks the chain from its start to its head, once what was recorded is appended: verifyChain. */
  async verify(): Promise<VerifyResult> {
    await this.flush();
    return verifyChain(this.deps.db);
  }

  /**
   * Deletes events older than `retentionMs`, once what was recorded is appended, and chains an
   * `audit.pruned` event (by `service`, at `now`) recording what went and where the chain now
   * starts, in the same transaction: pruneChain. Returns how many events were removed.
   */
  async prune(retentionMs: number, now = Date.now()): Promise<number> {
    await this.flush();
    const { removed, events } = await pruneChain(this.deps.db, this.postgres, retentionMs, now, (trx, details) => {
      const actor = { user_id: null, username: 'service', method: 'system', ip: null };
      // its time is the one its cutoff was measured from (verify checks the two agree)
      const event = { ...this.draft({ action: 'audit.pruned', actor, target: { type: 'audit' }, details: { ...details } }), at: new Date(now).toISOString() };
      return this.append(trx, [event]);
    });
    this.published(events);
    return removed;
  }
}
