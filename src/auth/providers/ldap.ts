/**
 * LDAP / Active Directory credentials provider of the login chain (docs/auth.md).
 *
 * Flow per login: service bind (when a bind DN is configured, otherwise anonymous) -> subtree
 * search under baseDN with the user filter, `{username}` replaced by the RFC 4515-escaped input ->
 * exactly one entry -> bind as that entry's DN with the user's password on a second connection ->
 * read groups with the service connection -> profile. Every connection is unbound in `finally`.
 *
 * Groups: the entry's `groupAttr` values (memberOf on Active Directory, or OpenLDAP with the
 * memberof overlay). When the entry has no such values (plain OpenLDAP has no memberOf at all),
 * groupOfNames / groupOfUniqueNames entries under baseDN whose member / uniqueMember is the
 * user's DN are used instead. Either way only direct memberships are seen (no nesting). Group DNs
 * are mapped to local group names through `groupMapping`, compared case-insensitively with
 * whitespace around `,` `=` `+` ignored; unmapped directory groups are dropped. With no mapping
 * configured the provider does not manage groups (`groups` stays undefined) and skips the lookup.
 */
import Joi from 'joi';
import { Client, InvalidCredentialsError, type Entry } from 'ldapts';
import type { Logger } from '../../log.js';
import { decodeObjectSid } from './sid.js';
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
  /** attribute holding the login name reported in the profile. Default `uid` */
  usernameAttr?: string;
  /** directory group DN -> local group names */
  groupMapping?: Record<string, string[]>;
  /** verify the server certificate for ldaps://. Default true */
  tlsVerify?: boolean;
  /** TCP connect timeout. Default 5000 */
  connectTimeoutMs?: number;
  /** timeout of each LDAP operation (bind, search). Default 10000 */
  timeoutMs?: number;
  /** shown on the login page. Default `LDAP` */
  label?: string;
}

type ResolvedOptions = Required<Omit<LdapProviderOptions, 'bindDN' | 'bindPassword'>> & { bindDN: string | null; bindPassword: string | null };

const ATTRIBUTE_NAME = /^[A-Za-z][A-Za-z0-9-]*$/;

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
  tlsVerify: Joi.boolean().default(true),
  connectTimeoutMs: Joi.number().integer().min(100).max(120_000).default(5000),
  timeoutMs: Joi.number().integer().min(100).max(300_000).default(10_000),
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

/** Attribute values of an entry, looked up case-insensitively (servers echo names in their own case). */
function values(entry: Entry, attribute: string): Array<string | Buffer> {
  const wanted = attribute.toLowerCase();
  for (const [key, value] of Object.entries(entry)) {
    if (key === 'dn' || key.toLowerCase() !== wanted) continue;
    return Array.isArray(value) ? value : [value];
  }
  return [];
}

