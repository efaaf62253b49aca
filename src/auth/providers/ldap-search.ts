/**
 * Searches of the LDAP provider (ldap.ts): filter values and their escaping, DNs, the attribute
 * values of entries, what the rootDSE says about the directory, and the user lookup.
 */
import type { Client, Entry, Filter } from 'ldapts';
import { ldapts } from './ldapts.js';
import type { Logger } from '../../log.js';
import { errorMessage, isTimeout } from './ldap-connection.js';
import type { ResolvedOptions } from './ldap-options.js';
import { decodeObjectSid } from './sid.js';

/** LDAP_CAP_ACTIVE_DIRECTORY_OID in the rootDSE's supportedCapabilities */
const AD_CAPABILITY = '1.2.840.113556.1.4.800';

/** RFC 4515 value escaping: the characters that would otherwise change the filter's meaning. */
export function escapeFilterValue(value: string): string {
  return value.replace(/[\\*()\0]/g, (ch) => `\\${ch.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/**
 * Comparison form of a DN: lower-cased, whitespace around separators removed. Escaped
 * separators (`\,`) stay part of their value. Good enough for mapping keys; not a full RFC 4514
 * normaliser (hex-escaped and quoted values are compared as written).
 */
export function normalizeDN(dn: string): string {
  let out = '';
  let pending = '';
  for (let i = 0; i < dn.length; i++) {
    const ch = dn[i]!;
    if (ch === '\\' && i + 1 < dn.length) {
      out += pending + ch + dn[i + 1];
      pending = '';
      i++;
    } else if (ch === ',' || ch === '=' || ch === '+') {
      out = out.trimEnd() + ch;
      pending = '';
      while (dn[i + 1] === ' ') i++;
    } else if (/\s/.test(ch)) {
      pending = ' ';
    } else {
      out += pending + ch;
      pending = '';
    }
  }
  return out.trim().toLowerCase();
}

/** `dn` is `base` or lies below it. */
export function isWithin(dn: string, base: string): boolean {
  const d = normalizeDN(dn);
  const b = normalizeDN(base);
  return d === b || d.endsWith(`,${b}`);
}

/** Attribute values of an entry, looked up case-insensitively (servers echo names in their own case). */
export function values(entry: Entry, attribute: string): Array<string | Buffer> {
  const wanted = attribute.toLowerCase();
  for (const [key, value] of Object.entries(entry)) {
    if (key === 'dn' || key.toLowerCase() !== wanted) continue;
    return Array.isArray(value) ? value : [value];
  }
  return [];
}

export function texts(entry: Entry, attribute: string): string[] {
  return values(entry, attribute).map((v) => (Buffer.isBuffer(v) ? v.toString('utf8') : v));
}

export function firstText(entry: Entry, attribute: string): string | null {
  const [value] = values(entry, attribute);
  if (value === undefined) return null;
  const text = (Buffer.isBuffer(value) ? value.toString('utf8') : value).trim();
  return text === '' ? null : text;
}

/** What the rootDSE says about the directory (read once per provider). */
export interface DirectoryInfo {
  /** Active Directory (or Samba AD) */
  ad: boolean;
  /** the naming context holding the base DN (AD: the domain), else the base DN */
  domainDN: string;
  /** AD: the domain's NetBIOS name (CORP), for `CORP\alice` */
  netbios: string | null;
}

/**
 * The rootDSE (and on AD the domain's NetBIOS name), read once per provider (ldap.ts keeps it).
 * null when the directory will not say: the provider treats it as not AD, and asks again next time.
 */
export async function readDirectoryInfo(client: Client, options: ResolvedOptions, log: Logger): Promise<DirectoryInfo | null> {
  let root: Entry | undefined;
  try {
    ({
      searchEntries: [root],
    } = await client.search('', {
      scope: 'base',
      filter: '(objectClass=*)',
      attributes: ['supportedCapabilities', 'namingContexts', 'defaultNamingContext', 'configurationNamingContext'],
    }));
  } catch (err) {
    if (isTimeout(err)) throw err;
    log.debug({ reason: errorMessage(err) }, 'ldap: the rootDSE could not be read; treating the directory as plain LDAP');
    return null;
  }
  if (!root) return null;
  const ad = texts(root, 'supportedCapabilities').includes(AD_CAPABILITY);
  // the longest naming context holding the base DN: the domain it lies in
  const contexts = texts(root, 'namingContexts').filter((nc) => isWithin(options.baseDN, nc));
  const domainDN = contexts.sort((a, b) => b.length - a.length)[0] ?? options.baseDN;
  let netbios: string | null = null;
  const configuration = firstText(root, 'configurationNamingContext');
  if (ad && configuration) {
    try {
      const { searchEntries } = await client.search(`CN=Partitions,${configuration}`, {
        scope: 'one',
        filter: new (ldapts().AndFilter)({
          filters: [
            new (ldapts().EqualityFilter)({ attribute: 'objectClass', value: 'crossRef' }),
            new (ldapts().EqualityFilter)({ attribute: 'nCName', value: domainDN }),
          ],
        }),
        attributes: ['nETBIOSName'],
      });
      netbios = searchEntries[0] ? firstText(searchEntries[0], 'nETBIOSName') : null;
    } catch (err) {
      if (isTimeout(err)) throw err;
      log.debug({ reason: errorMessage(err) }, "ldap: the domain's NetBIOS name could not be read; DOMAIN\\name logins are looked up as typed");
    }
  }
  const info = { ad, domainDN, netbios };
  log.debug({ ad, domain_dn: domainDN, netbios }, 'ldap: directory described');
  return info;
}

/** `CORP\alice` -> `alice` when CORP is this domain's NetBIOS name; anything else as typed. */
export function loginName(typed: string, info: DirectoryInfo): string {
  const m = /^([^\\]{1,15})\\([^\\]+)$/.exec(typed);
  if (m && info.netbios && m[1]!.toUpperCase() === info.netbios.toUpperCase()) return m[2]!;
  return typed;
}

export async function findUser(client: Client, login: string, options: ResolvedOptions, log: Logger): Promise<Entry | null> {
  const filter = options.userFilter.replaceAll('{username}', () => escapeFilterValue(login));
  const { usernameAttr, groupAttr } = options;
  let entries: Entry[];
  try {
    ({ searchEntries: entries } = await client.search(options.baseDN, {
      scope: 'sub',
      filter,
      // Two is enough to tell "exactly one" from "ambiguous" without fetching a whole directory.
      sizeLimit: 2,
      attributes: ['objectSid', 'mail', 'displayName', 'cn', 'sAMAccountName', 'primaryGroupID', usernameAttr, groupAttr],
      explicitBufferAttributes: ['objectSid'],
    }));
  } catch (err) {
    if (isTimeout(err)) throw err;
    throw new Error(`LDAP user search under ${options.baseDN} failed: ${errorMessage(err)}`);
  }
  if (entries.length === 0) {
    log.debug({ username: login }, 'ldap: no such user');
    return null;
  }
  if (entries.length > 1) {
    log.warn({ username: login, filter: options.userFilter }, 'ldap: user filter matched more than one entry; refusing the login');
    return null;
  }
  return entries[0]!;
}

/** objectSid (survives renames and moves) when the entry has one, else the DN. */
export function stableId(entry: Entry, log: Logger): string {
  const [sid] = values(entry, 'objectSid');
  if (Buffer.isBuffer(sid) && sid.length > 0) {
    try {
      return decodeObjectSid(sid);
    } catch (err) {
      log.warn({ dn: entry.dn, err: errorMessage(err) }, 'ldap: unreadable objectSid; using the DN');
    }
  } else if (typeof sid === 'string' && /^S-1-\d+(-\d+)*$/.test(sid)) {
    return sid; // some servers hand the SID out in string form already
  }
  return entry.dn;
}

/** The user filter for any login name: `{username}` becomes a wildcard ("some login finds this entry"). */
export function anyUserFilter(options: ResolvedOptions): Filter {
  return ldapts().FilterParser.parseString(options.userFilter.replaceAll('{username}', '*'));
}
