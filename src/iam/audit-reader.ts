import type { Knex } from 'knex';
import { GENESIS, eventHash, eventOf, type Row } from './audit-chain.js';
import type { AuditEvent, AuditFilter, VerifyResult } from './audit-types.js';

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

/**
 * Checks the chain from its start to its head: seqs without gaps, each hash recomputed and
 * chained to the previous one, the head at the last event. The first event that does not
 * match is named.
 */
export async function verifyChain(db: Knex): Promise<VerifyResult> {
  const chain = await db('audit_chain').where({ id: 1 }).first();
  let expectedSeq = Number(chain?.start_seq ?? 1);
  let prev: string = chain?.start_prev_hash ?? GENESIS;
  let count = 0;
  let first: number | null = null;
  for (;;) {
    const rows = await db<Row>('audit_events').where('seq', '>=', expectedSeq).orderBy('seq').limit(1000);
    for (const r of rows) {
      const e = eventOf(r);
      if (e.seq !== expectedSeq) return { ok: false, seq: expectedSeq, reason: `event ${expectedSeq} is missing (the next is ${e.seq})` };
      const { hash, ...body } = e;
      if (eventHash(prev, body) !== hash)
        return { ok: false, seq: e.seq, reason: `event ${e.seq} does not match its hash (edited, or moved from elsewhere in the chain)` };
      first ??= e.seq;
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
  return { ok: true, events: count, first_seq: first, last_seq: count ? expectedSeq - 1 : null };
}

/**
 * Deletes events older than `retentionMs`, and records where the chain now starts (the first
 * kept event and the hash it chains to), so what is left still verifies.
 */
export async function pruneChain(db: Knex, postgres: boolean, retentionMs: number, now = Date.now()): Promise<number> {
  return db.transaction(async (trx) => {
    if (!postgres)
      await trx('audit_chain')
        .where({ id: 1 })
        .update({ head_seq: trx.raw('head_seq') });
    const q = trx('audit_chain').where({ id: 1 });
    const chain = await (postgres ? q.forUpdate() : q).first();
    if (!chain) return 0;
    const cut = await trx<Row>('audit_events')
      .where('at', '<', now - retentionMs)
      .max({ seq: 'seq' })
      .first();
    const lastOld = cut?.seq === null || cut?.seq === undefined ? null : Number(cut.seq);
    if (lastOld === null) return 0;
    const boundary = await trx<Row>('audit_events').where({ seq: lastOld }).first('hash');
    const n = await trx('audit_events').where('seq', '<=', lastOld).delete();
    await trx('audit_chain')
      .where({ id: 1 })
      .update({ start_seq: lastOld + 1, start_prev_hash: boundary!.hash });
    return n;
  });
}