function firstText(entry: Entry, attribute: string): string | null {
  const [value] = values(entry, attribute);
  if (value === undefined) return null;
  const text = (Buffer.isBuffer(value) ? value.toString('utf8') : value).trim();
  return text === '' ? null : text;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class LdapProvider implements CredentialsProvider {
  readonly id = 'ldap';
  readonly kind = 'credentials' as const;
  readonly label: string;
  private readonly options: ResolvedOptions;
  /** normalised group DN -> local group names */
  private readonly mapping = new Map<string, string[]>();

  constructor(options: LdapProviderOptions, private readonly log: Logger) {
    const { value, error } = ldapOptionsSchema.validate(options, { abortEarly: false, convert: true });
    if (error) throw new Error(`invalid LDAP provider settings: ${error.details.map((d) => d.message).join('; ')}`);
    this.options = value as ResolvedOptions;
    this.label = this.options.label;
    for (const [dn, groups] of Object.entries(this.options.groupMapping)) {
      const key = normalizeDN(dn);
      this.mapping.set(key, [...(this.mapping.get(key) ?? []), ...groups]);
    }
  }

  private newClient(): Client {
    const secure = this.options.url.toLowerCase().startsWith('ldaps:');
    return new Client({
      url: this.options.url,
      timeout: this.options.timeoutMs,
      connectTimeout: this.options.connectTimeoutMs,
      // ldapts switches to TLS whenever tlsOptions is set, so only pass it for ldaps://.
      ...(secure ? { tlsOptions: { rejectUnauthorized: this.options.tlsVerify } } : {}),
    });
  }

  private static async close(client: Client): Promise<void> {
    try {
      await client.unbind();
    } catch {
      // the connection is gone either way
    }
  }

  async authenticate(username: string, password: string): Promise<ExternalProfile | null> {
    // An empty password would make the user bind an unauthenticated bind, which "succeeds".
    if (typeof username !== 'string' || typeof password !== 'string') return null;
    const login = username.trim();
    if (login === '' || login.length > 256 || password === '') return null;

    const service = this.newClient();
    try {
      if (this.options.bindDN) {
        try {
          await service.bind(this.options.bindDN, this.options.bindPassword ?? '');
        } catch (err) {
          throw new Error(`LDAP service bind as ${this.options.bindDN} failed: ${errorMessage(err)}`);
        }
      }

      const entry = await this.findUser(service, login);
      if (!entry) return null;

      if (!(await this.verifyPassword(entry.dn, password))) {
        this.log.info({ provider: this.id, username: login }, 'ldap: wrong password');
        return null;
      }

      // Groups are read on the service connection (anonymous when no bind DN is configured).
      const groups = this.mapping.size > 0 ? await this.mappedGroups(service, entry) : undefined;
      return {
        provider: this.id,
        provider_user_id: this.stableId(entry),
        username: firstText(entry, this.options.usernameAttr) ?? login,
        email: firstText(entry, 'mail'),
        email_verified: firstText(entry, 'mail') !== null,
        display_name: firstText(entry, 'displayName') ?? firstText(entry, 'cn'),
        groups,
      };
    } finally {
      await LdapProvider.close(service);
    }
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
        attributes: ['objectSid', 'mail', 'displayName', 'cn', usernameAttr, groupAttr],
        explicitBufferAttributes: ['objectSid'],
      }));
    } catch (err) {
      throw new Error(`LDAP user search under ${this.options.baseDN} failed: ${errorMessage(err)}`);
    }
    if (entries.length === 0) {
      this.log.debug({ provider: this.id, username: login }, 'ldap: no such user');
      return null;
    }
    if (entries.length > 1) {
      this.log.warn({ provider: this.id, username: login, filter: this.options.userFilter }, 'ldap: user filter matched more than one entry; refusing the login');
      return null;
    }
    return entries[0]!;
  }

  /** Binds as the user on a fresh connection: true on success, false on wrong credentials. */
  private async verifyPassword(dn: string, password: string): Promise<boolean> {
    const client = this.newClient();
    try {
      await client.bind(dn, password);
      return true;
    } catch (err) {
      if (err instanceof InvalidCredentialsError) return false;
      throw new Error(`LDAP bind as ${dn} failed: ${errorMessage(err)}`);
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
        this.log.warn({ provider: this.id, dn: entry.dn, err: errorMessage(err) }, 'ldap: unreadable objectSid; using the DN');
      }
    } else if (typeof sid === 'string' && /^S-1-\d+(-\d+)*$/.test(sid)) {
      return sid; // some servers hand the SID out in string form already
    }
    return entry.dn;
  }

  private async groupDNs(client: Client, entry: Entry): Promise<string[]> {
    const direct = values(entry, this.options.groupAttr).map((v) => (Buffer.isBuffer(v) ? v.toString('utf8') : v));
    if (direct.length > 0) return direct;
    const member = escapeFilterValue(entry.dn);
    try {
      const { searchEntries } = await client.search(this.options.baseDN, {
        scope: 'sub',
        filter: `(|(&(objectClass=groupOfNames)(member=${member}))(&(objectClass=groupOfUniqueNames)(uniqueMember=${member})))`,
        attributes: ['1.1'],
      });
      return searchEntries.map((g) => g.dn);
    } catch (err) {
      // Failing the login beats logging someone in with their groups silently stripped.
      throw new Error(`LDAP group search for ${entry.dn} failed: ${errorMessage(err)}`);
    }
  }

  private async mappedGroups(client: Client, entry: Entry): Promise<string[]> {
    const local = new Set<string>();
    for (const dn of await this.groupDNs(client, entry)) {
      for (const name of this.mapping.get(normalizeDN(dn)) ?? []) local.add(name);
    }
    return [...local];
  }
}
