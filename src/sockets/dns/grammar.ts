import type { DnsRecord, DnsRecordType } from './records-port.js';

/**
 * The strict grammar of what the dns provider writes into Unbound. Unbound itself is loose (it
 * ignores text after a record, takes a CNAME beside an A record): every name and every record
 * data is checked and put in one canonical form here before a control command is built from it,
 * so nothing a caller sends can become a second record or a second command.
 */

export const RECORD_TYPES: readonly DnsRecordType[] = ['A', 'AAAA', 'CNAME', 'TXT', 'PTR'];
export const DEFAULT_TTL = 3600;
export const MAX_TTL = 604_800;
export const TXT_MAX = 255;
/** a name in presentation form, with its trailing dot */
const NAME_MAX = 254;
const LABEL = /^_?[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$/;
const OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])';
const IPV4 = new RegExp(`^${OCTET}(?:\\.${OCTET}){3}$`);

/** What is wrong with a value (a sentence after the field's name), or its canonical form. */
export type Checked = { ok: true; value: string } | { ok: false; problem: string };
const bad = (problem: string): Checked => ({ ok: false, problem });

/**
 * A domain name: labels of letters, digits and hyphens (not first or last; a leading underscore
 * allowed, as in `_acme-challenge`), 1 to 63 characters each, at most 253 characters in all;
 * lower-cased, with a trailing dot added when missing.
 */
export function checkName(input: string): Checked {
  if (!input || input === '.') return bad('must be a domain name like host.home.arpa.');
  const name = (input.endsWith('.') ? input : `${input}.`).toLowerCase();
  if (name.length > NAME_MAX) return bad(`must be at most ${NAME_MAX - 1} characters long`);
  const labels = name.slice(0, -1).split('.');
  for (const label of labels) {
    if (label.length === 0) return bad('must not hold an empty label (two dots in a row, or a leading dot)');
    if (label.length > 63) return bad('must not hold a label longer than 63 characters');
    if (!LABEL.test(label)) return bad('must hold only labels of letters, digits and inner hyphens (an underscore only first)');
  }
  return { ok: true, value: name };
}

/** An IPv4 address as a dotted quad of decimal octets without leading zeros. */
export function checkIPv4(input: string): Checked {
  return IPV4.test(input) ? { ok: true, value: input } : bad('must be an IPv4 address like 192.0.2.10 (four decimal octets and nothing else)');
}

/** An IPv6 address (no zone index), in its canonical text form (RFC 5952: lower case, the longest zero run as ::). */
export function checkIPv6(input: string): Checked {
  const groups = ipv6Groups(input);
  return groups ? { ok: true, value: formatIPv6(groups) } : bad('must be an IPv6 address like 2001:db8::10');
}

function ipv6Groups(input: string): number[] | null {
  if (!/^[0-9A-Fa-f:.]{2,45}$/.test(input)) return null;
  let text = input;
  // an embedded IPv4 tail (::ffff:192.0.2.1) becomes its two groups
  const v4 = /:((?:\d{1,3}\.){3}\d{1,3})$/.exec(text);
  if (v4) {
    if (!IPV4.test(v4[1]!)) return null;
    const o = v4[1]!.split('.').map(Number);
    text = `${text.slice(0, v4.index + 1)}${((o[0]! << 8) | o[1]!).toString(16)}:${((o[2]! << 8) | o[3]!).toString(16)}`;
  }
  if (text.includes('.')) return null;
  const halves = text.split('::');
  if (halves.length > 2) return null;
  const parse = (s: string): number[] | null => {
    if (s === '') return [];
    const parts = s.split(':');
    if (parts.some((p) => !/^[0-9A-Fa-f]{1,4}$/.test(p))) return null;
    return parts.map((p) => parseInt(p, 16));
  };
  const head = parse(halves[0]!);
  const rest = halves.length === 2 ? parse(halves[1]!) : [];
  if (!head || !rest) return null;
  const known = head.length + rest.length;
  if (halves.length === 1) return known === 8 ? head : null;
  if (known > 7) return null;
  return [...head, ...new Array<number>(8 - known).fill(0), ...rest];
}

function formatIPv6(groups: number[]): string {
  let best = { at: -1, len: 0 };
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.len && j - i >= 2) best = { at: i, len: j - i };
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best.at < 0) return hex.join(':');
  return `${hex.slice(0, best.at).join(':')}::${hex.slice(best.at + best.len).join(':')}`;
}

/**
 * TXT text: 1 to 255 printable ASCII characters (space to tilde), and neither a double quote
 * nor a backslash: the text is written between double quotes, so these two are refused rather
 * than escaped (no way out of the quotes, no escape sequence to misread).
 */
