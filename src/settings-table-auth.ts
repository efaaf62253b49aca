/**
 * The sign-in rows of the settings table: the login chain, single sign-on defaults, the second
 * factor, LDAP and OIDC (in this order in SETTINGS, src/settings-table.ts), with the rules only
 * they use.
 */
import { X509Certificate } from 'node:crypto';
import Joi from 'joi';
import { groupNameRule, ldapUrlList, parseDuration, type SettingDef } from './settings-kinds.js';

export const AUTH_PROVIDER_IDS = ['local', 'ldap', 'oidc'] as const;

const groupList = Joi.array().items(groupNameRule).max(100).unique();
/** external group (LDAP DN, OIDC claim value) -> local groups */
const GROUP_MAPPING = Joi.object().pattern(Joi.string().min(1).max(1024), Joi.array().items(groupNameRule).max(100).single()).max(500);
/**
 * PEM certificates (a CA bundle), each one read; text around them (a bundle's comments) is
 * dropped, and line breaks lost on the way (a one-line field) are put back. A private key is refused.
 */
const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----([\s\S]*?)-----END CERTIFICATE-----/g;
const pemCertificates = Joi.string()
  .max(65_536)
  .custom((text: string) => {
    if (/PRIVATE KEY-----/.test(text)) throw new Error('must hold certificates only, never a private key');
    const bodies = [...text.matchAll(PEM_CERTIFICATE)].map((m) => m[1]!.replace(/\s+/g, ''));
    if (bodies.length === 0 || bodies.some((b) => b === '')) throw new Error('must be one or more PEM certificates (-----BEGIN CERTIFICATE----- …)');
    const pems = bodies.map((b) => `-----BEGIN CERTIFICATE-----\n${b.match(/.{1,64}/g)!.join('\n')}\n-----END CERTIFICATE-----\n`);
    pems.forEach((pem, i) => {
      try {
        new X509Certificate(pem);
      } catch {
        throw new Error(`certificate ${i + 1} cannot be read`);
      }
    });
    return pems.join('');
  });
/** How often directory accounts are checked again: a duration of at least a second, or 0 (never). */
const recheckInterval = Joi.string().custom((v: string) => {
  const ms = parseDuration(v);
  if (ms === null) throw new Error('must be a duration like 15m or 1h, or 0 (never)');
  if (ms !== 0 && ms < 1000) throw new Error('must be at least 1s, or 0 (never)');
  return v.trim();
});

/** A login provider's setting: SERVICE_LDAP_URL, API name ldap_url, Config path ldap.url. */
const providerSetting =
  (area: 'ldap' | 'oidc') =>
  (name: string, label: string, def: Omit<SettingDef, 'env' | 'api' | 'label' | 'path'>, path: string): SettingDef => ({
    env: `SERVICE_${area.toUpperCase()}_${name.toUpperCase()}`,
    api: `${area}_${name}`,
    label,
    path: `${area}.${path}`,
    ...def,
  });
const ldap = providerSetting('ldap');
const oidc = providerSetting('oidc');

