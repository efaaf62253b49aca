import type { Logger } from '../../log.js';
import { SocketError } from '../errors.js';
import type { DnsRecordInput, DnsRecordsPort } from '../dns/records-port.js';
import type { KeaClient } from './kea-client.js';
import {
  CONTEXT_KEY,
  forConfigSet,
  hasDns,
  reservationsOf,
  reservationView,
  subnetsOf,
  type KeaConfig,
  type KeaReservation,
  type KeaSubnet,
} from './kea-config.js';
import type { ConfigLock } from './lock.js';
import {
  hostInSubnet,
  invalidArg,
  normalHostname,
  normalMac,
  qualifiedHostname,
  reverseName,
  type DhcpReservation,
  type ReservationAddArgs,
  type ReservationRemoveArgs,
} from './shapes.js';

export interface ReservationsDeps {
  kea: KeaClient;
  lock: ConfigLock;
  /** the zones a hostname may be in (the first qualifies a bare label) */
  zones: readonly string[];
  /** the dns provider's records port, when one is registered */
  dns: () => DnsRecordsPort | null;
  log?: Logger;
}

export interface ReservationRemoved {
  removed: true;
  reservation: DhcpReservation;
  /** how many of its DNS records were removed (0 for a reservation without dns) */
  records_removed: number;
}

/**
 * Host reservations, kept in Kea's configuration (Kea 2.2's open hooks have no host commands):
 * each change is a read-modify-write under the lock (config-get, the change, config-set,
 * config-write, which rewrites Kea's configuration file). With `dns` the A and PTR records go
 * in the same change through the dns provider; whichever side fails, the other is undone.
 */
export class Reservations {
  constructor(private readonly deps: ReservationsDeps) {}

  async list(subnetId?: number): Promise<DhcpReservation[]> {
    const config = await this.config();
    const subnets = subnetsOf(config);
    const chosen = subnetId === undefined ? subnets : [subnetNamed(subnets, subnetId)];
    return chosen.flatMap((s) => reservationsOf(s).map((r) => reservationView(s.id, r)));
  }

  async add(args: ReservationAddArgs): Promise<DhcpReservation> {
    const hw = normalMac(args.hw_address);
    if (!hw) throw invalidArg('hw_address', 'must be an Ethernet address like aa:bb:cc:dd:ee:ff');
    let host: string | null = null;
    if (args.hostname !== undefined) {
      const name = normalHostname(args.hostname);
      if (!name) throw invalidArg('hostname', 'must be a host name of letters, digits and hyphens');
      host = qualifiedHostname(name, this.deps.zones);
    }
    if (args.dns && !host) throw invalidArg('hostname', 'is required when dns is true');
    const port = args.dns ? this.deps.dns() : null;
    if (args.dns && !port) throw invalidArg('dns', 'no dns provider is configured (SERVICE_DNS_CONTROL_SOCKET): the records cannot be added');

    return this.deps.lock.run(async () => {
      const config = await this.config();
      const subnet = subnetNamed(subnetsOf(config), args.subnet_id);
      if (!hostInSubnet(args.ip_address, subnet.subnet)) {
        throw invalidArg('ip_address', `must be a host address inside subnet ${subnet.id} (${subnet.subnet})`);
      }
      const list = reservationsOf(subnet);
      const taken = (field: string, message: string) => new SocketError('conflict', `${field}: ${message}`, [{ field, message }]);
      if (list.some((r) => String(r['hw-address'] ?? '').toLowerCase() === hw))
        throw taken('hw_address', `${hw} already has a reservation in subnet ${subnet.id}`);
      if (list.some((r) => r['ip-address'] === args.ip_address)) throw taken('ip_address', `${args.ip_address} is already reserved in subnet ${subnet.id}`);
      if (host && list.some((r) => String(r.hostname ?? '').toLowerCase() === host))
        throw taken('hostname', `${host} is already reserved in subnet ${subnet.id}`);
      await this.notLeasedToAnother(args.ip_address, hw, taken);

      const before = structuredClone(config);
      const entry: KeaReservation = { 'hw-address': hw, 'ip-address': args.ip_address };
      if (host) entry.hostname = host;
      if (args.dns) entry['user-context'] = { [CONTEXT_KEY]: { dns: true } };
      const records = port && host ? recordsOf(host, args.ip_address) : [];
      // the records first: a refusal there (a name taken, a zone) leaves Kea untouched
      if (port)
        await port
          .addRecords(records, { reverseOf: subnet.subnet, owner: `dhcp:${subnet.id}:${hw}`, exclusive: true })
          .catch((err: unknown) => refusedByDns(err, records));
      try {
        list.push(entry);
        await this.apply(config, before);
      } catch (err) {
        if (port) await this.undo('remove the records of a reservation Kea refused', () => port.removeRecords(records));
        throw err;
      }
      this.deps.log?.info({ subnet_id: subnet.id, hw_address: hw, ip_address: args.ip_address, dns: args.dns }, 'dhcp reservation added');
      return reservationView(subnet.id, entry);
    });
  }

