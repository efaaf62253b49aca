import Joi from 'joi';
import type { Knex } from 'knex';
import type { Logger } from '../../log.js';
import { operation, SocketProvider, type ProviderCapabilities, type ProviderOperation } from '../base-provider.js';
import { SocketError } from '../errors.js';
import { UnboundControl } from './control.js';
import { checkData, checkName, DEFAULT_TTL, MAX_TTL, RECORD_TYPES } from './grammar.js';
import { DnsRecords } from './records.js';
import type { AddRecordsOptions, DnsRecord, DnsRecordInput, DnsRecordsPort, DnsRecordType } from './records-port.js';
import { RecordStore } from './store.js';

export interface DnsProviderOptions {
  /** Unbound's remote-control UNIX socket */
  socketPath: string;
  /** the zones the service writes in, lower case with the trailing dot */
  zones: string[];
  /** the table of the records the service added */
  db: Knex;
  /** every call to Unbound is bounded by this */
  timeoutMs?: number;
  /** how long an availability check is remembered (default 1000 ms) */
  availabilityTtlMs?: number;
  /** how often Unbound is checked (and given back the records after a restart) without anyone asking (default 15 s; 0: never) */
  checkIntervalMs?: number;
}

interface ZoneArgs {
  zone?: string;
}
interface AddArgs {
  name: string;
  type: DnsRecordType;
  data: string;
  ttl?: number;
}
interface RemoveArgs {
  name: string;
  type?: DnsRecordType;
  data?: string;
}
interface NameArgs {
  name: string;
}

/** A domain name, checked by the strict grammar and given back in its canonical form (lower case, trailing dot). */
const domainName = Joi.string()
  .max(300)
  .custom((value: string, helpers) => {
    const checked = checkName(value);
    return checked.ok ? checked.value : helpers.message({ custom: `{{#label}} ${checked.problem}` });
  });

/** The data of a record, checked for the type beside it (the type's own error is the type's). */
const recordData = (typeRequired: boolean) =>
  Joi.string()
    .max(300)
    .custom((value: string, helpers) => {
      const type = (helpers.state.ancestors as Array<Record<string, unknown>>)[0]?.type;
      if (type === undefined) return typeRequired ? value : helpers.message({ custom: '{{#label}} needs the type of the record beside it' });
      if (!RECORD_TYPES.includes(type as DnsRecordType)) return value;
      const checked = checkData(type as DnsRecordType, value);
      return checked.ok ? checked.value : helpers.message({ custom: `{{#label}} ${checked.problem}` });
    });

const recordType = Joi.string().valid(...RECORD_TYPES);
const recordFields = {
  name: Joi.string().description('lower case, with the trailing dot'),
  type: recordType,
  ttl: Joi.number().integer().min(0),
  data: Joi.string().description('A: a dotted quad; AAAA: canonical IPv6; CNAME, PTR: a name; TXT: the text'),
};
/** a record the service wrote (named once in the API document: record_add and record_remove answer it) */
const record = Joi.object(recordFields).id('DnsRecord');
const listedRecord = Joi.object({
  ...recordFields,
  type: Joi.string().description('A, AAAA, CNAME, TXT, PTR, or a type of the operator (SOA, NS, MX...)'),
});

/** the operations' args, made once per process (operations() is asked at every request) */
const ARGS = {
  none: Joi.object<Record<string, never>, true>({}),
  records: Joi.object<ZoneArgs, true>({ zone: domainName.description('only the records inside this zone') }),
  record_add: Joi.object<AddArgs, true>({
    name: domainName.required(),
    type: recordType.required(),
    data: recordData(true).required(),
    ttl: Joi.number().integer().min(0).max(MAX_TTL).description(`seconds; default ${DEFAULT_TTL}`),
  }),
  record_remove: Joi.object<RemoveArgs, true>({ name: domainName.required(), type: recordType, data: recordData(false) }),
  flush: Joi.object<NameArgs, true>({ name: domainName.required() }),
};

const RESULTS = {
  health: Joi.object({
    available: Joi.boolean(),
    version: Joi.string().allow(null).description("Unbound's version (null while it is away)"),
    zones: Joi.array().items(Joi.string()).description('the zones the service writes in (SERVICE_DNS_ZONES)'),
    reason: Joi.string().allow(null).description('why Unbound is unavailable (null when available)'),
    host_facts_hidden: Joi.boolean().valid(true).optional().description("the reason's details (Unbound's control socket) are hidden from this caller"),
  }),
  records: Joi.object({ records: Joi.array().items(listedRecord) }),
  record: Joi.object({ record }),
  removed: Joi.object({ removed: Joi.number().integer().min(1), records: Joi.array().items(record) }),
  flushed: Joi.object({ flushed: Joi.string() }),
};

