/**
 * LDAP / Active Directory credentials provider of the login chain (docs/auth.md).
 *
 * Flow per login: connect to the first server of the URL list that answers (ldaps://, or ldap://
 * upgraded with StartTLS when `startTls` says so; the certificate is checked against `caCert` or
 * the system's CAs, host name included; a server that does not answer or fails TLS: the next
 * one; the one that answered is tried first for `rememberMs`) ->
 * service bind (when a bind DN is configured, otherwise anonymous) -> subtree search under
 * baseDN with the user filter, `{username}` replaced by the RFC 4515-escaped input -> exactly
 * one entry -> bind as that entry's DN with the user's password on a second connection -> read
 * groups with the service connection -> profile. Every connection is unbound in `finally`.
 *
 * Active Directory (the rootDSE names LDAP_CAP_ACTIVE_DIRECTORY_OID; read once per provider):
 *  - `CORP\alice` is looked up as `alice` when CORP is the domain's NetBIOS name; `alice@corp.example`
 *    is found by a filter that also matches userPrincipalName (docs/auth.md, "Active Directory");
 *  - the local username falls back to sAMAccountName when the entry lacks `usernameAttr`;
 *  - a refused bind says why (`data 533` disabled, `701` expired, `532` password expired, `773`
 *    must change, `530`/`531` logon hours or workstation, `775` locked). What AD says only
 *    for the right password becomes a LoginRefused the person is shown; a locked account (said
 *    whatever the password) is a quiet LoginRefused: logged and recorded as `account_locked`,
 *    while the person gets the plain "wrong password".
 *
 * Groups: the entry's `groupAttr` values (memberOf on Active Directory, or OpenLDAP with the
 * memberof overlay), plus on AD the primary group (primaryGroupID: the group whose objectSid is
 * the domain's SID and that RID, Domain Users for most, never listed in memberOf). With nested
 * groups (`nestedGroups` true, or `auto` on AD) every group that holds the user or the primary
 * group through any chain of groups is found with AD's in-chain matching rule
 * (LDAP_MATCHING_RULE_IN_CHAIN, 1.2.840.113556.1.4.1941) in the naming context that holds the
 * base DN. Without memberOf values on a directory that is not AD (plain OpenLDAP),
 * groupOfNames / groupOfUniqueNames entries under baseDN whose member / uniqueMember is the
 * user's DN are used instead (direct memberships only). Group DNs are mapped to local group
 * names through `groupMapping`, compared case-insensitively with whitespace around `,` `=` `+`
 * ignored; unmapped directory groups are dropped. With no mapping configured the provider does
 * not manage groups (`groups` stays undefined) and skips the lookup.
 *
 * Timeouts: `connectTimeoutMs` per connection, `timeoutMs` per operation. When no server answered
 * (a timeout, a refused connection, a TLS failure on every one) the provider refuses at once for
 * `backoffMs` (the chain moves on to the next provider without waiting); after it, one login
 * probes the directory and the logins that come meanwhile wait for that probe's answer (the
 * service connection), not a timeout each. The person is told "the directory is unavailable"
 * (LoginRefused `directory_unavailable`), never "wrong password"; the log says precisely why.
 *
 * Accounts of people who signed in are read again with `readAccounts` (the directory recheck,
 * src/auth/directory-recheck.ts): where each stands, and what a sign-in would read of it now.
 *
 * Beside this file: ldap-options.ts (the settings and their schema), ldap-connection.ts (TLS,
 * binds, timeouts, why a server could not be used, AD's bind codes), ldap-diagnose.ts (test
 * connection, test login, the settings' warnings), ldap-search.ts (filters, DNs, the rootDSE, the user lookup),
 * ldap-groups.ts (group resolution and mapping), ldap-accounts.ts (accounts read again).
 */
import type { Client } from 'ldapts';
import { ldapts } from './ldapts.js';
import type { Logger } from '../../log.js';
import { profileOf, readAccounts, type AccountState, type DirectoryAccount } from './ldap-accounts.js';
import { adBindFailure, connectionFailure, errorMessage, isTimeout, LdapConnector, LdapUnavailableError, type Opened } from './ldap-connection.js';
import { logLdapWarningsOnce } from './ldap-warnings.js';
import { mappedGroups } from './ldap-groups.js';
import { resolveOptions, type LdapProviderOptions, type ResolvedOptions } from './ldap-options.js';
import { findUser, loginName, normalizeDN, readDirectoryInfo, type DirectoryInfo } from './ldap-search.js';
import { LoginRefused } from './refusal.js';
import type { CredentialsProvider, ExternalProfile } from './types.js';

// the provider's helpers, where its importers have always found them
export { adBindFailure, LdapTimeoutError, LdapUnavailableError, type AdBindFailure, type ServerFailure } from './ldap-connection.js';
export { ldapOptionsSchema, type LdapProviderOptions } from './ldap-options.js';
export { escapeFilterValue, normalizeDN } from './ldap-search.js';
export type { AccountState, DirectoryAccount } from './ldap-accounts.js';

