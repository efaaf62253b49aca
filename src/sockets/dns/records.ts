import type { Logger } from '../../log.js';
import { SocketError } from '../errors.js';
import { type UnboundControl, UnboundRefusal } from './control.js';
import {
  checkData,
  checkName,
  DEFAULT_TTL,
  inZone,
  keyOf,
  MAX_TTL,
  parseLocalData,
  RECORD_TYPES,
  reverseAddressIn,
  rrLine,
  type ListedRecord,
} from './grammar.js';
import type { AddRecordsOptions, DnsRecord, DnsRecordInput, DnsRecordType } from './records-port.js';
import type { RecordStore, StoredRecord } from './store.js';

/** What dns:record_remove (or the port) removes: a name's records, of one type, or one record. */
export interface RemoveSpec {
  name: string;
  type?: DnsRecordType;
  data?: string;
}

/** A record as dns:records lists it (another type than the five, e.g. the zone's SOA, as Unbound prints its data). */
export interface ListedView {
  name: string;
  type: string;
  ttl: number;
  data: string;
}

/** The marker zone: present while Unbound holds what the table holds; gone after a restart or reload. */
export const MARKER_ZONE = 'records-restored.service-core.invalid.';

/**
 * The records the dns provider manages: the rules (zones, conflicts, CNAME exclusivity), the
 * table (the truth, shared by the instances) and Unbound (which forgets what remote control
 * added when it restarts). Changes of one instance run one at a time (`serial`).
 */
