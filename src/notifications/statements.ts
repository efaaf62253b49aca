/**
 * The statements the notification writer (src/notifications/writer.ts) stores a batch with: the
 * counter row's lock and seq range, and the INSERTs of new rows.
 */
import type { Knex } from 'knex';
import { onPostgres } from '../db/knex.js';
import type { Row } from './rows.js';

/** the counters row that hands out notification seqs */
export const SEQ_COUNTER = 'notifications';
/** rows per INSERT on PostgreSQL (both databases take this many bound values) */
const CHUNK = 500;

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
export async function insertRows(trx: Knex.Transaction, rows: Row[]): Promise<void> {
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

/**
 * Takes the counter's lock before a batch reads anything (PostgreSQL: its row lock; SQLite: the
 * database's write lock), so that what the batch reads (the ids it replaces, the deliveries its
 * hooks have seen) is what the writers before it committed: two instances writing one id at
 * once then replace it in turn instead of both inserting it (a unique violation failed the
 * later one's whole batch).
 */
export async function lockCounter(trx: Knex.Transaction): Promise<void> {
  await trx('counters')
    .where({ name: SEQ_COUNTER })
    .update({ value: trx.raw('??', ['value']) });
}

/** Takes `n` seqs: one statement, whose row lock (PostgreSQL) orders this batch after every other writer's. */
export async function allocate(trx: Knex.Transaction, n: number): Promise<number> {
  const rows: { value: number | string }[] = await trx('counters').where({ name: SEQ_COUNTER }).increment('value', n).returning('value');
  if (!rows.length) throw new Error('the notifications counter is missing (migration not applied?)');
  return Number(rows[0].value);
}

/**
 * Inserts new rows and takes their seqs in one statement (PostgreSQL): the counter's UPDATE and
 * the INSERT commit together, the row lock ordering this batch after every other writer's, as
 * allocate() does in a transaction. Each row's seq is its slot; answers the range's first seq.
 * The rows go as one array a column, so the statement's text is the same for any batch.
 */
export async function insertFresh(db: Knex, rows: Row[]): Promise<number> {
  const column = <K extends keyof Row>(k: K) => rows.map((r) => r[k] ?? null);
  const { rows: out } = (await db.raw(
    `with taken as (update counters set value = value + ? where name = ? returning value - ? as base),
     inserted as (
       insert into notifications (id, seq, user_id, title, message, level, source, link, toast, cleared, sender, created_at, updated_at)
       select r.id, taken.base + 1 + r.slot, r.user_id, r.title, r.message, r.level, r.source, r.link, r.toast, false, r.sender, r.at, r.at
       from taken, unnest(?::text[], ?::bigint[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::boolean[], ?::text[], ?::bigint[])
         as r(id, slot, user_id, title, message, level, source, link, toast, sender, at)
     )
     select base from taken`,
    [
      rows.length,
      SEQ_COUNTER,
      rows.length,
      column('id'),
      column('seq'),
      column('user_id'),
      column('title'),
      column('message'),
      column('level'),
      column('source'),
      column('link'),
      rows.map((r) => Boolean(r.toast)),
      column('sender'),
      column('created_at'),
    ] as Knex.RawBinding[],
  )) as { rows: { base: number | string }[] };
  if (!out.length) throw new Error('the notifications counter is missing (migration not applied?)');
  return Number(out[0].base) + 1;
}
