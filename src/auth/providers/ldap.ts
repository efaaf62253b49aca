/**
 * LDAP / Active Directory credentials provider of the login chain (docs/auth.md).
 *
 * Flow per login: connect (ldaps://, or ldap:// upgraded with StartTLS when `startTls` says so;
 * the certificate is checked against `caCert` or the system's CAs, host name included) ->
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
 *    whatever the password) is logged and stays a plain "wrong password".
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
 * Timeouts: `connectTimeoutMs` per connection, `timeoutMs` per operation. After a timeout the
 * provider refuses at once for `backoffMs` (the chain moves on to the next provider without
 * waiting), then tries the directory again.
 *
 * Accounts of people who signed in are checked again with `checkAccounts` (the directory
 * recheck, src/auth/directory-recheck.ts).
 */
import net from 'node:net';
import type { ConnectionOptions } from 'node:tls';
import Joi from 'joi';
import { AndFilter, Client, EqualityFilter, FilterParser, InvalidCredentialsError, NoSuchObjectError, OrFilter, type Entry, type Filter } from 'ldapts';
import type { Logger } from '../../log.js';
import { LoginRefused, type RefusalReason } from './refusal.js';
import { decodeObjectSid, encodeObjectSid, sidWithRid } from './sid.js';
import type { CredentialsProvider, ExternalProfile } from './types.js';

export interface LdapProviderOptions {
  /** ldap://host:port or ldaps://host:port */
  url: string;
  /** service account used to search; empty or absent = anonymous search */
  bindDN?: string | null;
  bindPassword?: string | null;
  baseDN: string;
  /** search filter; `{username}` is replaced by the escaped login name. Default `(uid={username})` */
  userFilter?: string;
  /** attribute listing the user's group DNs. Default `memberOf` */
  groupAttr?: string;
  /** attribute holding the local username of a new user. Default `uid` (AD: sAMAccountName when absent) */
  usernameAttr?: string;
  /** directory group DN -> local group names */
  groupMapping?: Record<string, string[]>;
  /** follow nested groups with AD's in-chain rule: `auto` (default) on Active Directory only */
  nestedGroups?: 'auto' | boolean;
  /** verify the server certificate (ldaps:// and StartTLS). Default true */
  tlsVerify?: boolean;
  /** PEM certificates of the CAs to trust instead of the system's (LDAPS and StartTLS) */
  caCert?: string | null;
  /** upgrade an ldap:// connection with StartTLS before anything is sent. Default false */
  startTls?: boolean;
  /** TCP (and TLS) connect timeout. Default 5000 */
  connectTimeoutMs?: number;
  /** timeout of each LDAP operation (StartTLS, bind, search). Default 10000 */
  timeoutMs?: number;
  /** after a timeout, how long the provider refuses at once instead of waiting again. Default 30000 */
  backoffMs?: number;
  /** shown on the login page. Default `LDAP` */
  label?: string;
}

type ResolvedOptions = Required<Omit<LdapProviderOptions, 'bindDN' | 'bindPassword' | 'caCert'>> & { bindDN: string | null; bindPassword: string | null; caCert: string | null };

const ATTRIBUTE_NAME = /^[A-Za-z][A-Za-z0-9-]*$/;
/** LDAP_CAP_ACTIVE_DIRECTORY_OID in the rootDSE's supportedCapabilities */
const AD_CAPABILITY = '1.2.840.113556.1.4.800';
/** LDAP_MATCHING_RULE_IN_CHAIN: membership through any chain of groups */
const IN_CHAIN = '1.2.840.113556.1.4.1941';
/** userAccountControl ACCOUNTDISABLE */
const UF_ACCOUNTDISABLE = 0x2;
/** accountExpires: 0 and 2^63-1 mean never */
const NEVER = 0x7fffffffffffffffn;
/** accounts per search when checking them again */
const CHECK_BATCH = 100;

