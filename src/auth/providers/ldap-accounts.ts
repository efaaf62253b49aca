/**
 * Accounts of the LDAP provider (ldap.ts) read again between sign-ins, for the directory recheck
 * (src/auth/directory-recheck.ts): where each stands (active, disabled, expired, gone) and, for
 * the active ones, what a sign-in would read of them now (the profile: name, e-mail, display
 * name, mapped groups), so the recheck keeps the local user in step as a sign-in does.
 */
import type { Client, Entry } from 'ldapts';
import { ldapts } from './ldapts.js';
import type { Logger } from '../../log.js';
import { errorMessage, isTimeout } from './ldap-connection.js';
import { mappedGroups } from './ldap-groups.js';
import type { ResolvedOptions } from './ldap-options.js';
import { anyUserFilter, firstText, isWithin, stableId, type DirectoryInfo } from './ldap-search.js';
import { encodeObjectSid } from './sid.js';
import type { ExternalProfile } from './types.js';

/** userAccountControl ACCOUNTDISABLE */
const UF_ACCOUNTDISABLE = 0x2;
/** accountExpires: 0 and 2^63-1 mean never */
const NEVER = 0x7fffffffffffffffn;
/** accounts per search when checking them again */
const CHECK_BATCH = 100;

/** Where a directory account stands, as the recheck sees it. */
export type AccountState = 'active' | 'disabled' | 'expired' | 'gone';

/** An account read again: its state, and for an active one read with profiles, what a sign-in would read now. */
export interface DirectoryAccount {
  state: AccountState;
  profile: ExternalProfile | null;
}

/** What the reading needs of the provider. */
export interface AccountReading {
  options: ResolvedOptions;
  info: DirectoryInfo;
  /** normalised group DN -> local group names (empty: the provider does not map groups) */
  mapping: Map<string, string[]>;
  log: Logger;
  /** read the profiles of active accounts too (their names and groups) */
  profiles: boolean;
}

/**
 * The profile a sign-in makes of an entry (groups aside): the local name from `usernameAttr`
 * (on AD sAMAccountName when the entry lacks it, else `typed`; '' when neither: not known), the
 * directory's mail (vouched for by the directory), the display name or cn.
 */
export function profileOf(entry: Entry, options: ResolvedOptions, info: DirectoryInfo, log: Logger, typed: string | null): ExternalProfile {
  const mail = firstText(entry, 'mail');
  return {
    provider: 'ldap',
    provider_user_id: stableId(entry, log),
    username: firstText(entry, options.usernameAttr) ?? (info.ad ? firstText(entry, 'sAMAccountName') : null) ?? typed ?? '',
    email: mail,
    email_verified: mail !== null,
    display_name: firstText(entry, 'displayName') ?? firstText(entry, 'cn'),
  };
}

/** The attributes a sign-in reads of a user entry (ldap-search.ts findUser asks for the same). */
export function profileAttributes(options: ResolvedOptions): string[] {
  return ['objectSid', 'mail', 'displayName', 'cn', 'sAMAccountName', 'primaryGroupID', options.usernameAttr, options.groupAttr];
}

/** AD's account control and expiry of an entry (a directory without them: active). */
function accountState(entry: Entry, now: number): AccountState {
  const control = Number(firstText(entry, 'userAccountControl') ?? 0);
  if (Number.isFinite(control) && control & UF_ACCOUNTDISABLE) return 'disabled';
  const expires = firstText(entry, 'accountExpires');
  if (expires && /^\d+$/.test(expires)) {
    const ticks = BigInt(expires);
    // FILETIME: 100 ns since 1601-01-01
    if (ticks !== 0n && ticks !== NEVER && Number(ticks / 10_000n) - 11_644_473_600_000 <= now) return 'expired';
  }
  return 'active';
}

/**
 * Where the accounts behind these provider user ids (objectSid or DN, as sign-ins recorded
 * them) stand now: `gone` when no sign-in could find the entry any more (deleted, moved out of
 * the base DN, no longer matching the user filter), `disabled` (userAccountControl), `expired`
 * (accountExpires), else `active`. Throws when the directory cannot be asked. An active
 * account's groups that cannot be read leave its profile without groups (nothing concluded of
 * them), logged; a timeout throws.
 */
export async function readAccounts(client: Client, ids: string[], reading: AccountReading, now: number): Promise<Map<string, DirectoryAccount>> {
  const { options } = reading;
  const out = new Map<string, DirectoryAccount>();
  const anyUser = anyUserFilter(options);
  const attributes = ['objectSid', 'userAccountControl', 'accountExpires', ...(reading.profiles ? profileAttributes(options) : [])];
  const sids = ids.filter((id) => /^S-1-/.test(id));
  const dns = ids.filter((id) => !/^S-1-/.test(id));
  for (let i = 0; i < sids.length; i += CHECK_BATCH) {
    const batch = sids.slice(i, i + CHECK_BATCH);
    const { searchEntries } = await client.search(options.baseDN, {
      scope: 'sub',
      filter: new (ldapts().AndFilter)({
        filters: [
          anyUser,
          new (ldapts().OrFilter)({ filters: batch.map((sid) => new (ldapts().EqualityFilter)({ attribute: 'objectSid', value: encodeObjectSid(sid) })) }),
        ],
      }),
      attributes,
      explicitBufferAttributes: ['objectSid'],
      paged: { pageSize: CHECK_BATCH },
    });
    const byId = new Map<string, Entry>();
    for (const e of searchEntries) byId.set(stableId(e, reading.log), e);
    for (const sid of batch) {
      const entry = byId.get(sid);
      out.set(sid, entry ? await account(client, entry, sid, reading, now) : { state: 'gone', profile: null });
    }
  }
  for (const dn of dns) {
    let entry: Entry | undefined;
    if (isWithin(dn, options.baseDN)) {
      try {
        ({
          searchEntries: [entry],
        } = await client.search(dn, { scope: 'base', filter: anyUser, attributes, explicitBufferAttributes: ['objectSid'] }));
      } catch (err) {
        if (!(err instanceof ldapts().NoSuchObjectError)) throw err;
      }
    }
    out.set(dn, entry ? await account(client, entry, dn, reading, now) : { state: 'gone', profile: null });
  }
  return out;
}

async function account(client: Client, entry: Entry, id: string, reading: AccountReading, now: number): Promise<DirectoryAccount> {
  const state = accountState(entry, now);
  if (state !== 'active' || !reading.profiles) return { state, profile: null };
  // the id as the sign-in recorded it (a DN identity stays one though the entry has an objectSid)
  const profile = { ...profileOf(entry, reading.options, reading.info, reading.log, null), provider_user_id: id };
  if (reading.mapping.size === 0) return { state, profile };
  try {
    return { state, profile: { ...profile, groups: await mappedGroups(client, entry, reading.info, reading.options, reading.mapping) } };
  } catch (err) {
    if (isTimeout(err)) throw err;
    reading.log.warn({ dn: entry.dn, reason: errorMessage(err) }, "ldap: an account's groups could not be read again; its groups stay as they are");
    return { state, profile };
  }
}