  async remove(args: ReservationRemoveArgs): Promise<ReservationRemoved> {
    const hw = normalMac(args.hw_address);
    if (!hw) throw invalidArg('hw_address', 'must be an Ethernet address like aa:bb:cc:dd:ee:ff');
    return this.deps.lock.run(async () => {
      const config = await this.config();
      const subnet = subnetNamed(subnetsOf(config), args.subnet_id);
      const list = reservationsOf(subnet);
      const at = list.findIndex((r) => String(r['hw-address'] ?? '').toLowerCase() === hw);
      if (at < 0) throw new SocketError('not_found', `no reservation for ${hw} in subnet ${subnet.id}`);
      const before = structuredClone(config);
      const [entry] = list.splice(at, 1) as [KeaReservation];
      await this.apply(config, before);
      let removed = 0;
      if (hasDns(entry) && typeof entry.hostname === 'string' && typeof entry['ip-address'] === 'string') {
        const port = this.deps.dns();
        if (!port) {
          this.deps.log?.warn({ subnet_id: subnet.id, hw_address: hw }, 'dhcp reservation removed; no dns provider is configured to remove its records');
        } else {
          const records = recordsOf(entry.hostname, entry['ip-address']);
          try {
            removed = await port.removeRecords(records);
          } catch (err) {
            // the records stay: so does the reservation
            await this.undo('put back a reservation whose records could not be removed', () => this.apply(before, config));
            throw err;
          }
        }
      }
      this.deps.log?.info({ subnet_id: subnet.id, hw_address: hw, records_removed: removed }, 'dhcp reservation removed');
      return { removed: true, reservation: reservationView(subnet.id, entry), records_removed: removed };
    });
  }

  /**
   * An address Kea has leased to another client (an active lease, not expired) is taken: reserved
   * for this one, the two clients would fight over it. Without lease_cmds the leases cannot be
   * read: nothing to compare with.
   */
  private async notLeasedToAnother(ip: string, hw: string, taken: (field: string, message: string) => SocketError): Promise<void> {
    let lease: { 'hw-address'?: unknown; state?: unknown; cltt?: unknown; 'valid-lft'?: unknown } | undefined;
    try {
      const answer = await this.deps.kea.call<typeof lease>('lease4-get', { 'ip-address': ip });
      lease = answer.empty ? undefined : answer.value;
    } catch (err) {
      if (err instanceof SocketError && err.code === 'unsupported') return;
      throw err;
    }
    if (!lease || String(lease['hw-address'] ?? '').toLowerCase() === hw) return;
    if (lease.state !== undefined && lease.state !== 0) return;
    const ends = typeof lease.cltt === 'number' && typeof lease['valid-lft'] === 'number' ? (lease.cltt + lease['valid-lft']) * 1000 : Infinity;
    if (ends <= Date.now()) return;
    throw taken('ip_address', `${ip} is leased to another client (release its lease first)`);
  }