/** joi schema of the provider settings (also usable by the settings API). */
export const ldapOptionsSchema = Joi.object({
  url: Joi.string().trim().uri({ scheme: ['ldap', 'ldaps'] }).required(),
  bindDN: Joi.string().trim().allow('', null).default(null),
  // A bind DN with an empty password is an unauthenticated bind that servers let "succeed".
  bindPassword: Joi.when('bindDN', {
    is: Joi.string().min(1).required(),
    then: Joi.string().min(1).required().messages({ 'any.required': '"bindPassword" is required when "bindDN" is set', 'string.empty': '"bindPassword" is required when "bindDN" is set' }),
    otherwise: Joi.string().allow('', null).default(null),
  }),
  baseDN: Joi.string().trim().min(1).required(),
  userFilter: Joi.string()
    .trim()
    .pattern(/^\(.*\{username\}.*\)$/s)
    .default('(uid={username})')
    .messages({ 'string.pattern.base': '"userFilter" must be a parenthesised LDAP filter containing {username}' }),
  groupAttr: Joi.string().pattern(ATTRIBUTE_NAME).default('memberOf'),
  usernameAttr: Joi.string().pattern(ATTRIBUTE_NAME).default('uid'),
  groupMapping: Joi.object()
    .pattern(Joi.string().min(1), Joi.array().items(Joi.string().trim().min(1)).single())
    .default({}),
  nestedGroups: Joi.alternatives(Joi.string().valid('auto'), Joi.boolean()).default('auto'),
  tlsVerify: Joi.boolean().default(true),
  caCert: Joi.string().pattern(/-----BEGIN CERTIFICATE-----/).allow('', null).default(null).messages({ 'string.pattern.base': '"caCert" must hold PEM certificates' }),
  startTls: Joi.boolean().default(false),
  connectTimeoutMs: Joi.number().integer().min(100).max(120_000).default(5000),
  timeoutMs: Joi.number().integer().min(100).max(300_000).default(10_000),
  backoffMs: Joi.number().integer().min(0).max(3_600_000).default(30_000),
  label: Joi.string().trim().min(1).max(100).default('LDAP'),
});

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
function isWithin(dn: string, base: string): boolean {
  const d = normalizeDN(dn);
  const b = normalizeDN(base);
  return d === b || d.endsWith(`,${b}`);
}

/** What Active Directory's "data" code in a refused bind means (MS-ADTS; `80090308: … data 533, v…`). */
export interface AdBindFailure {
  /** the hex code as AD writes it (52e, 533, …) */
  code: string;
  /** what the person may be told (the directory said it only because the password was right), or null */
  refusal: RefusalReason | null;
  /** for the log */
  meaning: string;
}

const AD_BIND_CODES: Record<string, { refusal: RefusalReason | null; meaning: string }> = {
  '525': { refusal: null, meaning: 'no such user' },
  '52e': { refusal: null, meaning: 'wrong password' },
  '530': { refusal: 'logon_restricted', meaning: 'not permitted to sign in at this time' },
  '531': { refusal: 'logon_restricted', meaning: 'not permitted to sign in from this workstation' },
  '532': { refusal: 'password_expired', meaning: 'password expired' },
  '533': { refusal: 'account_disabled', meaning: 'account disabled' },
  '568': { refusal: null, meaning: 'too many security ids (groups) for a logon' },
  '701': { refusal: 'account_expired', meaning: 'account expired' },
  '773': { refusal: 'password_must_change', meaning: 'password must be changed' },
  // said whatever password was typed: telling would reveal that the name exists
  '775': { refusal: null, meaning: 'account locked' },
};

/** Reads AD's reason out of a refused bind's diagnostic message; null when it holds none. */
export function adBindFailure(message: string): AdBindFailure | null {
  const m = /AcceptSecurityContext error, data ([0-9a-f]{1,8})\b/i.exec(message) ?? /\bdata ([0-9a-f]{3})\b/i.exec(message);
  if (!m) return null;
  const code = m[1]!.toLowerCase();
  const known = AD_BIND_CODES[code];
  return { code, refusal: known?.refusal ?? null, meaning: known?.meaning ?? `unknown reason ${code}` };
}

/** Attribute values of an entry, looked up case-insensitively (servers echo names in their own case). */
function values(entry: Entry, attribute: string): Array<string | Buffer> {
  const wanted = attribute.toLowerCase();
  for (const [key, value] of Object.entries(entry)) {
    if (key === 'dn' || key.toLowerCase() !== wanted) continue;
    return Array.isArray(value) ? value : [value];
  }
  return [];
}

function texts(entry: Entry, attribute: string): string[] {
  return values(entry, attribute).map((v) => (Buffer.isBuffer(v) ? v.toString('utf8') : v));
}

