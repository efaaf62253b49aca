/**
 * The settings of the LDAP provider (ldap.ts): their type, their joi schema and what the schema
 * makes of them.
 */
import Joi from 'joi';
import { ldapUrlList } from '../../settings-kinds.js';

export { badLdapUrls, ldapUrlList } from '../../settings-kinds.js';

export interface LdapProviderOptions {
  /**
   * ldap://host:port or ldaps://host:port; several, separated by spaces, are tried in order (the
   * next one when a server does not answer or refuses TLS, never when credentials are wrong)
   */
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
  /** after the directory failed (no server answered), how long the provider refuses at once; then one login probes. Default 30000 */
  backoffMs?: number;
  /** how long the server that answered is tried first. Default 600000 (10 min) */
  rememberMs?: number;
  /** shown on the login page. Default `LDAP` */
  label?: string;
}

/** The settings after the schema: defaults filled in. */
export type ResolvedOptions = Required<Omit<LdapProviderOptions, 'bindDN' | 'bindPassword' | 'caCert'>> & {
  /** `url` split: the servers in the order they are tried */
  urls: string[];
  bindDN: string | null;
  bindPassword: string | null;
  caCert: string | null;
};

const ATTRIBUTE_NAME = /^[A-Za-z][A-Za-z0-9-]*$/;

/** joi schema of the provider settings (also usable by the settings API). */
export const ldapOptionsSchema = Joi.object({
  url: ldapUrlList.required(),
  bindDN: Joi.string().trim().allow('', null).default(null),
  // A bind DN with an empty password is an unauthenticated bind that servers let "succeed".
  bindPassword: Joi.when('bindDN', {
    is: Joi.string().min(1).required(),
    then: Joi.string()
      .min(1)
      .required()
      .messages({ 'any.required': '"bindPassword" is required when "bindDN" is set', 'string.empty': '"bindPassword" is required when "bindDN" is set' }),
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
  caCert: Joi.string()
    .pattern(/-----BEGIN CERTIFICATE-----/)
    .allow('', null)
    .default(null)
    .messages({ 'string.pattern.base': '"caCert" must hold PEM certificates' }),
  startTls: Joi.boolean().default(false),
  connectTimeoutMs: Joi.number().integer().min(100).max(120_000).default(5000),
  timeoutMs: Joi.number().integer().min(100).max(300_000).default(10_000),
  backoffMs: Joi.number().integer().min(0).max(3_600_000).default(30_000),
  rememberMs: Joi.number().integer().min(0).max(86_400_000).default(600_000),
  label: Joi.string().trim().min(1).max(100).default('LDAP'),
});

/** Validates and resolves the provider settings (the URL list split); throws naming every problem. */
export function resolveOptions(options: LdapProviderOptions): ResolvedOptions {
  const { value, error } = ldapOptionsSchema.validate(options, { abortEarly: false, convert: true });
  if (error) throw new Error(`invalid LDAP provider settings: ${error.details.map((d) => d.message).join('; ')}`);
  const resolved = value as Omit<ResolvedOptions, 'urls'>;
  return { ...resolved, urls: resolved.url.split(' ') };
}