export class LdapProvider implements CredentialsProvider {
  readonly id = 'ldap';
  readonly kind = 'credentials' as const;
  readonly label: string;
  readonly options: ResolvedOptions;
  private readonly log: Logger;
  /** normalised group DN -> local group names */
  private readonly mapping = new Map<string, string[]>();
  readonly connector: LdapConnector;
  private info: DirectoryInfo | null = null;
  /** after the directory failed: until when the provider refuses at once, and why (until 0: it answered last time) */
  private backoff = { until: 0, reason: '' };
  /** after the pause: the one login asking the directory; the others wait for its answer (true: it answered) */
  private probe: Promise<boolean> | null = null;

  /**
   * `diagnostic`: built for a test of the Authentication page or to check settings before they are
   * saved, not for the chain (its settings' warnings are not logged; the chain's are, once per chain's logger)
   */
  constructor(options: LdapProviderOptions, log: Logger, opts: { diagnostic?: boolean } = {}) {
    this.options = resolveOptions(options);
    this.log = log.child({ provider: this.id });
    if (!opts.diagnostic) logLdapWarningsOnce(this.options, log, this.log);
    this.label = this.options.label;
    for (const [dn, groups] of Object.entries(this.options.groupMapping)) {
      const key = normalizeDN(dn);
      this.mapping.set(key, [...(this.mapping.get(key) ?? []), ...groups]);
    }
    this.connector = new LdapConnector(this.options);
  }

  /**
   * Waits until this caller may ask the directory. Throws LdapUnavailableError while pausing.
   * After the pause the first caller is the probe: it gets `settle`, to call with whether the
   * directory answered; the others wait for that answer (and pause again, or go on).
   */
  private async admit(): Promise<((answered: boolean) => void) | null> {
    for (;;) {
      const left = this.backoff.until - Date.now();
      if (left > 0) throw new LdapUnavailableError(`LDAP skipped for another ${Math.ceil(left / 1000)} s: ${this.backoff.reason}`, 'paused');
      if (this.backoff.until === 0) return null;
      if (this.probe) {
        await this.probe;
        continue;
      }
      let settle!: (answered: boolean) => void;
      this.probe = new Promise<boolean>((resolve) => (settle = resolve));
      this.log.info({ event: 'ldap_probe' }, 'ldap: the pause is over; one login asks the directory, the others wait for its answer');
      return (answered) => {
        this.probe = null;
        if (answered) {
          this.backoff = { until: 0, reason: '' };
          this.log.info({ event: 'ldap_back' }, 'ldap: the directory answers again');
        }
        settle(answered);
      };
    }
  }

  /** A service connection (the first server that answers), through admit(): a failure starts the pause. */
  private async open(): Promise<Opened> {
    const settle = await this.admit();
    try {
      const opened = await this.connector.serviceConnection();
      settle?.(true);
      const skipped = this.connector.lastFailures;
      if (skipped.length) {
        this.log.warn(
          { event: 'ldap_server_skipped', url: opened.url, failures: skipped },
          `ldap: ${skipped.length} server(s) could not be used; ${opened.url} answered`,
        );
      }
      return opened;
    } catch (err) {
      this.noteFailure(err);
      settle?.(false);
      throw err;
    }
  }

  /** No server answered (or one stopped answering in time): the pause starts; the error goes on unchanged. */
  private noteFailure(err: unknown): void {
    const down = err instanceof LdapUnavailableError ? err.kind !== 'service_bind' && err.kind !== 'paused' : isTimeout(err);
    if (!down || this.options.backoffMs === 0) return;
    const reason = errorMessage(err);
    this.backoff = { until: Date.now() + this.options.backoffMs, reason };
    this.log.warn({ reason, retry_after_ms: this.options.backoffMs }, 'ldap: the directory could not be used; skipping it for a while');
  }

  /**
   * What the person is told when the directory could not be used: "the directory is unavailable"
   * (LoginRefused directory_unavailable), never a wrong password; the log says precisely why.
   * Anything else goes on unchanged.
   */
  private unavailable(err: unknown): unknown {
    if (err instanceof LoginRefused) return err;
    const failure = err instanceof LdapUnavailableError ? { kind: err.kind, reason: err.message } : connectionFailure(err);
    if (!failure) return err;
    if (failure.kind !== 'paused')
      this.log.warn({ event: 'ldap_unavailable', kind: failure.kind, reason: failure.reason }, 'ldap: the directory is unavailable');
    return new LoginRefused(this.id, 'directory_unavailable');
  }

  async authenticate(username: string, password: string): Promise<ExternalProfile | null> {
    // An empty password would make the user bind an unauthenticated bind, which "succeeds".
    if (typeof username !== 'string' || typeof password !== 'string') return null;
    const typed = username.trim();
    if (typed === '' || typed.length > 256 || password === '') return null;
    const found = await this.lookUp(typed, password);
    return found && found.profile;
  }