function firstText(entry: Entry, attribute: string): string | null {
  const [value] = values(entry, attribute);
  if (value === undefined) return null;
  const text = (Buffer.isBuffer(value) ? value.toString('utf8') : value).trim();
  return text === '' ? null : text;
}

function errorMessage(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as NodeJS.ErrnoException).code;
  return typeof code === 'string' && !err.message.includes(code) ? `${err.message} (${code})` : err.message;
}

/** A connection or an operation that did not answer in time. */
export class LdapTimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LdapTimeoutError';
  }
}

/** The provider is backing off after a timeout: it did not try the directory. */
export class LdapUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LdapUnavailableError';
  }
}

/** ldapts says "Connection timeout" and "<Request>: Operation timed out". */
function isTimeout(err: unknown): boolean {
  return err instanceof LdapTimeoutError || (err instanceof Error && /connection timeout|operation timed out/i.test(err.message));
}

async function deadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new LdapTimeoutError(`${what} timed out after ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** What the rootDSE says about the directory (read once per provider). */
interface DirectoryInfo {
  /** Active Directory (or Samba AD) */
  ad: boolean;
  /** the naming context holding the base DN (AD: the domain), else the base DN */
  domainDN: string;
  /** AD: the domain's NetBIOS name (CORP), for `CORP\alice` */
  netbios: string | null;
}

/** Where a directory account stands, as the recheck sees it. */
export type AccountState = 'active' | 'disabled' | 'expired' | 'gone';

export class LdapProvider implements CredentialsProvider {
  readonly id = 'ldap';
  readonly kind = 'credentials' as const;
  readonly label: string;
  private readonly options: ResolvedOptions;
  private readonly log: Logger;
  /** normalised group DN -> local group names */
  private readonly mapping = new Map<string, string[]>();
  private readonly host: string;
  private readonly secure: boolean;
  private info: DirectoryInfo | null = null;
  /** after a timeout: until when the provider refuses at once, and why */
  private backoff = { until: 0, reason: '' };

  constructor(options: LdapProviderOptions, log: Logger) {
    const { value, error } = ldapOptionsSchema.validate(options, { abortEarly: false, convert: true });
    if (error) throw new Error(`invalid LDAP provider settings: ${error.details.map((d) => d.message).join('; ')}`);
    this.options = value as ResolvedOptions;
    this.log = log.child({ provider: this.id });
    this.label = this.options.label;
    for (const [dn, groups] of Object.entries(this.options.groupMapping)) {
      const key = normalizeDN(dn);
      this.mapping.set(key, [...(this.mapping.get(key) ?? []), ...groups]);
    }
    const url = new URL(this.options.url);
    this.host = url.hostname.replace(/^\[|\]$/g, '') || 'localhost';
    this.secure = url.protocol === 'ldaps:';
  }

  /** The TLS options of LDAPS and StartTLS: the host name is checked against the certificate. */
  private tls(): ConnectionOptions {
    return {
      host: this.host,
      ...(net.isIP(this.host) ? {} : { servername: this.host }),
      rejectUnauthorized: this.options.tlsVerify,
      minVersion: 'TLSv1.2',
      ...(this.options.caCert ? { ca: this.options.caCert } : {}),
    };
  }

  /** A connection ready for a bind: TLS from the start (ldaps://) or upgraded with StartTLS. */
  private async connect(): Promise<Client> {
    const client = new Client({
      url: this.options.url,
      timeout: this.options.timeoutMs,
      connectTimeout: this.options.connectTimeoutMs,
      // ldapts switches to TLS whenever tlsOptions is set, so only pass it for ldaps://.
      ...(this.secure ? { tlsOptions: this.tls() } : {}),
    });
    if (!this.secure && this.options.startTls) {
      try {
        // the TLS handshake itself has no timer of ldapts': bound it here
        await deadline(client.startTLS(this.tls()), this.options.connectTimeoutMs + this.options.timeoutMs, `LDAP StartTLS with ${this.host}`);
      } catch (err) {
        await LdapProvider.close(client);
        if (isTimeout(err)) throw err;
        throw new Error(`LDAP StartTLS with ${this.host} failed: ${errorMessage(err)}`);
      }
    }
    return client;
  }

  private static async close(client: Client): Promise<void> {
    try {
      await client.unbind();
    } catch {
      // the connection is gone either way
    }
  }

  /** Refuses at once while backing off after a timeout. */
  private assertAvailable(): void {
    const left = this.backoff.until - Date.now();
    if (left > 0) throw new LdapUnavailableError(`LDAP skipped for another ${Math.ceil(left / 1000)} s: ${this.backoff.reason}`);
  }

  /** A timeout starts the backoff; the error goes on unchanged. */
  private noteFailure(err: unknown): void {
    if (!isTimeout(err) || this.options.backoffMs === 0) return;
    const reason = errorMessage(err);
    this.backoff = { until: Date.now() + this.options.backoffMs, reason };
    this.log.warn({ reason, backoff_ms: this.options.backoffMs }, 'ldap: the directory did not answer in time; skipping it for a while');
  }

  /** A connection bound as the service account (or anonymous). */
  private async serviceConnection(): Promise<Client> {
    const client = await this.connect();
    if (this.options.bindDN) {
      try {
        await client.bind(this.options.bindDN, this.options.bindPassword ?? '');
      } catch (err) {
        await LdapProvider.close(client);
        if (isTimeout(err)) throw err;
        throw new Error(`LDAP service bind as ${this.options.bindDN} failed: ${errorMessage(err)}`);
      }
    }
    return client;
  }

  async authenticate(username: string, password: string): Promise<ExternalProfile | null> {
    // An empty password would make the user bind an unauthenticated bind, which "succeeds".
    if (typeof username !== 'string' || typeof password !== 'string') return null;
    const typed = username.trim();
    if (typed === '' || typed.length > 256 || password === '') return null;
    this.assertAvailable();

    let service: Client | null = null;
    try {
      service = await this.serviceConnection();
      const info = await this.directoryInfo(service);
      const login = this.loginName(typed, info);
      const entry = await this.findUser(service, login);
      if (!entry) return null;

      if (!(await this.verifyPassword(entry.dn, password, typed))) return null;

      // Groups are read on the service connection (anonymous when no bind DN is configured).
      const groups = this.mapping.size > 0 ? await this.mappedGroups(service, entry, info) : undefined;
      return {
        provider: this.id,
        provider_user_id: this.stableId(entry),
        username: firstText(entry, this.options.usernameAttr) ?? (info.ad ? firstText(entry, 'sAMAccountName') : null) ?? login,
        email: firstText(entry, 'mail'),
        email_verified: firstText(entry, 'mail') !== null,
        display_name: firstText(entry, 'displayName') ?? firstText(entry, 'cn'),
        groups,
      };
    } catch (err) {
      this.noteFailure(err);
      throw err;
    } finally {
      if (service) await LdapProvider.close(service);
    }
  }

  /** `CORP\alice` -> `alice` when CORP is this domain's NetBIOS name; anything else as typed. */
  private loginName(typed: string, info: DirectoryInfo): string {
    const m = /^([^\\]{1,15})\\([^\\]+)$/.exec(typed);
    if (m && info.netbios && m[1]!.toUpperCase() === info.netbios.toUpperCase()) return m[2]!;
    return typed;
  }

  /**
   * The rootDSE (and on AD the domain's NetBIOS name), once per provider. A directory that will
   * not say is treated as not AD, and asked again next time.
   */
  private async directoryInfo(client: Client): Promise<DirectoryInfo> {
    if (this.info) return this.info;
    let root: Entry | undefined;
    try {
      ({
        searchEntries: [root],
      } = await client.search('', { scope: 'base', filter: '(objectClass=*)', attributes: ['supportedCapabilities', 'namingContexts', 'defaultNamingContext', 'configurationNamingContext'] }));
    } catch (err) {
      if (isTimeout(err)) throw err;
      this.log.debug({ reason: errorMessage(err) }, 'ldap: the rootDSE could not be read; treating the directory as plain LDAP');
      return { ad: false, domainDN: this.options.baseDN, netbios: null };
    }
    if (!root) return { ad: false, domainDN: this.options.baseDN, netbios: null };
    const ad = texts(root, 'supportedCapabilities').includes(AD_CAPABILITY);
    // the longest naming context holding the base DN: the domain it lies in
    const contexts = texts(root, 'namingContexts').filter((nc) => isWithin(this.options.baseDN, nc));
    const domainDN = contexts.sort((a, b) => b.length - a.length)[0] ?? this.options.baseDN;
    let netbios: string | null = null;
    const configuration = firstText(root, 'configurationNamingContext');
    if (ad && configuration) {
      try {
        const { searchEntries } = await client.search(`CN=Partitions,${configuration}`, {
          scope: 'one',
          filter: new AndFilter({ filters: [new EqualityFilter({ attribute: 'objectClass', value: 'crossRef' }), new EqualityFilter({ attribute: 'nCName', value: domainDN })] }),
          attributes: ['nETBIOSName'],
        });
        netbios = searchEntries[0] ? firstText(searchEntries[0], 'nETBIOSName') : null;
      } catch (err) {
        if (isTimeout(err)) throw err;
        this.log.debug({ reason: errorMessage(err) }, 'ldap: the domain\'s NetBIOS name could not be read; DOMAIN\\name logins are looked up as typed');
      }
    }
    this.info = { ad, domainDN, netbios };
    this.log.debug({ ad, domain_dn: domainDN, netbios }, 'ldap: directory described');
    return this.info;
  }

  private async findUser(client: Client, login: string): Promise<Entry | null> {
    const filter = this.options.userFilter.replaceAll('{username}', () => escapeFilterValue(login));
    const { usernameAttr, groupAttr } = this.options;
    let entries: Entry[];
    try {
      ({ searchEntries: entries } = await client.search(this.options.baseDN, {
        scope: 'sub',
        filter,
        // Two is enough to tell "exactly one" from "ambiguous" without fetching a whole directory.
        sizeLimit: 2,
        attributes: ['objectSid', 'mail', 'displayName', 'cn', 'sAMAccountName', 'primaryGroupID', usernameAttr, groupAttr],
        explicitBufferAttributes: ['objectSid'],
      }));
    } catch (err) {
      if (isTimeout(err)) throw err;
      throw new Error(`LDAP user search under ${this.options.baseDN} failed: ${errorMessage(err)}`);
    }
    if (entries.length === 0) {
      this.log.debug({ username: login }, 'ldap: no such user');
      return null;
    }
    if (entries.length > 1) {
      this.log.warn({ username: login, filter: this.options.userFilter }, 'ldap: user filter matched more than one entry; refusing the login');
      return null;
    }
    return entries[0]!;
  }

  /**
   * Binds as the user on a fresh connection: true on success, false on wrong credentials.
   * Throws LoginRefused when the directory proved the password and refused the account.
   */
  private async verifyPassword(dn: string, password: string, typed: string): Promise<boolean> {
    const client = await this.connect();
    try {
      await client.bind(dn, password);
      return true;
    } catch (err) {
      if (!(err instanceof InvalidCredentialsError)) {
        if (isTimeout(err)) throw err;
        throw new Error(`LDAP bind as ${dn} failed: ${errorMessage(err)}`);
      }
      const ad = adBindFailure(err.message);
      if (ad?.refusal) {
        this.log.warn({ event: 'ldap_bind_refused', username: typed, dn, reason: ad.refusal, ad_code: ad.code }, `ldap: the directory refused the account: ${ad.meaning}`);
        throw new LoginRefused(this.id, ad.refusal);
      }
      if (ad && ad.code !== '52e' && ad.code !== '525') {
        this.log.warn({ event: 'ldap_bind_refused', username: typed, dn, ad_code: ad.code }, `ldap: the directory refused the bind: ${ad.meaning}`);
      } else {
        this.log.info({ username: typed }, 'ldap: wrong password');
      }
      return false;
    } finally {
      await LdapProvider.close(client);
    }
  }

  /** objectSid (survives renames and moves) when the entry has one, else the DN. */
  private stableId(entry: Entry): string {
    const [sid] = values(entry, 'objectSid');
    if (Buffer.isBuffer(sid) && sid.length > 0) {
      try {
        return decodeObjectSid(sid);
      } catch (err) {
        this.log.warn({ dn: entry.dn, err: errorMessage(err) }, 'ldap: unreadable objectSid; using the DN');
      }
    } else if (typeof sid === 'string' && /^S-1-\d+(-\d+)*$/.test(sid)) {
      return sid; // some servers hand the SID out in string form already
    }
    return entry.dn;
  }

  /** AD: the DN of the entry's primary group (objectSid = the domain's SID + primaryGroupID), or null. */
  private async primaryGroup(client: Client, entry: Entry, info: DirectoryInfo): Promise<string | null> {
    const rid = Number(firstText(entry, 'primaryGroupID'));
    const [sid] = values(entry, 'objectSid');
    if (!Number.isInteger(rid) || rid <= 0 || !Buffer.isBuffer(sid)) return null;
    let groupSid: Buffer;
    try {
      groupSid = sidWithRid(sid, rid);
    } catch {
      return null;
    }
    const { searchEntries } = await client.search(info.domainDN, { scope: 'sub', filter: new EqualityFilter({ attribute: 'objectSid', value: groupSid }), attributes: ['1.1'], sizeLimit: 1 });
    return searchEntries[0]?.dn ?? null;
  }

  private useNested(info: DirectoryInfo): boolean {
    return this.options.nestedGroups === 'auto' ? info.ad : this.options.nestedGroups;
  }

  private async groupDNs(client: Client, entry: Entry, info: DirectoryInfo): Promise<string[]> {
    const direct = texts(entry, this.options.groupAttr);
    try {
      const primary = await this.primaryGroup(client, entry, info);
      const found = new Set([...direct, ...(primary ? [primary] : [])]);
      if (this.useNested(info)) {
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
      const { searchEntries } = await client.search(this.options.baseDN, {
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

  private async mappedGroups(client: Client, entry: Entry, info: DirectoryInfo): Promise<string[]> {
    const local = new Set<string>();
    for (const dn of await this.groupDNs(client, entry, info)) {
      for (const name of this.mapping.get(normalizeDN(dn)) ?? []) local.add(name);
    }
    return [...local];
  }

  /** The user filter for any login name: `{username}` becomes a wildcard ("some login finds this entry"). */
  private anyUserFilter(): Filter {
    return FilterParser.parseString(this.options.userFilter.replaceAll('{username}', '*'));
  }

  /**
   * Where the accounts behind these provider user ids (objectSid or DN, as logins recorded
   * them) stand now: `gone` when no login could find the entry any more (deleted, moved out of
   * the base DN, no longer matching the user filter), `disabled` (userAccountControl), `expired`
   * (accountExpires), else `active`. A locked account or an expired password is `active`: it
   * ends nothing (anyone can lock an account by guessing, and an expired password is changed,
   * not revoked). Throws when the directory cannot be asked (nothing may be concluded then).
   */
  async checkAccounts(ids: string[], now = Date.now()): Promise<Map<string, AccountState>> {
    this.assertAvailable();
    const states = new Map<string, AccountState>();
    if (ids.length === 0) return states;
    let client: Client | null = null;
    try {
      client = await this.serviceConnection();
      const anyUser = this.anyUserFilter();
      const sids = ids.filter((id) => /^S-1-/.test(id));
      const dns = ids.filter((id) => !/^S-1-/.test(id));
      for (let i = 0; i < sids.length; i += CHECK_BATCH) {
        const batch = sids.slice(i, i + CHECK_BATCH);
        const { searchEntries } = await client.search(this.options.baseDN, {
          scope: 'sub',
          filter: new AndFilter({ filters: [anyUser, new OrFilter({ filters: batch.map((sid) => new EqualityFilter({ attribute: 'objectSid', value: encodeObjectSid(sid) })) })] }),
          attributes: ['objectSid', 'userAccountControl', 'accountExpires'],
          explicitBufferAttributes: ['objectSid'],
          paged: { pageSize: CHECK_BATCH },
        });
        const byId = new Map<string, Entry>();
        for (const e of searchEntries) byId.set(this.stableId(e), e);
        for (const sid of batch) states.set(sid, byId.has(sid) ? accountState(byId.get(sid)!, now) : 'gone');
      }
      for (const dn of dns) {
        if (!isWithin(dn, this.options.baseDN)) {
          states.set(dn, 'gone');
          continue;
        }
        try {
          const { searchEntries } = await client.search(dn, { scope: 'base', filter: anyUser, attributes: ['userAccountControl', 'accountExpires'] });
          states.set(dn, searchEntries[0] ? accountState(searchEntries[0], now) : 'gone');
        } catch (err) {
          if (err instanceof NoSuchObjectError) states.set(dn, 'gone');
          else throw err;
        }
      }
      return states;
    } catch (err) {
      this.noteFailure(err);
      if (isTimeout(err) || err instanceof LdapUnavailableError) throw err;
      throw new Error(`LDAP account check under ${this.options.baseDN} failed: ${errorMessage(err)}`);
    } finally {
      if (client) await LdapProvider.close(client);
    }
  }
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
