import crypto from 'node:crypto';
import type { Knex } from 'knex';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { addressOf } from '../request-context.js';
import type { Actor } from './policy.js';

/**
 * The audit trail: who did what, when, from where, and whether it was allowed, in one
 * append-only hash chain per database (docs/security.md, "Audit trail"). Each event's `hash` is
 * the SHA-256 of the previous event's hash and this event's canonical JSON; the chain's head
 * (last seq and hash) and start (after pruning) live in `audit_chain`. An event is appended in
 * the transaction of the change it records (`append`, `within`), taking the head row's lock,
 * so seq has no gaps and the chain no forks across instances; events that record no change
 * (sign-ins, refusals) are batched (`record`).
 */

export const AUDIT_ACTIONS = [
  'auth.login',
  'auth.login_failed',
  'auth.logout',
  'auth.locked',
  'auth.mfa_enrolled',
  'auth.mfa_removed',
  'auth.mfa_reset',
  'auth.recovery_codes_regenerated',
  'auth.recovery_code_used',
  'auth.step_up',
  'user.created',
  'user.updated',
  'user.deleted',
  'user.password_changed',
  'user.linked',
  'group.created',
  'group.updated',
  'group.deleted',
  'key.issued',
  'key.revoked',
  'settings.changed',
  'system_key.changed',
  'socket.operation',
  'plugin.state_changed',
  'webhook.rejected',
  'request.denied',
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];
export type AuditOutcome = 'success' | 'failure' | 'denied';

export interface AuditActor {
  user_id: string | null;
  username: string;
  /** how the actor proved who they are (session_cookie, api_key, basic, system_key, cli, ...) */
  method: string | null;
  ip: string | null;
}

export interface AuditTarget {
  type: string;
  id: string | null;
  name: string | null;
}

export interface AuditEvent {
  seq: number;
  id: string;
  at: string;
  actor: AuditActor;
  action: AuditAction;
  target: AuditTarget;
  outcome: AuditOutcome;
  details: Record<string, unknown>;
  hash: string;
}

/** What a caller records: the actor as the model knows it (an Actor, or already an AuditActor). */
export interface AuditInput {
  action: AuditAction;
  actor: Actor | AuditActor;
  target?: Partial<AuditTarget> & { type: string };
  outcome?: AuditOutcome;
  /** never a secret: names of what changed, never values of secret settings */
  details?: Record<string, unknown>;
}

export interface AuditFilter {
  action?: string;
  actor?: string;
  target?: string;
  outcome?: AuditOutcome;
  since?: number;
  before?: number;
  limit?: number;
}

export type VerifyResult =
  | { ok: true; events: number; first_seq: number | null; last_seq: number | null }
  | { ok: false; seq: number; reason: string };

const GENESIS = crypto.createHash('sha256').update('service-core audit trail').digest('hex');
const BATCH_MS = 50;
const BATCH_MAX = 500;
/** repeats of a refusal within this window after its first event become one event with their `count` */
export const COALESCE_MS = 5_000;
/** refusal windows open at most (beyond, the oldest is closed early: its count written) */
const WINDOWS_MAX = 10_000;
/** events waiting for the database at most (then the oldest go) */
const QUEUE_MAX = 100_000;

/** How deep, and how large, an event's details may be: beyond, they are cut (an event is a record, not a payload store). */
const DETAILS_DEPTH = 6;
const DETAILS_BYTES = 8192;
const TEXT_MAX = 512;
/** Rows a single insert statement carries (SQLite's compound-select limit is 500, PostgreSQL's bind limit 65,535). */
const INSERT_CHUNK = 100;

/** A string the database stores as given: lone surrogates (cut emoji) as U+FFFD, at most `max` code points. */
export function wellFormed(text: string, max = TEXT_MAX): string {
  const fixed = text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
  const points = Array.from(fixed);
  return points.length > max ? points.slice(0, max).join('') : fixed;
}

/** Details as an event keeps them: plain JSON, well-formed strings, bounded depth and size. */
function boundedDetails(value: unknown, depth = 0): unknown {
  if (value === null || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : String(value);
  if (typeof value === 'string') return wellFormed(value);
  if (typeof value !== 'object') return String(value);
  if (depth >= DETAILS_DEPTH) return '[deeper not recorded]';
  if (Array.isArray(value)) return value.slice(0, 100).map((v) => boundedDetails(v, depth + 1));
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>)
      .slice(0, 100)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [wellFormed(k, 128), boundedDetails(v, depth + 1)]),
  );
}

