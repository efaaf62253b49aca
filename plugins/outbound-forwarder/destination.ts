import dns from 'node:dns';
import net from 'node:net';

/**
 * Where the forwarder may connect: public addresses only, unless a trusted actor set
 * allow_private_destinations. The check is on the address the socket connects to: a host name
 * is resolved by the connection's own lookup (below), which hands it only the addresses that
 * passed, so a name that resolves elsewhere a moment later (DNS rebinding) changes nothing.
 */

/** loopback, "this network", private (RFC 1918), CGNAT (100.64/10), link-local, benchmarking, multicast and reserved */
const V4 = new net.BlockList();
for (const [prefix, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const)
  V4.addSubnet(prefix, bits, 'ipv4');

/** unique-local, link-local, site-local, multicast, discard-only (forms that carry an IPv4 address are unpacked first) */
const V6 = new net.BlockList();
for (const [prefix, bits] of [
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
  ['100::', 64],
  ['64:ff9b:1::', 48],
] as const)
  V6.addSubnet(prefix, bits, 'ipv6');

/** The eight 16-bit words of an IPv6 address (net.isIPv6 has passed; a zone id is dropped). */
function words(address: string): number[] {
  let text = address.toLowerCase().replace(/%.*$/, '');
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const all = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return all.map((w) => parseInt(w, 16));
}

const v4Of = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;

/** Is `address` (an IP literal) one the forwarder may reach without allow_private_destinations? */
export function isPublicAddress(address: string): boolean {
  const kind = net.isIP(address);
  if (kind === 4) return !V4.check(address, 'ipv4');
  if (kind !== 6) return false;
  const w = words(address);
  const zero = (from: number, to: number) => w.slice(from, to).every((x) => x === 0);
  // ::ffff:a.b.c.d (mapped) and 64:ff9b::a.b.c.d (NAT64) reach that IPv4 address
  if (zero(0, 5) && w[5] === 0xffff) return isPublicAddress(v4Of(w[6]!, w[7]!));
  if (w[0] === 0x64 && w[1] === 0xff9b && zero(2, 6)) return isPublicAddress(v4Of(w[6]!, w[7]!));
  // ::, ::1 and the deprecated ::a.b.c.d
  if (zero(0, 6)) return false;
  // 6to4 carries the IPv4 address of its relay end
  if (w[0] === 0x2002 && !isPublicAddress(v4Of(w[1]!, w[2]!))) return false;
  return !V6.check(address, 'ipv6');
}

/** A delivery the forwarder refused before connecting: final, never retried. */
export class RefusedDestination extends Error {
  readonly code = 'private_destination';
}

const refusal = (host: string) =>
  new RefusedDestination(`refused: ${host} is not a public address (loopback, link-local or private); allow_private_destinations is off`);

/** An IP literal is connected as it is (no lookup runs): checked here, right before the attempt. */
export function checkLiteral(hostname: string): void {
  const host = hostname.replace(/^\[|\]$/g, '');
  if (net.isIP(host) && !isPublicAddress(host)) throw refusal(host);
}

/**
 * The connection's lookup: resolves the name and hands the socket only public addresses (all of
 * them for happy eyeballs, else the first); none left is a RefusedDestination.
 */
export const publicLookup: net.LookupFunction = (hostname, options, callback) => {
  dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, '');
    const allowed = addresses.filter((a) => isPublicAddress(a.address));
    if (!allowed.length) return callback(refusal(hostname), '');
    if (options.all) callback(null, allowed);
    else callback(null, allowed[0]!.address, allowed[0]!.family);
  });
};