/**
 * The `dns` provider: Unbound's local data through its remote-control socket, written only
 * inside the configured zones, with the records it added kept in the database and put back
 * whenever Unbound has lost them (a restart, a reload). Also the DnsRecordsPort the dhcp
 * provider adds a reservation's records through.
 */
export class DnsProvider extends SocketProvider implements DnsRecordsPort {
  readonly name = 'dns';
  readonly socket_path: string;
  readonly capabilities: ProviderCapabilities = { can_verify_mounts: false, can_repair_permissions: false };
  readonly zones: readonly string[];
  private readonly control: UnboundControl;
  private readonly records: DnsRecords;
  private readonly ttlMs: number;
  private version: string | null = null;
  private readonly timer: NodeJS.Timeout | null;

  constructor(options: Record<string, unknown>, logger?: Logger) {
    super(options, logger);
    const o = options as unknown as DnsProviderOptions;
    if (typeof o.socketPath !== 'string' || !o.socketPath) throw new Error('dns provider: socketPath is required');
    if (!o.db) throw new Error('dns provider: db is required');
    this.socket_path = o.socketPath;
    this.zones = (o.zones ?? []).map((z) => (z.endsWith('.') ? z : `${z}.`).toLowerCase());
    this.control = new UnboundControl(o.socketPath, o.timeoutMs ?? 5000);
    this.records = new DnsRecords(this.control, new RecordStore(o.db), this.zones, logger);
    this.ttlMs = o.availabilityTtlMs ?? 1000;
    const every = o.checkIntervalMs ?? 15_000;
    this.timer = every > 0 ? setInterval(() => void this.isAvailable().catch(() => undefined), every) : null;
    this.timer?.unref();
  }

  /**
   * Asks Unbound (`status`), as the base's shareProbe says (at most once per availabilityTtlMs
   * while it answers, at once after an outage). When Unbound no longer holds the marker zone (it restarted or reloaded: what remote
   * control added is gone), the table's records are put back first.
   */
  override isAvailable(): Promise<boolean> {
    return this.shareProbe(this.ttlMs, () => this.probe());
  }

  private async probe(): Promise<void> {
    try {
      const status = await this.control.command('status');
      // a socket that takes the command and says nothing (or something else) is not Unbound answering
      if (!/is running/.test(status)) throw new SocketError('unavailable', `Unbound's control socket ${this.socket_path} gave no status`);
      this.version = /^version: (\S+)/m.exec(status)?.[1] ?? null;
      if (!(await this.records.upToDate())) {
        try {
          await this.records.restore();
        } catch (err) {
          if (err instanceof SocketError && err.code === 'unavailable') throw err;
          // Unbound answers; the next check tries again (the marker is still missing)
          this.log?.error({ err }, 'dns: records could not be put back into Unbound');
        }
      }
      this.seen(null);
    } catch (err) {
      this.seen(err instanceof SocketError ? err.message : `Unbound's control socket ${this.socket_path} failed`);
      if (!(err instanceof SocketError)) this.log?.warn({ err }, 'dns: availability check failed');
    }
  }