  /** The configuration Kea runs. */
  private async config(): Promise<KeaConfig> {
    const { value } = await this.deps.kea.call<KeaConfig>('config-get');
    if (!value || typeof value !== 'object' || !value.Dhcp4) throw new SocketError('failed', 'Kea answered config-get without a Dhcp4 configuration');
    return value;
  }

  /** config-set then config-write; when the file cannot be written, Kea is set back to `before` (its running configuration and its file agree). */
  private async apply(config: KeaConfig, before: KeaConfig): Promise<void> {
    // the lock keeps out this service's instances, not the operator: a configuration Kea runs that
    // is no longer the one this change was made from (a config-set or config-reload meanwhile) is
    // not overwritten
    const now = await this.config();
    if (JSON.stringify(forConfigSet(now)) !== JSON.stringify(forConfigSet(before))) {
      throw new SocketError('conflict', "Kea's configuration changed while this change was made (another writer): nothing was changed, try again");
    }
    try {
      await this.deps.kea.call('config-set', forConfigSet(config));
    } catch (err) {
      // no answer (a frozen Kea reads the command once it runs again): the configuration it had
      // is sent after it, so whichever Kea reads, it ends where it started
      if (err instanceof SocketError && err.code === 'unavailable') {
        await this.undo('set Kea back after config-set got no answer', () => this.deps.kea.call('config-set', forConfigSet(before)));
      }
      throw err;
    }
    try {
      await this.deps.kea.call('config-write');
    } catch (err) {
      await this.undo('set Kea back after config-write failed', () => this.deps.kea.call('config-set', forConfigSet(before)));
      // without an answer the write may still happen once Kea runs again: the file is written again after the set-back
      if (err instanceof SocketError && err.code === 'unavailable')
        await this.undo('write the configuration set back', () => this.deps.kea.call('config-write'));
      throw err instanceof SocketError && err.code === 'failed' ? new SocketError('failed', `Kea could not write its configuration file: ${err.message}`) : err;
    }
  }

  /** An undo step: its failure is logged (the caller's own error is what the caller hears). */
  private async undo(what: string, step: () => Promise<unknown>): Promise<void> {
    try {
      await step();
    } catch (err) {
      this.deps.log?.error({ err }, `dhcp: could not ${what}`);
    }
  }
}

/** The A record (name -> address) and the PTR record (reverse name -> name) of a reservation. */
export function recordsOf(host: string, ip: string): DnsRecordInput[] {
  const fqdn = `${host.replace(/\.$/, '')}.`;
  return [
    { name: fqdn, type: 'A', data: ip },
    { name: reverseName(ip), type: 'PTR', data: fqdn },
  ];
}

/**
 * A refusal of the dns side, told in the reservation's own fields: the A record is the hostname's,
 * the PTR record's name is the address's (its data the hostname's). Other failures as they are.
 */
function refusedByDns(err: unknown, records: DnsRecordInput[]): never {
  if (!(err instanceof SocketError) || !['conflict', 'forbidden_zone', 'invalid_args'].includes(err.code)) throw err;
  const [a, ptr] = records;
  const fieldOf = (text: string): string => {
    const m = /records\[(\d)\]\.(\w+)/.exec(text);
    if (m) return m[1] === '1' && m[2] === 'name' ? 'ip_address' : 'hostname';
    return ptr && text.includes(ptr.name) && !(a && text.includes(a.name)) ? 'ip_address' : 'hostname';
  };
  const listed = Array.isArray(err.details) ? (err.details as Array<{ field?: unknown; message?: unknown }>) : [];
  const details = listed.length
    ? listed.map((d) => ({ field: fieldOf(String(d.field ?? '')), message: `dns: ${String(d.message ?? err.message)}` }))
    : [{ field: fieldOf(err.message), message: `dns: ${err.message}` }];
  throw new SocketError(err.code, `dns: ${err.message}`, details);
}

function subnetNamed(subnets: KeaSubnet[], id: number): KeaSubnet {
  const subnet = subnets.find((s) => s.id === id);
  if (!subnet) throw new SocketError('not_found', `Kea has no subnet with id ${id}`, [{ field: 'subnet_id', message: `no subnet with id ${id}` }]);
  return subnet;
}
