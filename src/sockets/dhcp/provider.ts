import Joi from 'joi';
import type { Knex } from 'knex';
import type { Logger } from '../../log.js';
import { operation, SocketProvider, type ProviderCapabilities, type ProviderOperation } from '../base-provider.js';
import type { DnsRecordsPort } from '../dns/records-port.js';
import { SocketError } from '../errors.js';
import { KeaClient } from './kea-client.js';
import { subnetsOf, type KeaConfig } from './kea-config.js';
import { ConfigLock } from './lock.js';
import { Reservations, type ReservationRemoved } from './reservations.js';
import {
  healthResult,
  hostname,
  hwAddress,
  ipv4,
  leaseResult,
  leaseState,
  READ_PERMISSION,
  reservationResult,
  subnetId,
  WRITE_PERMISSION,
  type DhcpLease,
  type LeasesArgs,
  type ReleaseArgs,
  type ReservationAddArgs,
  type ReservationRemoveArgs,
  type ReservationsArgs,
} from './shapes.js';

export interface DhcpProviderOptions {
  /** Kea DHCPv4's control socket (required) */
  socketPath?: string;
  /** every call to Kea is bounded by this */
  timeoutMs?: number;
  /** the zones a reservation's hostname may be in (the first qualifies a bare label) */
  dnsZones?: string[];
  /** the service's database: on PostgreSQL the lock around a change of Kea's configuration */
  db?: Knex;
  postgres?: boolean;
  /** where the dns provider is found, for reservations with dns */
  dnsProvider?: () => unknown;
}

/** how long an answer that Kea is available is kept */
/** the operations' args (and the answer of a removal), made once per process: operations() is asked at every request */
const LEASE_ARGS = Joi.object<LeasesArgs, true>({
  subnet_id: subnetId,
  hw_address: hwAddress,
  hostname,
  ip_address: ipv4,
});
const REMOVED = Joi.object({
  removed: Joi.boolean().valid(true).required(),
  reservation: reservationResult.required(),
  records_removed: Joi.number().integer().required(),
});

const RESULTS = {
  leases: Joi.object({ leases: Joi.array().items(leaseResult).required() }),
  lease_release: Joi.object({ released: Joi.boolean().valid(true).required(), ip_address: Joi.string().required() }),
  reservations: Joi.object({ reservations: Joi.array().items(reservationResult).required() }),
  reservation_add: Joi.object({ reservation: reservationResult.required() }),
};

const ARGS = {
  none: Joi.object<Record<string, never>, true>({}),
  leases: LEASE_ARGS,
  lease_release: Joi.object<ReleaseArgs, true>({ ip_address: ipv4.required() }),
  reservations: Joi.object<ReservationsArgs, true>({ subnet_id: subnetId }),
  reservation_add: Joi.object<ReservationAddArgs, true>({
    subnet_id: subnetId.required(),
    hw_address: hwAddress.required(),
    ip_address: ipv4.required(),
    hostname,
    dns: Joi.boolean().default(false).description('also add the A and PTR records through the dns provider (all or nothing)'),
  }),
  reservation_remove: Joi.object<ReservationRemoveArgs, true>({ subnet_id: subnetId.required(), hw_address: hwAddress.required() }),
};

const AVAILABILITY_TTL_MS = 1000;

const NO_SUBNET = 'not_found: Kea has no subnet with this subnet_id';
const NO_HOOK = 'unsupported: Kea has not loaded the lease_cmds hook library';

/** A Kea lease as lease_cmds answers it. */
interface KeaLease {
  'ip-address': string;
  'hw-address'?: string;
  hostname?: string;
  'subnet-id': number;
  state?: number;
  cltt?: number;
  'valid-lft'?: number;
}

/** The records port of a provider, when it serves one. */
export function recordsPortOf(provider: unknown): DnsRecordsPort | null {
  const p = provider as Partial<DnsRecordsPort> | null | undefined;
  return p && typeof p.addRecords === 'function' && typeof p.removeRecords === 'function' ? (p as DnsRecordsPort) : null;
}

/**
 * The `dhcp` provider: Kea DHCPv4 through its control socket (lease_cmds for the leases, the
 * configuration for the host reservations).
 */
export class DhcpProvider extends SocketProvider {
  readonly name = 'dhcp';
  readonly socket_path: string;
  readonly capabilities: ProviderCapabilities = { can_verify_mounts: false, can_repair_permissions: false };
  private readonly kea: KeaClient;
  private readonly reservations: Reservations;