export class DnsRecords {
  private readonly store: RecordStore;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly control: UnboundControl,
    store: RecordStore,
    readonly zones: readonly string[],
    private readonly log?: Logger,
  ) {
    this.store = store;
  }

  /** Runs `fn` after the changes queued before it. */
  serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** What Unbound serves as local data now. */
  async listed(): Promise<ListedRecord[]> {
    return parseLocalData(await this.control.command('list_local_data'));
  }

  /** Is a name inside one of the zones? */
  inZones(name: string): boolean {
    return this.zones.some((z) => inZone(name, z));
  }

  /** dns:records: what Unbound serves inside the zones (and the service's own records elsewhere, e.g. PTRs), optionally inside `zone`. */
  async list(zone?: string): Promise<ListedView[]> {
    if (zone !== undefined && !this.inZones(zone) && !this.zones.some((z) => inZone(z, zone)) && !inZone(zone, 'in-addr.arpa.')) {
      throw new SocketError('forbidden_zone', `${zone} is not one of the zones the service manages`, [{ field: 'zone', message: 'is outside the zones' }]);
    }
    const listed = await this.listed();
    const ours = new Set((await this.store.rows()).map(keyOf));
    return listed
      .filter((r) => this.inZones(r.name) || ours.has(keyOf(r)))
      .filter((r) => zone === undefined || inZone(r.name, zone))
      .map(({ name, type, ttl, data }) => ({ name, type, ttl, data }))
      .sort((a, b) => (a.name === b.name ? (a.type === b.type ? cmp(a.data, b.data) : cmp(a.type, b.type)) : cmp(a.name, b.name)));
  }

  /**
   * Adds records, all or none: each checked (grammar, zone; a PTR of `reverseOf`'s subnet may
   * go to its reverse zone), refused as `conflict` when it exists or breaks CNAME exclusivity
   * (with what Unbound serves and what the table holds), then kept in the table and given to
   * Unbound in one command. When Unbound fails, the rows go again and the names are put back.
   */
  add(inputs: readonly DnsRecordInput[], opts: AddRecordsOptions = {}, field = (i: number, f: string) => `records[${i}].${f}`) {
    const records = inputs.map((input, i) => this.checked(input, i, opts.reverseOf, field));
    return this.serial(async () => {
      const listed = await this.listed();
      const names = [...new Set(records.map((r) => r.name))];
      const added = await this.store.insertChecked(names, opts.owner ?? null, (stored) => {
        const byName = new Map<string, Array<{ type: string; key: string }>>();
        for (const r of [...listed, ...stored]) {
          if (!names.includes(r.name)) continue;
          byName.set(r.name, [...(byName.get(r.name) ?? []), { type: r.type, key: keyOf(r) }]);
        }
        for (const r of records) {
          const there = byName.get(r.name) ?? [];
          if (there.some((e) => e.key === keyOf(r))) throw conflict(`${r.name} already has the ${r.type} record ${r.data}`);
          if (r.type === 'CNAME' && there.length) throw conflict(`${r.name} already has records: a CNAME must be its only record`);
          if (there.some((e) => e.type === 'CNAME')) throw conflict(`${r.name} has a CNAME record: it can hold no other record`);
          if (opts.exclusive && there.some((e) => e.type === r.type)) throw conflict(`${r.name} already has a ${r.type} record`);
          there.push({ type: r.type, key: keyOf(r) });
          byName.set(r.name, there);
        }
        return records;
      });
      try {
        await this.control.command('local_datas', added.map(rrLine));
      } catch (err) {
        await this.store.delete(added).catch((e: unknown) => this.log?.error({ err: e }, 'dns: a record row could not be taken back'));
        if (err instanceof UnboundRefusal) await this.putBack(names, listed).catch(() => undefined);
        // no answer: Unbound may still take the command (frozen, it reads it once thawed); the next
        // sync takes out what it holds of these records and the table does not
        else this.changedHere(added);
        throw err instanceof UnboundRefusal ? new SocketError('failed', 'Unbound refused the records') : err;
      }
      this.changedHere(added);
      return added;
    });
  }

  /**
   * Removes what `spec` names (a name's records, of a type, or one record): from the table, then
   * from Unbound, by removing the name and putting the rest of its records back. Answers the
   * records removed (none: nothing matched). A name outside the zones that the service added no
   * record of is `forbidden_zone` (`outside: 'skip'`: passed over).
   */
  remove(specs: readonly RemoveSpec[], outside: 'refuse' | 'skip' = 'refuse'): Promise<DnsRecord[]> {
    return this.serial(async () => {
      const listed = await this.listed();
      const names = [...new Set(specs.map((s) => s.name))];
      const stored = await this.store.rows(names);
      const owned = new Set(stored.map((r) => r.name));
      // outside the zones only what the service added (a reservation's PTR); the port's callers hear 0 for the rest
      const allowed = (s: RemoveSpec) => this.inZones(s.name) || owned.has(s.name);
      if (outside === 'refuse') for (const s of specs) if (!allowed(s)) throw forbiddenZone(s.name, 'name', this.zones);
      specs = specs.filter(allowed);
      const matches = (r: { name: string; type: string; data: string }) =>
        specs.some((s) => s.name === r.name && (s.type === undefined || s.type === r.type) && (s.data === undefined || s.data === r.data));
      // outside the zones only the records the service added go (never an operator's beside them); inside,
      // only the five types it writes (a name's SOA or NS, the operator's, stay)
      const ours = new Set(stored.map(keyOf));
      const removable = (r: { name: string; type: string; data: string }) =>
        RECORD_TYPES.includes(r.type as DnsRecordType) && (this.inZones(r.name) || ours.has(keyOf(r)));
      const gone = new Map<string, DnsRecord>();
      for (const r of [...listed, ...stored]) {
        if (matches(r) && removable(r) && !gone.has(keyOf(r))) gone.set(keyOf(r), { name: r.name, type: r.type as DnsRecordType, ttl: r.ttl, data: r.data });
      }
      if (!gone.size) return [];
      await this.store.delete([...gone.values()]);
      this.changedHere([]);
      const touched = [...new Set([...gone.values()].map((r) => r.name))];
      await this.putBack(
        touched,
        listed.filter((r) => !gone.has(keyOf(r))),
      );
      return [...gone.values()];
    });
  }

  /** Removes each name from Unbound and gives it back the records in `keep` of that name (Unbound's own lines). */
  private async putBack(names: readonly string[], keep: readonly ListedRecord[]): Promise<void> {
    for (const name of names) {
      await this.control.command(`local_data_remove ${name}`);
      const rest = keep.filter((r) => r.name === name).map((r) => r.line.replace(/\t/g, ' ').trim());
      if (rest.length) await this.control.command('local_datas', rest);
    }
  }

  /**
   * Makes Unbound hold what the table holds, after it started again or reloaded (the marker is
   * gone) or after the table changed (another instance, with an Unbound of its own, added or
   * removed records): each zone declared (a static local zone when Unbound has none), every
   * record of the table given back, the records the table held at the last sync and no longer
   * holds taken out, then the marker. Answers how many records were put back.
   */
  restore(): Promise<number> {
    return this.serial(async () => {
      const declared = await this.declaredZones();
      for (const zone of this.zones) {
        if (declared.has(zone)) continue;
        this.log?.warn({ zone }, 'dns: Unbound has no local zone for a configured zone: added as static (declare it in unbound.conf)');
        await this.control.command(`local_zone ${zone} static`);
      }
      // what Unbound lists first, the table after: a record removed meanwhile is gone from both
      const listed = await this.listed();
      const there = new Set(listed.map(keyOf));
      const digest = await this.store.digest();
      const rows = await this.store.rows();
      const keys = new Set(rows.map(keyOf));
      const missing = rows.filter((r) => !there.has(keyOf(r)));
      if (missing.length) await this.control.command('local_datas', missing.map(rrLine));
      const stale = listed.filter((r) => this.synced?.keys.has(keyOf(r)) && !keys.has(keyOf(r)));
      if (stale.length) {
        const staleKeys = new Set(stale.map(keyOf));
        await this.putBack(
          [...new Set(stale.map((r) => r.name))],
          listed.filter((r) => !staleKeys.has(keyOf(r))),
        );
      }
      await this.control.command(`local_zone ${MARKER_ZONE} static`);
      this.synced = { digest, keys };
      if (missing.length || stale.length) this.log?.info({ put_back: missing.length, taken_out: stale.length }, 'dns: Unbound brought in line with the table');
      return missing.length;
    });
  }

  /**
   * This instance changed the table: the next check syncs (the digest is stale, and could even
   * come back to the same numbers: a record added and removed). Records it added are known as
   * the table's, so a removal by another instance takes them out of this Unbound; records it
   * removed stay known until that sync, which takes them out of Unbound if they are still there
   * (the removal from Unbound failed after the rows went).
   */
  private changedHere(added: readonly DnsRecord[]): void {
    if (!this.synced) return;
    for (const r of added) this.synced.keys.add(keyOf(r));
    this.synced.digest = '';
  }

  /** the table as the last restore() found it: its digest and its records */
  private synced: { digest: string; keys: Set<string> } | null = null;

  /**
   * Does Unbound hold what the table holds (the marker is there: no restart or reload since the
   * last restore; the table has not changed since) and declare every zone? When not, restore() is due.
   */
  async upToDate(): Promise<boolean> {
    const declared = await this.declaredZones();
    if (!declared.has(MARKER_ZONE) || !this.zones.every((z) => declared.has(z))) return false;
    return this.synced !== null && this.synced.digest === (await this.store.digest());
  }

  private async declaredZones(): Promise<Set<string>> {
    const text = await this.control.command('list_local_zones');
    return new Set(text.split('\n').map((l) => l.split(/\s+/)[0]!.toLowerCase()));
  }

  /** A record of the port, checked as the operations check theirs (field names `records[i].<field>`). */
  private checked(input: DnsRecordInput, i: number, reverseOf: string | undefined, field: (i: number, f: string) => string): DnsRecord {
    const problems: Array<{ field: string; message: string }> = [];
    const name = checkName(typeof input?.name === 'string' ? input.name : '');
    if (!name.ok) problems.push({ field: field(i, 'name'), message: name.problem });
    const type = input?.type;
    if (!RECORD_TYPES.includes(type)) problems.push({ field: field(i, 'type'), message: `must be one of ${RECORD_TYPES.join(', ')}` });
    const data = RECORD_TYPES.includes(type) && typeof input.data === 'string' ? checkData(type, input.data) : null;
    if (data && !data.ok) problems.push({ field: field(i, 'data'), message: data.problem });
    if (!data && RECORD_TYPES.includes(type)) problems.push({ field: field(i, 'data'), message: 'must be a string' });
    const ttl = input?.ttl ?? DEFAULT_TTL;
    if (!Number.isInteger(ttl) || ttl < 0 || ttl > MAX_TTL) problems.push({ field: field(i, 'ttl'), message: `must be an integer from 0 to ${MAX_TTL}` });
    if (problems.length || !name.ok || !data?.ok) {
      throw new SocketError('invalid_args', problems.map((p) => `${p.field}: ${p.message}`).join('; '), problems);
    }
    const reverse = type === 'PTR' && reverseOf !== undefined && reverseAddressIn(name.value, reverseOf) !== null;
    if (!this.inZones(name.value) && !reverse) throw forbiddenZone(name.value, field(i, 'name'), this.zones);
    return { name: name.value, type, data: data.value, ttl };
  }
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function conflict(message: string): SocketError {
  return new SocketError('conflict', message);
}

/**
 * A name outside the zones, naming them (dns:health shows them to anyone); a single label (`nas`)
 * is most likely a name meant inside one: the answer shows it written whole, as DHCP writes a
 * hostname (`nas.home.arpa.`), which a record's name is not made into.
 */
export function forbiddenZone(name: string, field: string, zones: readonly string[] = []): SocketError {
  const label = /^[^.]+\.$/.test(name) && zones.length ? `: a name is written whole, such as ${name}${zones[0]}` : '';
  const where = zones.length ? ` (${zones.join(', ')})` : '';
  return new SocketError('forbidden_zone', `${name} is outside the zones the service writes in${where}${label}`, [{ field, message: 'is outside the zones' }]);
}

export type { StoredRecord };
