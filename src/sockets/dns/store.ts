import type { Knex } from 'knex';
import { onPostgres } from '../../db/knex.js';
import type { DnsRecord, DnsRecordType } from './records-port.js';
import { keyOf } from './grammar.js';

/** A record the service added, as the `dns_records` table keeps it. */
export interface StoredRecord extends DnsRecord {
  owner: string | null;
}

interface Row {
  name: string;
  type: string;
  data: string;
  ttl: number | string;
  owner: string | null;
}

const TABLE = 'dns_records';
/** names per query (SQLite's parameter limit is far above; a batch of a reservation is a few) */
const CHUNK = 200;

/**
 * The `dns_records` table (migrations/20261201000000_dns_records.ts): the records the service
 * added, shared by every instance on the database. Changes to it run in a transaction that
 * holds one PostgreSQL advisory lock, so two instances checking a name for conflicts take turns
 * (SQLite has a single writer anyway).
 */
export class RecordStore {
  constructor(private readonly db: Knex) {}

  /** Every record (names given: only those names'), on `db` or the transaction given. */
  async rows(names?: readonly string[], on: Knex | Knex.Transaction = this.db): Promise<StoredRecord[]> {
    if (names && names.length === 0) return [];
    const batches = names ? chunks([...new Set(names)]) : [null];
    const out: StoredRecord[] = [];
    for (const batch of batches) {
      const query = on<Row>(TABLE).select('name', 'type', 'data', 'ttl', 'owner');
      if (batch) query.whereIn('name', batch);
      for (const r of await query.orderBy(['name', 'type', 'data'])) {
        out.push({ name: r.name, type: r.type as DnsRecordType, data: r.data, ttl: Number(r.ttl), owner: r.owner });
      }
    }
    return out;
  }

  /**
   * In one transaction under the lock: `decide` sees the stored records of `names` and returns
   * the records to insert (or throws to refuse); they are inserted with `owner`.
   */
  async insertChecked(names: readonly string[], owner: string | null, decide: (stored: StoredRecord[]) => DnsRecord[]): Promise<DnsRecord[]> {
    return this.db.transaction(async (trx) => {
      await this.lock(trx);
      const records = decide(await this.rows(names, trx));
      const now = Date.now();
      for (const r of records) await trx(TABLE).insert({ name: r.name, type: r.type, data: r.data, ttl: r.ttl, owner, created_at: now });
      return records;
    });
  }

  /**
   * What the table holds, in a few numbers that change with every insert and delete (rows are
   * never updated; ids only grow): the count, the highest id and the sum of the ids.
   */
  async digest(): Promise<string> {
    const row = (await this.db(TABLE).count({ n: '*' }).max({ top: 'id' }).sum({ total: 'id' }).first()) as Record<string, unknown> | undefined;
    return `${Number(row?.n ?? 0)}:${Number(row?.top ?? 0)}:${Number(row?.total ?? 0)}`;
  }

  /** Deletes these records (by name, type and data); answers how many rows went. */
  async delete(records: ReadonlyArray<{ name: string; type: string; data: string }>): Promise<number> {
    if (!records.length) return 0;
    return this.db.transaction(async (trx) => {
      await this.lock(trx);
      let n = 0;
      const seen = new Set<string>();
      for (const r of records) {
        if (seen.has(keyOf(r))) continue;
        seen.add(keyOf(r));
        n += await trx(TABLE).where({ name: r.name, type: r.type, data: r.data }).delete();
      }
      return n;
    });
  }

  private async lock(trx: Knex.Transaction): Promise<void> {
    if (onPostgres(this.db)) await trx.raw("SELECT pg_advisory_xact_lock(hashtext('service-core:dns_records'))");
  }
}

function chunks<T>(items: T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += CHUNK) out.push(items.slice(i, i + CHUNK));
  return out;
}