  constructor(options: DhcpProviderOptions = {}, logger?: Logger) {
    super(options as unknown as Record<string, unknown>, logger);
    if (typeof options.socketPath !== 'string' || !options.socketPath) throw new Error('dhcp: socketPath is required');
    this.socket_path = options.socketPath;
    const timeoutMs = options.timeoutMs ?? 5000;
    this.kea = new KeaClient(this.socket_path, timeoutMs);
    this.reservations = new Reservations({
      kea: this.kea,
      // another instance's change takes a few calls to Kea (and the dns provider's) at most
      lock: new ConfigLock(options.db ?? null, options.postgres === true, timeoutMs * 6),
      zones: options.dnsZones ?? [],
      dns: () => recordsPortOf(options.dnsProvider?.()),
      log: logger,
    });
  }

  /** Asks Kea its version, as the base's shareProbe says (a Kea found away is asked again at once: a restarted Kea serves at once). */
  override isAvailable(): Promise<boolean> {
    return this.shareProbe(AVAILABILITY_TTL_MS, () =>
      this.kea.call('version-get').then(
        () => this.seen(null),
        (err: Error) => this.seen(err.message),
      ),
    );
  }

  /** A call to Kea; an answer that Kea is away marks the provider unavailable until the next check. */
  private async call<T>(command: string, args?: Record<string, unknown>) {
    try {
      const answer = await this.kea.call<T>(command, args);
      this.seen(null);
      return answer;
    } catch (err) {
      if (err instanceof SocketError && err.code === 'unavailable') this.seen(err.message);
      throw err;
    }
  }

  override async health_check(): Promise<Record<string, unknown>> {
    try {
      const version = await this.call<unknown>('version-get');
      const config = await this.call<KeaConfig>('config-get');
      const subnets = config.value ? subnetsOf(config.value).map(({ id, subnet }) => ({ id, subnet })) : [];
      return { available: true, version: version.text || null, subnets };
    } catch (err) {
      return { available: false, version: null, subnets: [], reason: (err as Error).message };
    }
  }

  async leases(args: LeasesArgs): Promise<{ leases: DhcpLease[] }> {
    let found: KeaLease[];
    if (args.subnet_id !== undefined) await this.subnetExists(args.subnet_id);
    if (args.ip_address !== undefined) {
      const one = await this.call<KeaLease>('lease4-get', { 'ip-address': args.ip_address });
      found = one.empty || !one.value ? [] : [one.value];
    } else if (args.hw_address !== undefined) {
      found = await this.leaseList('lease4-get-by-hw-address', { 'hw-address': args.hw_address });
    } else if (args.hostname !== undefined) {
      found = await this.leaseList('lease4-get-by-hostname', { hostname: args.hostname });
    } else {
      found = await this.leaseList('lease4-get-all', args.subnet_id !== undefined ? { subnets: [args.subnet_id] } : undefined);
    }
    const leases = found
      .map(leaseView)
      .filter(
        (l) =>
          (args.subnet_id === undefined || l.subnet_id === args.subnet_id) &&
          (args.hw_address === undefined || l.hw_address === args.hw_address) &&
          (args.hostname === undefined || l.hostname?.toLowerCase().replace(/\.$/, '') === args.hostname) &&
          (args.ip_address === undefined || l.ip_address === args.ip_address),
      );
    return { leases };
  }

  private async leaseList(command: string, args?: Record<string, unknown>): Promise<KeaLease[]> {
    const answer = await this.call<{ leases?: KeaLease[] }>(command, args);
    return Array.isArray(answer.value?.leases) ? answer.value.leases : [];
  }

  private async subnetExists(id: number): Promise<void> {
    const config = await this.call<KeaConfig>('config-get');
    if (!config.value || !subnetsOf(config.value).some((s) => s.id === id)) {
      throw new SocketError('not_found', `Kea has no subnet with id ${id}`, [{ field: 'subnet_id', message: `no subnet with id ${id}` }]);
    }
  }

  async release(args: ReleaseArgs): Promise<{ released: true; ip_address: string }> {
    const answer = await this.call('lease4-del', { 'ip-address': args.ip_address });
    if (answer.empty)
      throw new SocketError('not_found', `Kea has no lease for ${args.ip_address}`, [{ field: 'ip_address', message: 'no lease for this address' }]);
    return { released: true, ip_address: args.ip_address };
  }

  /** The reservations' writer calls Kea directly: mark availability by its outcome too. */
  private async tracked<T>(work: () => Promise<T>): Promise<T> {
    try {
      const out = await work();
      this.seen(null);
      return out;
    } catch (err) {
      if (err instanceof SocketError && err.code === 'unavailable' && /^Kea /.test(err.message)) this.seen(err.message);
      throw err;
    }
  }