  /**
   * The sign-in without its end: the entry found, the password checked, the groups read and
   * mapped (`directoryGroups`: every group DN found, mapped or not, when the mapping is used).
   * null for an unknown user or a wrong password; throws LoginRefused as authenticate() does.
   */
  async lookUp(typed: string, password: string): Promise<{ profile: ExternalProfile; dn: string; url: string; directoryGroups: string[] | null } | null> {
    // an empty password would be an unauthenticated bind, which "succeeds"
    if (typed === '' || password === '') return null;
    let service: Client | null = null;
    try {
      const opened = await this.open().catch((err: unknown) => {
        throw this.unavailable(err);
      });
      service = opened.client;
      const info = await this.directoryInfo(service);
      const login = loginName(typed, info);
      const entry = await findUser(service, login, this.options, this.log);
      if (!entry) return null;

      if (!(await this.verifyPassword(opened.url, entry.dn, password, typed))) return null;

      // Groups are read on the service connection (anonymous when no bind DN is configured).
      const seen: string[] = [];
      const groups = this.mapping.size > 0 ? await mappedGroups(service, entry, info, this.options, this.mapping, seen) : undefined;
      return {
        profile: { ...profileOf(entry, this.options, info, this.log, login), groups },
        dn: entry.dn,
        url: opened.url,
        directoryGroups: groups ? seen : null,
      };
    } catch (err) {
      this.noteFailure(err);
      throw this.unavailable(err);
    } finally {
      if (service) await LdapConnector.close(service);
    }
  }

  /**
   * What the rootDSE says (ldap-search.ts), once per provider. A directory that will not say is
   * treated as not AD, and asked again next time.
   */
  private async directoryInfo(client: Client): Promise<DirectoryInfo> {
    if (this.info) return this.info;
    const info = await readDirectoryInfo(client, this.options, this.log);
    if (!info) return { ad: false, domainDN: this.options.baseDN, netbios: null };
    this.info = info;
    return this.info;
  }

  /**
   * Binds as the user on a fresh connection: true on success, false on wrong credentials.
   * Throws LoginRefused when the directory proved the password and refused the account, or
   * (quiet, not told) when it says the account is locked whatever the password.
   */
  private async verifyPassword(url: string, dn: string, password: string, typed: string): Promise<boolean> {
    const client = await this.connector.connect(url);
    try {
      await client.bind(dn, password);
      return true;
    } catch (err) {
      if (!(err instanceof ldapts().InvalidCredentialsError)) {
        if (connectionFailure(err)) throw err;
        throw new Error(`LDAP bind as ${dn} failed: ${errorMessage(err)}`);
      }
      const ad = adBindFailure(err.message);
      if (ad?.refusal) {
        this.log.warn(
          { event: 'ldap_bind_refused', username: typed, dn, reason: ad.refusal, ad_code: ad.code },
          `ldap: the directory refused the account: ${ad.meaning}`,
        );
        throw new LoginRefused(this.id, ad.refusal);
      }
      if (ad && ad.code !== '52e' && ad.code !== '525') {
        this.log.warn({ event: 'ldap_bind_refused', username: typed, dn, ad_code: ad.code }, `ldap: the directory refused the bind: ${ad.meaning}`);
        // said whatever password was typed: recorded as the reason, never told (LoginRefused.told)
        if (ad.code === '775') throw new LoginRefused(this.id, 'account_locked');
      } else {
        this.log.info({ username: typed }, 'ldap: wrong password');
      }
      return false;
    } finally {
      await LdapConnector.close(client);
    }
  }

  /**
   * Where the accounts behind these provider user ids (objectSid or DN, as logins recorded
   * them) stand now (ldap-accounts.ts): `gone`, `disabled`, `expired`, else `active`. A locked
   * account or an expired password is `active`: it ends nothing (anyone can lock an account by
   * guessing, and an expired password is changed, not revoked). Throws when the directory cannot
   * be asked (nothing may be concluded then).
   */
  async checkAccounts(ids: string[], now = Date.now()): Promise<Map<string, AccountState>> {
    const accounts = await this.readAccounts(ids, now, false);
    return new Map([...accounts].map(([id, a]) => [id, a.state]));
  }

  /**
   * checkAccounts, and for each active account what a sign-in would read of it now (`profiles`):
   * its local name, e-mail, display name and mapped groups, for the recheck to follow.
   */
  async readAccounts(ids: string[], now = Date.now(), profiles = true): Promise<Map<string, DirectoryAccount>> {
    if (ids.length === 0) return new Map();
    let client: Client | null = null;
    try {
      ({ client } = await this.open());
      const info = profiles ? await this.directoryInfo(client) : { ad: false, domainDN: this.options.baseDN, netbios: null };
      return await readAccounts(client, ids, { options: this.options, info, mapping: this.mapping, log: this.log, profiles }, now);
    } catch (err) {
      // a failure to open was noted by open()
      if (!(err instanceof LdapUnavailableError)) this.noteFailure(err);
      if (connectionFailure(err) || err instanceof LdapUnavailableError) throw err;
      throw new Error(`LDAP account check under ${this.options.baseDN} failed: ${errorMessage(err)}`);
    } finally {
      if (client) await LdapConnector.close(client);
    }
  }
}
