import type { DhcpReservation } from './shapes.js';

/** Kea's configuration as config-get answers it (`{Dhcp4: {...}}`), read and changed in place. */
export type KeaConfig = { Dhcp4?: Record<string, unknown> } & Record<string, unknown>;

/** A reservation as Kea keeps it. */
export type KeaReservation = Record<string, unknown> & {
  'hw-address'?: string;
  'ip-address'?: string;
  hostname?: string;
  'user-context'?: Record<string, unknown>;
};

/** A subnet of the configuration: the object itself (changing it changes the configuration). */
export interface KeaSubnet {
  id: number;
  subnet: string;
  node: Record<string, unknown>;
}

/** where this service marks the reservations it added, in Kea's user-context */
export const CONTEXT_KEY = 'service-core';

const asArray = (v: unknown): Record<string, unknown>[] => (Array.isArray(v) ? v.filter((x) => x && typeof x === 'object') : []);

/** Every IPv4 subnet: the top-level ones and those inside shared networks. */
export function subnetsOf(config: KeaConfig): KeaSubnet[] {
  const dhcp4 = config.Dhcp4 ?? {};
  const nodes = [...asArray(dhcp4.subnet4), ...asArray(dhcp4['shared-networks']).flatMap((network) => asArray(network.subnet4))];
  return nodes
    .filter((node) => typeof node.id === 'number' && typeof node.subnet === 'string')
    .map((node) => ({ id: node.id as number, subnet: node.subnet as string, node }));
}

export function reservationsOf(subnet: KeaSubnet): KeaReservation[] {
  if (!Array.isArray(subnet.node.reservations)) subnet.node.reservations = [];
  return subnet.node.reservations as KeaReservation[];
}

/** Did this service add the reservation's DNS records? */
export function hasDns(r: KeaReservation): boolean {
  const mine = r['user-context']?.[CONTEXT_KEY] as { dns?: unknown } | undefined;
  return mine?.dns === true;
}

export function reservationView(subnetId: number, r: KeaReservation): DhcpReservation {
  const text = (v: unknown) => (typeof v === 'string' && v.length > 0 ? v : null);
  return {
    subnet_id: subnetId,
    hw_address: text(r['hw-address'])?.toLowerCase() ?? null,
    ip_address: text(r['ip-address']),
    hostname: text(r.hostname),
    dns: hasDns(r),
  };
}

/** The configuration as config-set takes it: the Dhcp4 part only (config-get of later versions adds a hash). */
export function forConfigSet(config: KeaConfig): Record<string, unknown> {
  return { Dhcp4: config.Dhcp4 };
}