  /** made once per provider: the bus handler asks at every request */
  private ops: Record<string, ProviderOperation> | null = null;

  operations(): Record<string, ProviderOperation> {
    this.ops ??= this.makeOperations();
    return this.ops;
  }

  private makeOperations(): Record<string, ProviderOperation> {
    return {
      health: operation({
        schema: ARGS.none,
        permission: null,
        requires_available: false,
        changes: false,
        result: healthResult,
        http: { method: 'GET', summary: "Kea's availability, version and subnets", response: 'available false (with the reason) while Kea is away' },
        run: () => this.health_check(),
        // why Kea is away names its socket: a host fact for those who may read or change Kea only
        shownTo: (r, may) => {
          const health = r as { reason?: string };
          if (health.reason === undefined || may(READ_PERMISSION) || may(WRITE_PERMISSION)) return r;
          return { ...health, reason: 'Kea is not available', host_facts_hidden: true };
        },
      }),
      leases: operation({
        schema: ARGS.leases,
        permission: READ_PERMISSION,
        result: RESULTS.leases,
        http: {
          method: 'GET',
          summary: 'DHCPv4 leases',
          description: 'All leases, or those of a subnet, an Ethernet address, a host name or an address (the filters combine).',
          responses: { 404: NO_SUBNET, 501: NO_HOOK },
        },
        run: (a) => this.leases(a),
      }),
      lease_release: operation({
        schema: ARGS.lease_release,
        permission: WRITE_PERMISSION,
        result: RESULTS.lease_release,
        http: {
          method: 'POST',
          summary: 'Release a DHCPv4 lease',
          description: "Deletes the lease from Kea's lease database (lease4-del).",
          responses: { 404: 'not_found: Kea has no lease for this address', 501: NO_HOOK },
        },
        audited: (a) => ({ ...a }),
        run: (a) => this.release(a),
      }),
      reservations: operation({
        schema: ARGS.reservations,
        permission: READ_PERMISSION,
        result: RESULTS.reservations,
        http: {
          method: 'GET',
          summary: 'DHCPv4 host reservations',
          description: "The reservations of Kea's configuration, of every subnet or one.",
          responses: { 404: NO_SUBNET },
        },
        run: async (a) => ({ reservations: await this.tracked(() => this.reservations.list(a.subnet_id)) }),
      }),
      reservation_add: operation({
        schema: ARGS.reservation_add,
        permission: WRITE_PERMISSION,
        result: RESULTS.reservation_add,
        http: {
          method: 'POST',
          summary: 'Add a DHCPv4 host reservation',
          description: "Changes Kea's configuration and rewrites its configuration file (config-set, config-write); with dns: true the A and PTR records too.",
          responses: {
            403: 'forbidden_zone: the hostname is outside SERVICE_DNS_ZONES (the details name the field)',
            404: NO_SUBNET,
            409: 'conflict: the Ethernet address, the address or the host name is reserved in the subnet already, or a DNS record of the name is taken',
          },
        },
        audited: (a) => ({ ...a }),
        run: async (a) => ({ reservation: await this.tracked(() => this.reservations.add(a)) }),
      }),
      reservation_remove: operation({
        schema: ARGS.reservation_remove,
        permission: WRITE_PERMISSION,
        result: REMOVED,
        http: {
          method: 'POST',
          summary: 'Remove a DHCPv4 host reservation',
          description: "Changes Kea's configuration and rewrites its configuration file; removes the DNS records the reservation added.",
          responses: { 404: 'not_found: no such subnet, or no reservation of this Ethernet address in it' },
        },
        audited: (a) => ({ ...a }),
        run: (a): Promise<ReservationRemoved> => this.tracked(() => this.reservations.remove(a)),
      }),
    };
  }
}

function leaseView(l: KeaLease): DhcpLease {
  const text = (v: unknown) => (typeof v === 'string' && v.length > 0 ? v : null);
  const lifetime = l['valid-lft'];
  // Kea's infinite lifetime is 0xffffffff
  const ends = typeof l.cltt === 'number' && typeof lifetime === 'number' && lifetime < 0xffffffff ? new Date((l.cltt + lifetime) * 1000).toISOString() : null;
  return {
    ip_address: l['ip-address'],
    hw_address: text(l['hw-address'])?.toLowerCase() ?? null,
    hostname: text(l.hostname),
    subnet_id: l['subnet-id'],
    state: leaseState(l.state),
    expires_at: ends,
  };
}
