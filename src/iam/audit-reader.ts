import type { Knex } from 'knex';
import { GENESIS, eventHash, eventOf, type Row } from './audit-chain.js';
import type { AuditEvent, AuditFilter, PruneRecord, VerifyResult } from './audit-types.js';

/**
 * The audit trail's reader: its events listed and exported, the chain verified and pruned,
 * straight from the database (the methods of AuditTrail, src/iam/audit.ts, call these once
 * what was recorded is flushed).
 */

/** Newest first; `before` is a seq (the next page's cursor is the last seq answered). */
export async function listEvents(db: Knex, filter: AuditFilter = {}): Promise<{ events: AuditEvent[]; next_before: number | null }> {
  const limit = Math.min(Math.max(filter.limit ?? 50, 1), 500);
  const q = db<Row>('audit_events')
    .orderBy('seq', 'desc')
    .limit(limit + 1);
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
export async function* exportEvents(db: Knex, since = 0): AsyncGenerator<AuditEvent> {
  let after = 0;
  for (;;) {
    const rows = await db<Row>('audit_events').where('seq', '>', after).andWhere('at', '>=', since).orderBy('seq').limit(1000);
    for (const r of rows) yield eventOf(r);
    if (rows.length < 1000) return;
    after = Number(rows[rows.length - 1]!.seq);
  }
}

/** An event walked by verify: where it is, and when it was written (ms). */
type Walked = { seq: number; at: number };

/**
 * Checks the chain from its start to its head: seqs without gaps, each hash recomputed and
 * chained to the previous one, the head at the last event, and the start where the latest
 * pruning left it (startProblem). The first event that does not match is named. One pass:
 * the latest pruning, and the oldest event before it, are noted on the way.
 */
export async function verifyChain(db: Knex): Promise<VerifyResult> {
  const chain = await db('audit_chain').where({ id: 1 }).first();
  let expectedSeq = Number(chain?.start_seq ?? 1);
  let prev: string = chain?.start_prev_hash ?? GENESIS;
  let count = 0;
  let first: AuditEvent | null = null;
  let oldest: Walked | null = null;
  let pruning: { event: AuditEvent; oldestBefore: Walked | null } | null = null;
  for (;;) {
    const rows = await db<Row>('audit_events').where('seq', '>=', expectedSeq).orderBy('seq').limit(1000);
    for (const r of rows) {
      const e = eventOf(r);
      if (e.seq !== expectedSeq) return { ok: false, seq: expectedSeq, reason: `event ${expectedSeq} is missing (the next is ${e.seq})` };
      const { hash, ...body } = e;
      if (eventHash(prev, body) !== hash)
        return { ok: false, seq: e.seq, reason: `event ${e.seq} does not match its hash (edited, or moved from elsewhere in the chain)` };
      first ??= e;
      if (e.action === 'audit.pruned') pruning = { event: e, oldestBefore: oldest };
      if (!oldest || Number(r.at) < oldest.at) oldest = { seq: e.seq, at: Number(r.at) };
      prev = hash;
      expectedSeq += 1;
      count += 1;
    }
    if (rows.length < 1000) break;
  }
  const headSeq = Number(chain?.head_seq ?? 0);
  if (chain && headSeq !== expectedSeq - 1) {
    return {
      ok: false,
      seq: expectedSeq,
      reason:
        headSeq > expectedSeq - 1
          ? `events ${expectedSeq}..${headSeq} are missing (the chain was cut short)`
          : `event ${headSeq + 1} is beyond the recorded head`,
    };
  }
  if (chain && count > 0 && chain.head_hash !== prev) return { ok: false, seq: expectedSeq - 1, reason: `event ${expectedSeq - 1} is not the recorded head` };
  const start = startProblem({ seq: Number(chain?.start_seq ?? 1), prevHash: chain?.start_prev_hash ?? GENESIS }, first, pruning);
  if (start) return start;
  const d = pruning?.event.details as Partial<PruneRecord> | undefined;
  return {
    ok: true,
    events: count,
    first_seq: first?.seq ?? null,
    last_seq: count ? expectedSeq - 1 : null,
    pruned: pruning
      ? {
          seq: pruning.event.seq,
          at: pruning.event.at,
          through_seq: Number(d?.through_seq),
          removed: Number(d?.removed),
          retention_ms: Number(d?.retention_ms),
        }
      : null,
  };
}

/**
 * The start rule. Events before the start are gone, so the start is only as good as what
 * vouches for it: the latest `audit.pruned` event in the chain, itself chained (a pruning is
 * appended after what it removes, and a later pruning that removes it records itself, so the
 * latest is never outside the chain). The recorded start (seq, the hash it chains to, the first
 * event's hash) must be the one it recorded; with no pruning in the chain, the chain starts at
 * seq 1 on the genesis hash. Its record must also agree with its window: its cutoff lies its
 * retention before its own time, and no event it kept before itself is older than the cutoff.
 */
function startProblem(
  start: { seq: number; prevHash: string },
  first: AuditEvent | null,
  pruning: { event: AuditEvent; oldestBefore: Walked | null } | null,
): VerifyResult | null {
  if (!pruning) {
    if (start.seq === 1 && start.prevHash === GENESIS) return null;
    return {
      ok: false,
      seq: start.seq,
      reason: `the chain starts at event ${start.seq} but holds no pruning that moved its start there: the events before it were removed without one`,
    };
  }
  const by = pruning.event.seq;
  const d = pruning.event.details as Partial<PruneRecord>;
  if (d.start_seq !== start.seq || d.start_prev_hash !== start.prevHash) {
    if (typeof d.start_seq === 'number' && d.start_seq < start.seq)
      return {
        ok: false,
        seq: d.start_seq,
        reason: `events ${d.start_seq}..${start.seq - 1} are missing at the start: the last pruning (event ${by}) left the chain starting at event ${d.start_seq}`,
      };
    return { ok: false, seq: start.seq, reason: `the chain's recorded start (event ${start.seq}) is not where the last pruning (event ${by}) left it` };
  }
  if (d.start_hash === null ? by !== start.seq : first?.hash !== d.start_hash)
    return { ok: false, seq: start.seq, reason: `event ${start.seq} is not the event the last pruning (event ${by}) kept first` };
  if (typeof d.before !== 'number' || typeof d.retention_ms !== 'number' || d.retention_ms < 0 || d.before + d.retention_ms > Date.parse(pruning.event.at))
    return { ok: false, seq: by, reason: `the last pruning (event ${by}) removed events inside its own retention window` };
  const o = pruning.oldestBefore;
  if (o && o.at < d.before)
    return {
      ok: false,
      seq: o.seq,
      reason: `event ${o.seq} is older than the cutoff of the last pruning (event ${by}), which kept it: that pruning's record does not match the chain`,
    };
  return null;
}

/**
 * Deletes events older than `retentionMs` before `now`, records where the chain now starts (the
 * first kept event and the hash it chains to), and appends what it did as an `audit.pruned`
 * event (`record`: the trail's chained append) in the same transaction, so what is left still
 * verifies and a start moved by anything else does not. Nothing old enough: nothing written.
 */
export async function pruneChain(
  db: Knex,
  postgres: boolean,
  retentionMs: number,
  now: number,
  record: (trx: Knex.Transaction, details: PruneRecord) => Promise<AuditEvent[]>,
): Promise<{ removed: number; events: AuditEvent[] }> {
  return db.transaction(async (trx) => {
    if (!postgres)
      await trx('audit_chain')
        .where({ id: 1 })
        .update({ head_seq: trx.raw('head_seq') });
    const q = trx('audit_chain').where({ id: 1 });
    const chain = await (postgres ? q.forUpdate() : q).first();
    if (!chain) return { removed: 0, events: [] };
    const before = now - retentionMs;
    const cut = await trx<Row>('audit_events').where('at', '<', before).max({ seq: 'seq' }).first();
    const lastOld = cut?.seq === null || cut?.seq === undefined ? null : Number(cut.seq);
    if (lastOld === null) return { removed: 0, events: [] };
    const boundary = await trx<Row>('audit_events').where({ seq: lastOld }).first('hash');
    const kept = await trx<Row>('audit_events')
      .where({ seq: lastOld + 1 })
      .first('hash');
    const removed = await trx('audit_events').where('seq', '<=', lastOld).delete();
    await trx('audit_chain')
      .where({ id: 1 })
      .update({ start_seq: lastOld + 1, start_prev_hash: boundary!.hash });
    const events = await record(trx, {
      from_seq: Number(chain.start_seq),
      through_seq: lastOld,
      removed,
      retention_ms: retentionMs,
      before,
      start_seq: lastOld + 1,
      start_prev_hash: boundary!.hash,
      start_hash: kept?.hash ?? null,
    });
    return { removed, events };
  });
}
