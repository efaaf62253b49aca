import Joi from 'joi';
import { SocketError } from '../errors.js';

/** The args and answers of the dhcp operations, and the address rules they are checked by. */

export const READ_PERMISSION = 'socket:dhcp:read';
export const WRITE_PERMISSION = 'socket:dhcp:write';

export interface DhcpLease {
  ip_address: string;
  hw_address: string | null;
  hostname: string | null;
  subnet_id: number;
  state: string;
  expires_at: string | null;
}

export interface DhcpReservation {
  subnet_id: number;
  hw_address: string | null;
  ip_address: string | null;
  hostname: string | null;
  dns: boolean;
}

export interface LeasesArgs {
  subnet_id?: number;
  hw_address?: string;
  hostname?: string;
  ip_address?: string;
}

export interface ReleaseArgs {
  ip_address: string;
}

export interface ReservationsArgs {
  subnet_id?: number;
}

export interface ReservationAddArgs {
  subnet_id: number;
  hw_address: string;
  ip_address: string;
  hostname?: string;
  dns: boolean;
}

export interface ReservationRemoveArgs {
  subnet_id: number;
  hw_address: string;
}

/** the Ethernet address forms accepted: aa:bb:cc:dd:ee:ff, aa-bb-cc-dd-ee-ff, aabb.ccdd.eeff, aabbccddeeff (any case) */
const MAC_FORMS = [/^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}$/i, /^[0-9a-f]{4}\.[0-9a-f]{4}\.[0-9a-f]{4}$/i, /^[0-9a-f]{12}$/i];

/** An Ethernet address in Kea's form (lower case, colons), or null when it is none of the accepted forms. */
export function normalMac(value: string): string | null {
  if (!MAC_FORMS.some((form) => form.test(value))) return null;
  const hex = value.replace(/[:.-]/g, '').toLowerCase();
  return hex.match(/../g)!.join(':');
}

const LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

/** A host name as Kea keeps it: lower case, no trailing dot; null when a label is not letters, digits and inner hyphens. */
export function normalHostname(value: string): string | null {
  const name = value.toLowerCase().replace(/\.$/, '');
  if (name.length === 0 || name.length > 253) return null;
  return name.split('.').every((label) => LABEL.test(label)) ? name : null;
}

export const subnetId = Joi.number().integer().min(1).max(4294967294).description("Kea's subnet id");
const OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])';
/** a dotted quad of decimal octets without leading zeros (Kea refuses `010.0.0.1`, which some parsers read as octal) */
const IPV4 = new RegExp(`^${OCTET}(?:\\.${OCTET}){3}$`);
export const ipv4 = Joi.string()
  .max(15)
  .pattern(IPV4)
  .messages({ 'string.pattern.base': '{{#label}} must be an IPv4 address like 192.0.2.10 (four decimal octets without leading zeros)' })
  .description('an IPv4 address');
export const hwAddress = Joi.string()
  .max(17)
  .custom((value: string, helpers) => normalMac(value) ?? helpers.error('any.invalid'))
  .messages({ 'any.invalid': '{{#label}} must be an Ethernet address like aa:bb:cc:dd:ee:ff' })
  .description('an Ethernet address (aa:bb:cc:dd:ee:ff, dashes or Cisco dots also taken; answered in lower case with colons)');
export const hostname = Joi.string()
  .max(254)
  .custom((value: string, helpers) => normalHostname(value) ?? helpers.error('any.invalid'))
  .messages({ 'any.invalid': '{{#label}} must be a host name of letters, digits and hyphens' })
  .description('a host name: a bare label (qualified by the first of SERVICE_DNS_ZONES) or a name inside one of the zones');

const nullable = (schema: Joi.Schema) => schema.allow(null).required();

export const leaseResult = Joi.object({
  ip_address: Joi.string().required(),
  hw_address: nullable(Joi.string()),
  hostname: nullable(Joi.string()),
  subnet_id: Joi.number().integer().required(),
  state: Joi.string().required().description('active, declined, expired (reclaimed), or state-<n> for a state this version does not name'),
  expires_at: nullable(Joi.string().isoDate()).description('when the lease ends (null: never)'),
});

export const reservationResult = Joi.object({
  subnet_id: Joi.number().integer().required(),
  hw_address: nullable(Joi.string()).description('null for a reservation by another identifier (client id, DUID, circuit id)'),
  ip_address: nullable(Joi.string()).description('null for a reservation that reserves no address'),
  hostname: nullable(Joi.string()),
  dns: Joi.boolean().required().description('its A and PTR records were added through the dns provider'),
}).id('DhcpReservation');

export const healthResult = Joi.object({
  available: Joi.boolean().required(),
  version: nullable(Joi.string()),
  subnets: Joi.array()
    .items(Joi.object({ id: Joi.number().integer().required(), subnet: Joi.string().required() }))
    .required(),
  reason: Joi.string().optional().description('why Kea is unavailable (in general words unless the caller may read or change Kea)'),
  host_facts_hidden: Joi.boolean().valid(true).optional().description("the reason's details (Kea's socket) are hidden from this caller"),
});

/** The lease states of Kea 2.2 by number. */
const LEASE_STATES: Record<number, string> = { 0: 'active', 1: 'declined', 2: 'expired' };

export function leaseState(state: unknown): string {
  return typeof state === 'number' ? (LEASE_STATES[state] ?? `state-${state}`) : 'active';
}

/** an IPv4 address as an unsigned number */
export function ipToInt(ip: string): number {
  return ip.split('.').reduce((n, octet) => n * 256 + Number(octet), 0);
}

/** Is `ip` a host address of `cidr` (inside it, and not its network or broadcast address where it has them)? */
export function hostInSubnet(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split('/');
  const prefix = Number(bits);
  if (!base || !Number.isInteger(prefix) || prefix < 0 || prefix > 32) return false;
  const size = 2 ** (32 - prefix);
  const start = Math.floor(ipToInt(base) / size) * size;
  const n = ipToInt(ip);
  if (n < start || n >= start + size) return false;
  return prefix >= 31 || (n !== start && n !== start + size - 1);
}

/** the PTR name of an IPv4 address, e.g. 10.2.0.192.in-addr.arpa. */
export function reverseName(ip: string): string {
  return `${ip.split('.').reverse().join('.')}.in-addr.arpa.`;
}

/**
 * The name Kea keeps for a hostname argument: a name inside one of the zones as it is, a bare
 * label qualified by the first zone (kept bare when no zone is configured); a name outside the
 * zones is refused (forbidden_zone, naming the field).
 */
export function qualifiedHostname(name: string, zones: readonly string[]): string {
  if (!name.includes('.')) return zones[0] ? `${name}.${zones[0].replace(/\.$/, '')}` : name;
  const inside = zones.some((zone) => zone !== '.' && `${name}.`.endsWith(`.${zone}`));
  if (!inside) {
    const message = zones.length
      ? `hostname must be a bare label or a name inside ${zones.join(', ')}`
      : 'hostname must be a bare label (no DNS zone is configured)';
    throw new SocketError('forbidden_zone', message, [{ field: 'hostname', message }]);
  }
  return name;
}

/** invalid_args naming one field */
export function invalidArg(field: string, message: string): SocketError {
  return new SocketError('invalid_args', `${field}: ${message}`, [{ field, message }]);
}