function detailsOf(details: Record<string, unknown> | undefined): Record<string, unknown> {
  const bounded = (boundedDetails(details ?? {}) ?? {}) as Record<string, unknown>;
  return JSON.stringify(bounded).length <= DETAILS_BYTES ? bounded : { truncated: true, fields: Object.keys(bounded).slice(0, 50) };
}

/** JSON with every object's keys sorted: the same event always hashes the same. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** The hash of an event (everything but `hash`) chained to the previous one's. */
export function eventHash(prevHash: string, event: Omit<AuditEvent, 'hash'>): string {
  return crypto.createHash('sha256').update(prevHash).update('\n').update(canonicalJson(event)).digest('hex');
}

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

interface Row {
  seq: number | string;
  id: string;
  at: number | string;
  actor_user_id: string | null;
  actor_username: string;
  actor_method: string | null;
  actor_ip: string | null;
  action: string;
  target_type: string;
  target_id: string | null;
  target_name: string | null;
  outcome: string;
  details: string;
  hash: string;
}

function eventOf(r: Row): AuditEvent {
  return {
    seq: Number(r.seq),
    id: r.id,
    at: new Date(Number(r.at)).toISOString(),
    actor: { user_id: r.actor_user_id, username: r.actor_username, method: r.actor_method, ip: r.actor_ip },
    action: r.action as AuditAction,
    target: { type: r.target_type, id: r.target_id, name: r.target_name },
    outcome: r.outcome as AuditOutcome,
    details: JSON.parse(r.details) as Record<string, unknown>,
    hash: r.hash,
  };
}

/** The group a refusal is coalesced in: who (user, else name) from where, what, on what, how it ended, and why. */
function coalesceKey(input: AuditInput): string {
  const actor = auditActor(input.actor);
  const t = input.target;
  const reason = input.details?.reason ?? input.details?.error;
  return [input.action, actor.user_id ?? `name:${actor.username}`, actor.ip ?? '', t?.type ?? '', t?.id ?? '', t?.name ?? '', input.outcome ?? '', typeof reason === 'string' ? reason : ''].join('\0');
}