export function checkTxt(input: string): Checked {
  if (input.length < 1 || input.length > TXT_MAX) return bad(`must be 1 to ${TXT_MAX} characters long`);
  if (/[\r\n]/.test(input)) return bad('must be one line (no line breaks)');
  if (!/^[\x20-\x7e]*$/.test(input)) return bad('must hold only printable ASCII characters');
  if (/["\\]/.test(input)) return bad('must not hold a double quote or a backslash');
  return { ok: true, value: input };
}

/** The data of a record of `type`, checked and in its canonical form. */
export function checkData(type: DnsRecordType, data: string): Checked {
  switch (type) {
    case 'A':
      return checkIPv4(data);
    case 'AAAA':
      return checkIPv6(data);
    case 'CNAME':
    case 'PTR': {
      const name = checkName(data);
      return name.ok ? name : bad(`must be a domain name: it ${name.problem}`);
    }
    case 'TXT':
      return checkTxt(data);
    default:
      return bad('has an unknown record type');
  }
}

/** Is `name` the zone or inside it (both canonical)? */
export function inZone(name: string, zone: string): boolean {
  return name === zone || name.endsWith(`.${zone}`);
}

/**
 * The PTR name of an IPv4 address inside `cidr` (`a.b.c.d/len`), or null when `name` is not the
 * reverse name of an address of that subnet (or the subnet is not IPv4).
 */
export function reverseAddressIn(name: string, cidr: string): string | null {
  const m = /^((?:\d{1,3}\.){3}\d{1,3})\/(\d{1,2})$/.exec(cidr);
  if (!m || !IPV4.test(m[1]!) || Number(m[2]) > 32) return null;
  const r = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.in-addr\.arpa\.$/.exec(name);
  if (!r) return null;
  const address = [r[4], r[3], r[2], r[1]].join('.');
  if (!IPV4.test(address)) return null;
  const bits = Number(m[2]);
  const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
  return (toInt(address) & mask) >>> 0 === (toInt(m[1]!) & mask) >>> 0 ? address : null;
}

function toInt(address: string): number {
  return address.split('.').reduce((n, o) => ((n << 8) | Number(o)) >>> 0, 0);
}

/** Does the text hold a control character (a line break, the end marker \\x04, NUL, DEL...)? */
export function hasControl(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c === 0x7f) return true;
  }
  return false;
}

/** One record as an Unbound `local_data` argument: nothing in it but checked, canonical parts. */
export function rrLine(r: DnsRecord): string {
  const data = r.type === 'TXT' ? `"${r.data}"` : r.data;
  const line = `${r.name} ${r.ttl} IN ${r.type} ${data}`;
  // the parts were checked; this refuses a line that would end the command whatever happened
  if (hasControl(line)) throw new Error('a record line holds a control character');
  return line;
}

/** A record Unbound listed (`list_local_data`): name, ttl, type, data; `line` is Unbound's own text of it. */
export interface ListedRecord {
  name: string;
  ttl: number;
  type: string;
  data: string;
  line: string;
}

/**
 * The records of `list_local_data`: the five known types in their canonical form (TXT as its
 * text, the character-strings joined), any other type with its data as Unbound printed it.
 */
export function parseLocalData(text: string): ListedRecord[] {
  const out: ListedRecord[] = [];
  for (const line of text.split('\n')) {
    const m = /^(\S+)\s+(\d+)\s+IN\s+([A-Z0-9]+)\s+(.*?)\s*$/.exec(line);
    if (!m) continue;
    const [, rawName, ttl, type, raw] = m as unknown as [string, string, string, string, string];
    const name = rawName.toLowerCase();
    let data = raw;
    if (type === 'TXT') data = txtText(raw);
    else if (RECORD_TYPES.includes(type as DnsRecordType)) {
      const checked = checkData(type as DnsRecordType, raw);
      if (checked.ok) data = checked.value;
    }
    out.push({ name, ttl: Number(ttl), type, data, line });
  }
  return out;
}

/** The text of TXT data in presentation form: its quoted character-strings joined, escapes (\" \\ \DDD) undone. */
export function txtText(raw: string): string {
  let out = '';
  let i = 0;
  while (i < raw.length) {
    if (raw[i] !== '"') {
      // an unquoted character-string, up to the next space
      const end = raw.indexOf(' ', i);
      out += unescape(raw.slice(i, end < 0 ? raw.length : end));
      i = end < 0 ? raw.length : end + 1;
      continue;
    }
    let j = i + 1;
    let s = '';
    while (j < raw.length && raw[j] !== '"') {
      if (raw[j] === '\\' && j + 1 < raw.length) {
        const ddd = /^\d{3}/.exec(raw.slice(j + 1));
        s += ddd ? String.fromCharCode(Number(ddd[0])) : raw[j + 1];
        j += ddd ? 4 : 2;
      } else s += raw[j++];
    }
    out += s;
    i = j + 1;
    while (raw[i] === ' ') i++;
  }
  return out;
}

function unescape(s: string): string {
  return s.replace(/\\(\d{3}|.)/g, (_, e: string) => (e.length === 3 ? String.fromCharCode(Number(e)) : e));
}

/** The key of a record, for comparing the table with Unbound: name, type and canonical data (not the TTL). */
export function keyOf(r: { name: string; type: string; data: string }): string {
  return `${r.name}\u0000${r.type}\u0000${r.data}`;
}
