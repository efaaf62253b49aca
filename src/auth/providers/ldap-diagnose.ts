/**
 * What the Authentication page and the API ask of the LDAP provider (docs/auth.md, "Testing the directory"):
 *  - test connection: the service bind on the first server that answers, the rootDSE (which kind
 *    of server), the base DN searched; or a reason an operator can act on, each server's own;
 *  - test login: what a sign-in would conclude of a name and a password (the entry, the password,
 *    the directory's refusal, the mapped groups), without a user, a session or a lockout count;
 * (The warnings of the settings are ldap-warnings.ts.)
 * Each runs on a provider of its own, built from the settings given, so the chain's provider (its
 * pause, its remembered server) is neither used nor changed.
 */
import type { Client } from 'ldapts';
import { ldapts } from './ldapts.js';
import { errorMessage, LdapConnector, LdapUnavailableError, type ServerFailure, type UnavailableKind } from './ldap-connection.js';
import type { LdapProvider } from './ldap.js';
import { LoginRefused, type QuietRefusal, type RefusalReason } from './refusal.js';
import { texts } from './ldap-search.js';

/** The answer of a test connection. */
export interface ConnectionTest {
  ok: boolean;
  /** the server that answered */
  url: string | null;
  /** what the rootDSE says: Active Directory (or Samba AD), OpenLDAP, or another / not said */
  server: 'active_directory' | 'openldap' | 'unknown' | null;
  /** the rootDSE's vendorName / vendorVersion, when it gives them */
  vendor: string | null;
  /** why not, for the operator (null when ok) */
  kind: UnavailableKind | 'base_dn' | 'settings' | 'error' | null;
  reason: string | null;
  /** each server tried before (or instead of) the one that answered, and why it could not be used */
  failures: ServerFailure[];
  /** milliseconds the whole test took */
  ms: number;
}

async function describeServer(client: Client): Promise<Pick<ConnectionTest, 'server' | 'vendor'>> {
  const {
    searchEntries: [root],
  } = await client.search('', {
    scope: 'base',
    filter: '(objectClass=*)',
    attributes: ['supportedCapabilities', 'objectClass', 'vendorName', 'vendorVersion'],
  });
  if (!root) return { server: 'unknown', vendor: null };
  const vendor = [...texts(root, 'vendorName'), ...texts(root, 'vendorVersion')].join(' ').trim() || null;
  if (texts(root, 'supportedCapabilities').includes('1.2.840.113556.1.4.800')) return { server: 'active_directory', vendor };
  if (texts(root, 'objectClass').some((c) => c.toLowerCase() === 'openldaprootdse') || /openldap/i.test(vendor ?? '')) return { server: 'openldap', vendor };
  return { server: 'unknown', vendor };
}

/** Test connection on `provider` (built from the settings to test): bind as the service account, describe the server, read the base DN. */
export async function testConnection(provider: LdapProvider): Promise<ConnectionTest> {
  const started = Date.now();
  const done = (t: Omit<ConnectionTest, 'ms'>): ConnectionTest => ({ ...t, ms: Date.now() - started });
  let client: Client;
  let url: string;
  try {
    ({ client, url } = await provider.connector.serviceConnection());
  } catch (err) {
    if (err instanceof LdapUnavailableError)
      return done({ ok: false, url: null, server: null, vendor: null, kind: err.kind, reason: err.message, failures: err.failures });
    return done({ ok: false, url: null, server: null, vendor: null, kind: 'error', reason: errorMessage(err), failures: [] });
  }
  const failures = provider.connector.lastFailures;
  try {
    const described = await describeServer(client).catch(() => ({ server: 'unknown' as const, vendor: null }));
    const { baseDN } = provider.options;
    try {
      await client.search(baseDN, { scope: 'base', filter: '(objectClass=*)', attributes: ['1.1'] });
    } catch (err) {
      const reason =
        err instanceof ldapts().NoSuchObjectError
          ? `the base DN ${baseDN} does not exist on ${url} (check SERVICE_LDAP_BASE_DN)`
          : `searching the base DN ${baseDN} on ${url} failed: ${errorMessage(err)}`;
      return done({ ok: false, url, ...described, kind: 'base_dn', reason, failures });
    }
    return done({ ok: true, url, ...described, kind: null, reason: null, failures });
  } finally {
    await LdapConnector.close(client);
  }
}

/** The answer of a test login. */
export interface LoginTest {
  /** the directory would let this name and password sign in through LDAP */
  would_sign_in: boolean;
  outcome: 'signed_in' | 'invalid_credentials' | RefusalReason | QuietRefusal;
  /** the local user name a sign-in would use, the entry's DN, the server asked */
  username: string | null;
  dn: string | null;
  url: string | null;
  /** local groups the mapping gives (null: no mapping configured, groups are not managed) */
  groups: string[] | null;
  /** every directory group found for the entry, mapped or not (null: no mapping, not read) */
  directory_groups: string[] | null;
  /** why not, for the operator, when the directory could not be used */
  reason: string | null;
  ms: number;
}

/**
 * Test login on `provider`: the sign-in's directory part only. A wrong password answers
 * invalid_credentials (the directory may count it toward its own lockout, as any bind does).
 */
export async function testLogin(provider: LdapProvider, username: string, password: string): Promise<LoginTest> {
  const started = Date.now();
  const none = { username: null, dn: null, url: null, groups: null, directory_groups: null, reason: null };
  const done = (t: Omit<LoginTest, 'ms'>): LoginTest => ({ ...t, ms: Date.now() - started });
  const connection = await testConnection(provider);
  if (!connection.ok) return done({ ...none, would_sign_in: false, outcome: 'directory_unavailable', url: connection.url, reason: connection.reason });
  try {
    const found = await provider.lookUp(username.trim(), password);
    if (!found) return done({ ...none, would_sign_in: false, outcome: 'invalid_credentials', url: connection.url });
    return done({
      would_sign_in: true,
      outcome: 'signed_in',
      username: found.profile.username,
      dn: found.dn,
      url: found.url,
      groups: found.profile.groups ?? null,
      directory_groups: found.directoryGroups,
      reason: null,
    });
  } catch (err) {
    if (err instanceof LoginRefused) {
      const reason = err.reason === 'directory_unavailable' ? 'the directory stopped answering during the test (the log says why)' : null;
      return done({ ...none, would_sign_in: false, outcome: err.reason, url: connection.url, reason });
    }
    return done({ ...none, would_sign_in: false, outcome: 'directory_unavailable', url: connection.url, reason: errorMessage(err) });
  }
}