  /** A call to Unbound; Unbound found away is remembered (until the next check) so that the next callers hear `unavailable` at once. */
  private async guarded<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof SocketError && err.code === 'unavailable') this.seen(err.message);
      throw err;
    }
  }

  override async health_check(): Promise<{ available: boolean; version: string | null; zones: string[]; reason: string | null }> {
    const available = await this.isAvailable();
    return { available, version: available ? this.version : null, zones: [...this.zones], reason: this.unavailable_reason };
  }

  /** DnsRecordsPort: every record or none; `reverseOf` lets PTR records into that subnet's reverse zone. */
  async addRecords(records: DnsRecordInput[], opts: AddRecordsOptions = {}): Promise<DnsRecord[]> {
    await this.ready();
    return this.guarded(() => this.records.add(records, opts));
  }

  /** DnsRecordsPort: exactly these records (others of the same names stay); answers how many went. */
  async removeRecords(records: DnsRecordInput[]): Promise<number> {
    await this.ready();
    const specs = records.map((r, i) => {
      const name = checkName(typeof r?.name === 'string' ? r.name : '');
      const data = RECORD_TYPES.includes(r?.type) && typeof r.data === 'string' ? checkData(r.type, r.data) : null;
      if (!name.ok || !data?.ok) {
        const field = !name.ok ? `records[${i}].name` : `records[${i}].data`;
        throw new SocketError('invalid_args', `${field}: ${!name.ok ? name.problem : data?.ok === false ? data.problem : 'must name a type and data'}`, [
          { field, message: !name.ok ? name.problem : 'is not valid for its type' },
        ]);
      }
      return { name: name.value, type: r.type, data: data.value };
    });
    return (await this.guarded(() => this.records.remove(specs, 'skip'))).length;
  }

  /** The port's callers do not pass through the bus handler's availability check: the same answer here. */
  private async ready(): Promise<void> {
    if (!(await this.isAvailable()))
      throw new SocketError('unavailable', `socket provider dns is not available: ${this.unavailable_reason ?? 'Unbound is away'}`);
  }

  /** made once per provider: the bus handler asks at every request */
  private ops: Record<string, ProviderOperation> | null = null;

  operations(): Record<string, ProviderOperation> {
    this.ops ??= this.makeOperations();
    return this.ops;
  }

  private makeOperations(): Record<string, ProviderOperation> {
    const write = 'socket:dns:write';
    return {
      health: operation({
        schema: ARGS.none,
        permission: null,
        requires_available: false,
        result: RESULTS.health,
        http: { method: 'GET', summary: 'Unbound health: available, its version, the zones the service writes in', response: 'the check' },
        run: () => this.health_check(),
        // why Unbound is away names its socket: for those who administer dns only (as the provider list hides socket paths)
        shownTo: (r, may) => {
          const health = r as { reason: string | null };
          return health.reason === null || may('socket:dns:read') || may('socket:dns:write')
            ? r
            : { ...health, reason: 'Unbound is not available', host_facts_hidden: true };
        },
      }),
      records: operation({
        schema: ARGS.records,
        permission: 'socket:dns:read',
        result: RESULTS.records,
        http: {
          method: 'GET',
          summary: 'DNS records Unbound serves inside the zones (and the PTR records the service added)',
          response: 'the records',
          responses: { 403: 'forbidden_zone: zone is outside SERVICE_DNS_ZONES (and not a reverse zone); or forbidden: the caller lacks socket:dns:read' },
        },
        run: async (a) => ({ records: await this.guarded(() => this.records.list(a.zone)) }),
      }),
      record_add: operation({
        schema: ARGS.record_add,
        permission: write,
        result: RESULTS.record,
        http: {
          method: 'POST',
          summary: 'Add a DNS record inside the zones',
          description:
            'A record that exists, a CNAME beside other records or a record beside a CNAME is 409 conflict; a name outside the zones 403 forbidden_zone.',
          response: 'the record added, in its canonical form',
          responses: {
            403: 'forbidden_zone: the name is outside SERVICE_DNS_ZONES (details name the field); or forbidden: the caller lacks socket:dns:write; or step_up_required',
            409: 'conflict: the record exists, or a CNAME would stand beside other records of the name (or a record beside its CNAME)',
          },
        },
        // names, types and data of DNS records are not secrets
        audited: (a) => ({ ...a }),
        run: async (a) => ({ record: (await this.guarded(() => this.records.add([a], {}, (_i, f) => f)))[0] }),
      }),
      record_remove: operation({
        schema: ARGS.record_remove,
        permission: write,
        result: RESULTS.removed,
        http: {
          method: 'POST',
          summary: "Remove a name's DNS records (of one type, or one record with type and data)",
          description: 'Nothing matching is 404 not_found; a name outside the zones (and not added by the service) 403 forbidden_zone.',
          response: 'how many records went, and which',
          responses: {
            403: 'forbidden_zone: the name is outside SERVICE_DNS_ZONES and holds no record the service added; or forbidden: the caller lacks socket:dns:write; or step_up_required',
            404: 'not_found: no record of the name matches',
          },
        },
        audited: (a) => ({ ...a }),
        run: async (a) => {
          const gone = await this.guarded(() => this.records.remove([a]));
          if (!gone.length) throw new SocketError('not_found', `no record of ${a.name} matches`);
          return { removed: gone.length, records: gone };
        },
      }),
      flush: operation({
        schema: ARGS.flush,
        permission: write,
        result: RESULTS.flushed,
        http: { method: 'POST', summary: "Remove a name from Unbound's cache (flush)", response: 'the name flushed' },
        audited: (a) => ({ ...a }),
        run: async (a) => {
          await this.guarded(() => this.control.command(`flush ${a.name}`));
          return { flushed: a.name };
        },
      }),
    };
  }

  override async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
  }
}