function rowOf(e: AuditEvent) {
  return {
    seq: e.seq,
    id: e.id,
    at: Date.parse(e.at),
    actor_user_id: e.actor.user_id,
    actor_username: e.actor.username,
    actor_method: e.actor.method,
    actor_ip: e.actor.ip,
    action: e.action,
    target_type: e.target.type,
    target_id: e.target.id,
    target_name: e.target.name,
    outcome: e.outcome,
    details: JSON.stringify(e.details),
    hash: e.hash,
  };
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
    this.postgres = String((deps.db.client as { config?: { client?: unknown } }).config?.client ?? '').startsWith('p');
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
    const rows = await this.deps.db<Row>('audit_events').whereBetween('seq', [from, Math.min(to, from + 499)]).orderBy('seq');
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
    if (!this.postgres) await trx('audit_chain').where({ id: 1 }).update({ head_seq: trx.raw('head_seq') });
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
   * ~50 ms. A refusal or failure (outcome `denied` or `failure`) that repeats is coalesced: the
   * first of its group (coalesceKey: actor or address, action, target, outcome, reason) is
   * written at once, and the repeats within the next COALESCE_MS become one event carrying
   * their `count` (details.count), written when the window closes. So a script hammering a
   * refusal cannot flood the trail, and every attempt is still counted.
   */
  record(input: AuditInput): void {
    if (input.outcome === 'denied' || input.outcome === 'failure') {
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
      if (this.dropped === 1 || this.dropped % 1000 === 0) this.deps.log.error({ dropped: this.dropped }, 'audit events dropped: the database has not taken them for too long');
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
    }
    const now = Date.now();
    let next = Infinity;
    for (const [key, w] of this.windows) {
      if (all || now >= w.until) this.closeWindow(key, w);
      else if (w.count > 0) next = Math.min(next, w.until);
    }
    if (next !== Infinity) this.scheduleWindows(next - now);
  }

  private scheduleWindows(inMs: number): void {
    if (this.windowTimer) return;
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

  /** Newest first; `before` is a seq (the next page's cursor is the last seq answered). */
  async list(filter: AuditFilter = {}): Promise<{ events: AuditEvent[]; next_before: number | null }> {
    const limit = Math.min(Math.max(filter.limit ?? 50, 1), 500);
    const q = this.deps.db<Row>('audit_events').orderBy('seq', 'desc').limit(limit + 1);
    if (filter.action) q.where('action', filter.action.endsWith('.') ? 'like' : '=', filter.action.endsWith('.') ? `${filter.action}%` : filter.action);
    if (filter.actor) q.where((w) => w.where('actor_username', filter.actor!).orWhere('actor_user_id', filter.actor!));
    if (filter.target) q.where((w) => w.where('target_id', filter.target!).orWhere('target_name', filter.target!));
    if (filter.outcome) q.where('outcome', filter.outcome);
    if (filter.since !== undefined) q.where('at', '>=', filter.since);
    if (filter.before !== undefined) q.where('seq', '<', filter.before);
    const rows = await q;
    const events = rows.slice(0, limit).map(eventOf);
    return { events, next_before: rows.length > limit ? events[events.length - 1]!.seq : null };
  }

  /** Every event from `since` (ms), oldest first, in pages (for export). */
  async *export(since = 0): AsyncGenerator<AuditEvent> {
    let after = 0;
    for (;;) {
      const rows = await this.deps.db<Row>('audit_events').where('seq', '>', after).andWhere('at', '>=', since).orderBy('seq').limit(1000);
      for (const r of rows) yield eventOf(r);
      if (rows.length < 1000) return;
      after = Number(rows[rows.length - 1]!.seq);
    }
  }

  /**
   * Checks the chain from its start to its head: seqs without gaps, each hash recomputed and
   * chained to the previous one, the head at the last event. The first event that does not
   * match is named.
   */
  async verify(): Promise<VerifyResult> {
    await this.flush();
    const chain = await this.deps.db('audit_chain').where({ id: 1 }).first();
    let expectedSeq = Number(chain?.start_seq ?? 1);
    let prev: string = chain?.start_prev_hash ?? GENESIS;
    let count = 0;
    let first: number | null = null;
    for (;;) {
      const rows = await this.deps.db<Row>('audit_events').where('seq', '>=', expectedSeq).orderBy('seq').limit(1000);
      for (const r of rows) {
        const e = eventOf(r);
        if (e.seq !== expectedSeq) return { ok: false, seq: expectedSeq, reason: `event ${expectedSeq} is missing (the next is ${e.seq})` };
        const { hash, ...body } = e;
        if (eventHash(prev, body) !== hash) return { ok: false, seq: e.seq, reason: `event ${e.seq} does not match its hash (edited, or moved from elsewhere in the chain)` };
        first ??= e.seq;
        prev = hash;
        expectedSeq += 1;
        count += 1;
      }
      if (rows.length < 1000) break;
    }
    const headSeq = Number(chain?.head_seq ?? 0);
    if (chain && headSeq !== expectedSeq - 1) {
      return { ok: false, seq: expectedSeq, reason: headSeq > expectedSeq - 1 ? `events ${expectedSeq}..${headSeq} are missing (the chain was cut short)` : `event ${headSeq + 1} is beyond the recorded head` };
    }
    if (chain && count > 0 && chain.head_hash !== prev) return { ok: false, seq: expectedSeq - 1, reason: `event ${expectedSeq - 1} is not the recorded head` };
    return { ok: true, events: count, first_seq: first, last_seq: count ? expectedSeq - 1 : null };
  }

  /**
   * Deletes events older than `retentionMs`, and records where the chain now starts (the first
   * kept event and the hash it chains to), so what is left still verifies.
   */
  async prune(retentionMs: number, now = Date.now()): Promise<number> {
    await this.flush();
    return this.deps.db.transaction(async (trx) => {
      if (!this.postgres) await trx('audit_chain').where({ id: 1 }).update({ head_seq: trx.raw('head_seq') });
      const q = trx('audit_chain').where({ id: 1 });
      const chain = await (this.postgres ? q.forUpdate() : q).first();
      if (!chain) return 0;
      const cut = await trx<Row>('audit_events').where('at', '<', now - retentionMs).max({ seq: 'seq' }).first();
      const lastOld = cut?.seq === null || cut?.seq === undefined ? null : Number(cut.seq);
      if (lastOld === null) return 0;
      const boundary = await trx<Row>('audit_events').where({ seq: lastOld }).first('hash');
      const n = await trx('audit_events').where('seq', '<=', lastOld).delete();
      await trx('audit_chain').where({ id: 1 }).update({ start_seq: lastOld + 1, start_prev_hash: boundary!.hash });
      return n;
    });
  }
}