export const AUTH_SETTINGS: readonly SettingDef[] = [
  {
    env: 'SERVICE_AUTH_PROVIDERS',
    kind: 'list',
    rule: Joi.array()
      .items(
        Joi.string()
          .valid(...AUTH_PROVIDER_IDS)
          .messages({ 'any.only': 'unknown provider "{{#value}}" (one of local, ldap, oidc)' }),
      )
      .min(1)
      .unique()
      .messages({ 'array.min': 'must name at least one provider', 'array.unique': 'names a provider twice' }),
    default: 'local',
    about: 'ordered login chain, e.g. `ldap,local,oidc` ([docs/auth.md](docs/auth.md))',
    api: 'auth_providers',
    label: 'Sign-in providers, in order',
    path: 'authProviders',
  },
  {
    env: 'SERVICE_SSO_DEFAULT_GROUPS',
    kind: 'list',
    rule: groupList,
    default: 'INT_VIEWER',
    about: 'groups of a new SSO user',
    api: 'sso_default_groups',
    label: 'Default groups of new single sign-on users',
    path: 'ssoDefaultGroups',
  },
  {
    env: 'SERVICE_MFA_REQUIRED_GROUPS',
    kind: 'list',
    rule: groupList,
    default: '',
    about:
      'members of these groups must enrol a second factor: until then their sessions reach only their profile and the enrolment ([docs/auth.md](docs/auth.md))',
    api: 'mfa_required_groups',
    label: 'Groups that must use a second factor',
    path: 'mfaRequiredGroups',
  },
  {
    env: 'SERVICE_MFA_STEP_UP_MINUTES',
    kind: 'string',
    rule: Joi.number().integer().min(1).max(1440),
    default: '15',
    about: 'how long a verified second factor covers the actions that reach the host or change who is trusted (step-up)',
  },
  ldap(
    'url',
    'LDAP URL',
    {
      kind: 'string',
      rule: ldapUrlList,
      about:
        'directory servers, `ldap://` or `ldaps://`, separated by spaces: tried in order (the next one when a server does not answer or fails TLS, not when credentials are wrong); the one that answered is tried first for 10 minutes',
    },
    'url',
  ),
  ldap('bind_dn', 'LDAP bind DN', { kind: 'string', rule: Joi.string().trim().max(1024), about: 'service account the search binds as' }, 'bindDN'),
  ldap('bind_password', 'LDAP bind password', { kind: 'secret', rule: Joi.string().min(1).max(1024), about: "the service account's password" }, 'bindPassword'),
  ldap('base_dn', 'LDAP base DN', { kind: 'string', rule: Joi.string().trim().max(1024), about: 'where users are searched' }, 'baseDN'),
  ldap(
    'user_filter',
    'LDAP user filter',
    {
      kind: 'string',
      rule: Joi.string()
        .trim()
        .max(1024)
        .pattern(/^\(.*\{username\}.*\)$/s)
        .message('{{#label}} must be a parenthesised LDAP filter containing \\{username}'),
      default: '(uid={username})',
      about: 'search filter; `{username}` is replaced, escaped',
    },
    'userFilter',
  ),
  ldap(
    'group_attr',
    'LDAP group attribute',
    {
      kind: 'string',
      rule: Joi.string()
        .pattern(/^[A-Za-z][A-Za-z0-9-]*$/)
        .max(128),
      default: 'memberOf',
      about: "attribute listing a user's groups",
    },
    'groupAttr',
  ),
  ldap('group_mapping', 'LDAP group mapping', { kind: 'mapping', rule: GROUP_MAPPING, about: 'JSON: group DN -> local groups' }, 'groupMapping'),
  ldap(
    'tls_verify',
    'Verify the LDAP server certificate',
    {
      kind: 'boolean',
      default: 'true',
      about:
        "check the server's certificate and name (a private CA: `SERVICE_LDAP_CA_CERT`); `false` is warned of at boot and on the Authentication page (`/admin/authentication`)",
    },
    'tlsVerify',
  ),
  ldap(
    'ca_cert',
    'LDAP CA certificates (PEM)',
    {
      kind: 'string',
      rule: pemCertificates,
      about: "PEM text (not a file name) of the CAs that sign the directory's certificate, trusted for LDAPS and StartTLS instead of the system's",
    },
    'caCert',
  ),
  ldap(
    'starttls',
    'Upgrade ldap:// with StartTLS',
    {
      kind: 'boolean',
      default: 'false',
      about:
        'an `ldap://` connection is upgraded with StartTLS before anything is sent, or refused (the next server is tried); `ldaps://` is TLS already; a plain `ldap://` server without it is warned of at boot and on the Authentication page',
    },
    'startTls',
  ),
  ldap(
    'username_attr',
    'LDAP username attribute',
    {
      kind: 'string',
      rule: Joi.string()
        .pattern(/^[A-Za-z][A-Za-z0-9-]*$/)
        .max(128),
      default: 'uid',
      about:
        'attribute that names a new user locally, whatever form of the name was typed (`sAMAccountName` for Active Directory, also used there when the entry lacks this one)',
    },
    'usernameAttr',
  ),
  ldap(
    'nested_groups',
    'Follow nested LDAP groups',
    {
      kind: 'string',
      rule: Joi.alternatives(Joi.string().valid('auto'), Joi.boolean()),
      default: 'auto',
      about:
        "groups holding the user through other groups count for the mapping (Active Directory's in-chain rule); `auto`: on Active Directory, `true`, `false`",
    },
    'nestedGroups',
  ),
  ldap(
    'connect_timeout_ms',
    'LDAP connect timeout (ms)',
    { kind: 'string', rule: Joi.number().integer().min(100).max(120_000), default: '5000', about: 'connecting to the directory (TCP and TLS)' },
    'connectTimeoutMs',
  ),
  ldap(
    'timeout_ms',
    'LDAP operation timeout (ms)',
    {
      kind: 'string',
      rule: Joi.number().integer().min(100).max(300_000),
      default: '10000',
      about: 'each directory operation; when no server answers in time LDAP is paused (`SERVICE_LDAP_RETRY_AFTER`)',
    },
    'timeoutMs',
  ),
  ldap(
    'retry_after',
    'Pause after the directory failed',
    {
      kind: 'string',
      rule: Joi.string()
        .custom((v: string) => {
          const ms = parseDuration(v);
          if (ms === null || ms > 3_600_000) throw new Error('must be a duration like 30s or 2m (at most 1h), or 0 (no pause)');
          return v.trim();
        })
        .messages({ 'any.custom': '{{#label}} {{#error.message}}' }),
      default: '30s',
      about:
        'when no directory server answers (a timeout, a refused connection, a TLS failure) LDAP is skipped this long, the chain going on at once; then one login asks the directory and the others wait for its answer; `0`: no pause',
    },
    'retryAfter',
  ),
  ldap(
    'recheck_interval',
    'Directory account recheck interval',
    {
      kind: 'string',
      rule: recheckInterval,
      default: '15m',
      about:
        'how often the directory accounts of users linked to LDAP are checked again; disabled, expired or gone there: the user is disabled and their sessions and keys are revoked; active: their mapped groups, name, e-mail and display name follow the directory ([docs/auth.md](docs/auth.md#active-directory)); `0`: never',
    },
    'recheckInterval',
  ),
  ldap(
    'link_by_email',
    'Link LDAP logins by e-mail',
    { kind: 'boolean', default: 'false', about: "a first LDAP login joins the one user with the entry's `mail` (never an administrator's account)" },
    'linkByEmail',
  ),
  oidc(
    'issuer',
    'OIDC issuer URL',
    {
      kind: 'string',
      rule: Joi.string()
        .trim()
        .uri({ scheme: ['http', 'https'] })
        .max(2048),
      about: 'issuer; discovery at `<issuer>/.well-known/openid-configuration`',
    },
    'issuer',
  ),
  oidc('client_id', 'OIDC client ID', { kind: 'string', rule: Joi.string().trim().max(512), about: 'client registered at the provider' }, 'clientId'),
  oidc('client_secret', 'OIDC client secret', { kind: 'secret', rule: Joi.string().min(1).max(4096), about: "the client's secret" }, 'clientSecret'),
  oidc(
    'scopes',
    'OIDC scopes',
    {
      kind: 'string',
      rule: Joi.string()
        .trim()
        .max(1024)
        .pattern(/(^|\s)openid(\s|$)/)
        .message('{{#label}} must contain openid'),
      default: 'openid profile email',
      about: 'scopes asked for; must contain `openid`',
    },
    'scopes',
  ),
  oidc(
    'groups_claim',
    'OIDC groups claim',
    { kind: 'string', rule: Joi.string().trim().min(1).max(256), default: 'groups', about: 'claim holding the groups' },
    'groupsClaim',
  ),
  oidc('group_mapping', 'OIDC group mapping', { kind: 'mapping', rule: GROUP_MAPPING, about: 'JSON: claim value -> local groups' }, 'groupMapping'),
  oidc(
    'link_by_email',
    'Link OIDC logins by verified e-mail',
    { kind: 'boolean', default: 'true', about: "a first OIDC login joins the one user with its verified e-mail (never an administrator's account)" },
    'linkByEmail',
  ),
  oidc('label', 'OIDC button label', { kind: 'string', rule: Joi.string().trim().min(1).max(64), default: 'SSO', about: 'login button text' }, 'label'),
];
