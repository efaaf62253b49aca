/**
 * Groups of the LDAP provider (ldap.ts): the entry's group attribute, Active Directory's primary
 * group, nested groups through the in-chain rule, groupOfNames / groupOfUniqueNames where there is
 * no memberOf, and the mapping of directory group DNs to local group names.
 */
import type { Client, Entry } from 'ldapts';
import { ldapts } from './ldapts.js';
import { errorMessage, isTimeout } from './ldap-connection.js';
import type { ResolvedOptions } from './ldap-options.js';
import { escapeFilterValue, firstText, normalizeDN, texts, values, type DirectoryInfo } from './ldap-search.js';
import { sidWithRid } from './sid.js';

/** LDAP_MATCHING_RULE_IN_CHAIN: membership through any chain of groups */
const IN_CHAIN = '1.2.840.113556.1.4.1941';

/** AD: the DN of the entry's primary group (objectSid = the domain's SID + primaryGroupID), or null. */
async function primaryGroup(client: Client, entry: Entry, info: DirectoryInfo): Promise<string | null> {
  const rid = Number(firstText(entry, 'primaryGroupID'));
  const [sid] = values(entry, 'objectSid');
  if (!Number.isInteger(rid) || rid <= 0 || !Buffer.isBuffer(sid)) return null;
  let groupSid: Buffer;
  try {
    groupSid = sidWithRid(sid, rid);
  } catch {
    return null;
  }
  const { searchEntries } = await client.search(info.domainDN, {
    scope: 'sub',
    filter: new (ldapts().EqualityFilter)({ attribute: 'objectSid', value: groupSid }),
    attributes: ['1.1'],
    sizeLimit: 1,
  });
  return searchEntries[0]?.dn ?? null;
}

function useNested(info: DirectoryInfo, options: ResolvedOptions): boolean {
  return options.nestedGroups === 'auto' ? info.ad : options.nestedGroups;
}

async function groupDNs(client: Client, entry: Entry, info: DirectoryInfo, options: ResolvedOptions): Promise<string[]> {
  const direct = texts(entry, options.groupAttr);
  try {
    const primary = await primaryGroup(client, entry, info);
    const found = new Set([...direct, ...(primary ? [primary] : [])]);
    if (useNested(info, options)) {
      // every group holding the user, or the primary group, through any chain of groups
      const holders = [entry.dn, ...(primary ? [primary] : [])].map((dn) => `(member:${IN_CHAIN}:=${escapeFilterValue(dn)})`);
      const { searchEntries } = await client.search(info.domainDN, {
        scope: 'sub',
        filter: holders.length === 1 ? holders[0]! : `(|${holders.join('')})`,
        attributes: ['1.1'],
        paged: { pageSize: 500 },
      });
      for (const g of searchEntries) found.add(g.dn);
      return [...found];
    }
    if (found.size > 0 || info.ad) return [...found];
    const member = escapeFilterValue(entry.dn);
    const { searchEntries } = await client.search(options.baseDN, {
      scope: 'sub',
      filter: `(|(&(objectClass=groupOfNames)(member=${member}))(&(objectClass=groupOfUniqueNames)(uniqueMember=${member})))`,
      attributes: ['1.1'],
    });
    return searchEntries.map((g) => g.dn);
  } catch (err) {
    if (isTimeout(err)) throw err;
    // Failing the login beats logging someone in with their groups silently stripped.
    throw new Error(`LDAP group search for ${entry.dn} failed: ${errorMessage(err)}`);
  }
}

/**
 * The local group names of the entry's directory groups (`mapping`: normalised group DN -> local
 * names); `seen` (when given) receives every directory group found, mapped or not.
 */
export async function mappedGroups(
  client: Client,
  entry: Entry,
  info: DirectoryInfo,
  options: ResolvedOptions,
  mapping: Map<string, string[]>,
  seen?: string[],
): Promise<string[]> {
  const local = new Set<string>();
  for (const dn of await groupDNs(client, entry, info, options)) {
    seen?.push(dn);
    for (const name of mapping.get(normalizeDN(dn)) ?? []) local.add(name);
  }
  return [...local];
}
