import { X509Certificate } from 'node:crypto';
import Joi from 'joi';
import type { SettingKind } from './client/api-types.js';
import { fieldErrorsOf } from './errors.js';

/**
 * Every SERVICE_* setting, once: its variable, kind, value rule, default and description. The
 * environment parse (src/config.ts), the auth settings API and page (src/auth/settings.ts), the
 * CLI's `settings` commands and the README's configuration table
 * (`npm run docs:settings`) are all derived from this table, so a rule cannot differ between them.
 */

export const USERNAME = /^[A-Za-z0-9._@-]{1,64}$/;
export const GROUP_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
export const AUTH_PROVIDER_IDS = ['local', 'ldap', 'oidc'] as const;

/**
 * How a value is written: `list` is comma separated in the environment (a JSON array or a comma
 * separated string through the API), `mapping` is a JSON object, `secret` is never shown back.
 */
export type { SettingKind };

export interface SettingDef {
  env: string;
  kind: SettingKind;
  /** the rule of the value (a list: the array; booleans need none) */
  rule?: Joi.Schema;
  /** as written in the environment; absent: unset */
  default?: string;
  /** the README's default column, when the default is worked out at start */
  defaultText?: string;
  about: string;
  /** set also through the API (and the CLI) under this name; the environment then locks it */
  api?: string;
  /** the settings page's label */
  label?: string;
  /** where an auth setting lives in Config (and in the resolved auth settings) */
  path?: string;
}

const DURATION = /^(\d+)(ms|s|m|h|d)?$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

export function parseDuration(value: string): number | null {
  const m = DURATION.exec(value.trim());
  if (!m) return null;
  return Number(m[1]) * UNIT_MS[m[2] ?? 's'];
}

/** A duration like 30m, 12h or 7d, at least `minMs`. */
const duration = (minMs: number) =>
  Joi.string().custom((v: string) => {
    const ms = parseDuration(v);
    if (ms === null) throw new Error('must be a duration like 30m, 12h or 7d');
    if (ms < minMs) throw new Error(`must be at least ${minMs / 60_000} minute${minMs === 60_000 ? '' : 's'}`);
    return v;
  });
const noWhitespace = { 'string.pattern.base': '{{#label}} must not contain whitespace' };
const count = (max: number) => Joi.number().integer().min(1).max(max);
const webhookSecret = Joi.string().trim().min(16).max(256).pattern(/^\S+$/).messages(noWhitespace);
/** One forge's own webhook secret (src/notifications/webhook.ts): same rule as the shared one. */
const forgeWebhookSecret = (env: string, api: string, forge: string, why = ''): SettingDef => ({
  env,
  kind: 'secret',
  rule: webhookSecret,
  about: `${forge} deliveries' own webhook secret${why}, the only one they are verified with; unset: the one set through the API, else the shared secret ([docs/security.md](docs/security.md#webhooks))`,
  api,
  label: `${forge} webhook secret`,
});
const groupList = Joi.array()
  .items(Joi.string().pattern(GROUP_NAME).message('{{#label}} must be a group name (a letter or digit, then up to 63 letters, digits or . _ -)'))
  .max(100)
  .unique();
/** external group (LDAP DN, OIDC claim value) -> local groups */
const GROUP_MAPPING = Joi.object()
  .pattern(Joi.string().min(1).max(1024), Joi.array().items(Joi.string().pattern(GROUP_NAME)).max(100).single())
  .max(500);
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

export const SETTINGS: readonly SettingDef[] = [
  { env: 'SERVICE_HOST', kind: 'string', rule: Joi.string().hostname(), default: '127.0.0.1', about: 'listen address' },
  { env: 'SERVICE_PORT', kind: 'string', rule: Joi.number().integer().min(0).max(65535), default: '8080', about: 'listen port' },
  {
    env: 'SERVICE_PUBLIC_URL',
    kind: 'string',
    rule: Joi.string().uri({ scheme: ['http', 'https'] }),
    defaultText: '`http://localhost:<port>`',
    about: 'base URL; origin for cookies, OIDC redirects, Origin checks',
  },
  { env: 'SERVICE_DATA_DIR', kind: 'string', rule: Joi.string().min(1), default: './data', about: 'SQLite file, generated secret key (mode 0600)' },
  {
    env: 'SERVICE_DATABASE_URL',
    kind: 'string',
    rule: Joi.string().uri({ scheme: ['postgres', 'postgresql', 'sqlite', 'file'] }),
    defaultText: 'SQLite in the data dir',
    about: '`postgres://user@host:5432/db` selects PostgreSQL',
  },
  {
    env: 'SERVICE_ENV',
    kind: 'string',
    rule: Joi.string().valid('development', 'production', 'test'),
    default: 'development',
    about:
      '`production` refuses unset, development and placeholder passwords and a missing or placeholder secret key; `development` refuses the development passwords off a loopback `SERVICE_HOST`, and warns at every start',
  },
  {
    env: 'SERVICE_SECRET_KEY',
    kind: 'secret',
    rule: Joi.string().min(32),
    defaultText: 'generated once',
    about: 'master key: secrets store encryption, cookie signing (≥ 32 chars)',
  },
  { env: 'SERVICE_ADMIN_USER', kind: 'string', rule: Joi.string().pattern(USERNAME), default: 'admin', about: 'bootstrap admin (INT_ADMIN)' },
  {
    env: 'SERVICE_ADMIN_PASSWORD',
    kind: 'secret',
    rule: Joi.string().min(8).max(200),
    defaultText: 'dev default',
    about:
      "the bootstrap admin's password; applied at a start where its value differs from the one last applied, so a password set since (CLI, UI) stays until the variable changes",
  },
  { env: 'SERVICE_BOT_USER', kind: 'string', rule: Joi.string().pattern(USERNAME), default: 'bot', about: 'bootstrap bot (roles `[bot]`, INT_USER)' },
  {
    env: 'SERVICE_BOT_PASSWORD',
    kind: 'secret',
    rule: Joi.string().min(8).max(200),
    defaultText: 'dev default',
    about: "the bootstrap bot's password; applied like the admin's",
  },
  {
    env: 'SERVICE_ADMIN_FORCE_SUPERADMIN',
    kind: 'boolean',
    default: 'false',
    about: "at the service's boot, sets (or clears) the superadmin flag on the admin, as an audited action",
  },
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
      rule: Joi.string()
        .trim()
        .uri({ scheme: ['ldap', 'ldaps'] })
        .max(2048),
      about: 'directory server, `ldap://` or `ldaps://`',
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
    { kind: 'boolean', default: 'true', about: "check the server's certificate and name (a private CA: `SERVICE_LDAP_CA_CERT`)" },
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
      about: 'an `ldap://` connection is upgraded with StartTLS before anything is sent, or refused; `ldaps://` is TLS already',
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
      about: 'each directory operation; after a timeout LDAP is skipped for 30 s (the chain goes on at once)',
    },
    'timeoutMs',
  ),
  ldap(
    'recheck_interval',
    'Directory account recheck interval',
    {
      kind: 'string',
      rule: recheckInterval,
      default: '15m',
      about:
        'how often the directory accounts of people with live sessions or keys are checked again; disabled, expired or gone there: their sessions and keys are revoked ([docs/auth.md](docs/auth.md#active-directory)); `0`: never',
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
  {
    env: 'SERVICE_SYSTEM_API_KEY',
    kind: 'secret',
    rule: Joi.string().trim().min(32).max(256).pattern(/^\S+$/).messages(noWhitespace),
    about: 'master machine key (32–256 characters, no whitespace); unset or blank: the one set through the API, else disabled',
    api: 'system_api_key',
    label: 'System API key',
  },
  { env: 'SERVICE_SESSION_TTL', kind: 'string', rule: duration(60_000), default: '12h', about: 'web-session token and cookie lifetime' },
  {
    env: 'SERVICE_PERMISSION_CACHE_TTL_MS',
    kind: 'string',
    rule: Joi.number().integer().min(0).max(3_600_000),
    default: '5000',
    about: 'effective-permission cache (changes invalidate it at once)',
  },
  {
    env: 'SERVICE_SCM_WEBHOOK_SECRET',
    kind: 'secret',
    rule: webhookSecret,
    about:
      'shared webhook secret of the forges without their own (16–256 characters, no whitespace); once GitLab has sent it as its token it no longer verifies GitHub or Gitea; unset: the one set through the API; no secret at all: the intake answers 503',
    api: 'scm_webhook_secret',
    label: 'Source-control webhook secret',
  },
  forgeWebhookSecret('SERVICE_SCM_WEBHOOK_SECRET_GITEA', 'scm_webhook_secret_gitea', 'Gitea'),
  forgeWebhookSecret('SERVICE_SCM_WEBHOOK_SECRET_GITHUB', 'scm_webhook_secret_github', 'GitHub'),
  forgeWebhookSecret('SERVICE_SCM_WEBHOOK_SECRET_GITLAB', 'scm_webhook_secret_gitlab', 'GitLab', ' (its token travels in clear: give GitLab its own)'),
  { env: 'SERVICE_CONTAINER_SOCKET', kind: 'string', rule: Joi.string().min(1), default: '/var/run/docker.sock', about: 'container daemon socket' },
  {
    env: 'SERVICE_SOCKET_READS_REQUIRE_AUTH',
    kind: 'boolean',
    default: 'false',
    about:
      'the socket reads (`/api/socket/providers`, `/api/socket/health`, container health, mounts, storage root) answer signed-in callers only; anonymous: 401',
  },
  {
    env: 'SERVICE_RUNNER_PREFIX',
    kind: 'string',
    rule: Joi.string().pattern(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/),
    default: 'runner-',
    about: 'default prefix of runner containers (cleanup, runners, spawn)',
  },
  {
    env: 'SERVICE_MANAGED_DIRS',
    kind: 'list',
    rule: Joi.array().items(Joi.string().min(1)),
    defaultText: '`<data dir>/managed`',
    about: 'the only roots runners may mount and repair may touch; never the data dir itself ([docs/security.md](docs/security.md))',
  },
  { env: 'SERVICE_PLUGINS_DIR', kind: 'string', rule: Joi.string().min(1), default: './plugins', about: 'plugin folders' },
  // http(s) only: another scheme's origin is "null", which every sandboxed page sends
  {
    env: 'SERVICE_ALLOWED_ORIGINS',
    kind: 'list',
    rule: Joi.array().items(Joi.string().uri({ scheme: ['http', 'https'] })),
    defaultText: "the public URL's origin",
    about: 'extra http(s) origins for cookie, ws and OIDC redirect checks',
  },
  {
    env: 'SERVICE_TRUST_PROXY',
    kind: 'string',
    rule: Joi.alternatives(Joi.boolean().truthy('1', 'yes', 'on').falsy('0', 'no', 'off'), Joi.number().integer().min(0).max(10)),
    default: 'false',
    about: 'behind a reverse proxy (`true`, or the number of proxies in a row): the client address is the `X-Forwarded-For` entry the nearest proxy added',
  },
  {
    env: 'SERVICE_REDIS_URL',
    kind: 'string',
    rule: Joi.string().uri({ scheme: ['redis', 'rediss'] }),
    about:
      'several instances: the Redis that carries the (signed) bus between them, `redis://user:password@host:6379/0` or `rediss://` for TLS ([docs/deploy.md](docs/deploy.md)); unset: one instance, no Redis needed',
  },
  {
    env: 'SERVICE_LOGIN_ATTEMPTS_PER_MINUTE',
    kind: 'string',
    rule: count(100_000),
    default: '60',
    about:
      'password checks (and OIDC starts) per client address, before any hashing, over it 429; a browser that signed in before (device cookie) has this budget of its own per account',
  },
  {
    env: 'SERVICE_BCRYPT_COST',
    kind: 'string',
    rule: Joi.number().integer().min(4).max(14),
    default: '10',
    about:
      'bcrypt cost of new password hashes (each step doubles the work); production refuses less than 10; existing hashes keep their cost until the password changes',
  },
  {
    env: 'SERVICE_PASSWORD_QUEUE',
    kind: 'string',
    rule: count(100_000),
    default: '64',
    about: 'password checks waiting for a hashing thread, per lane (known devices go first); beyond it 503 with Retry-After',
  },
  {
    env: 'SERVICE_WS_MAX_CONNECTIONS_PER_USER',
    kind: 'string',
    rule: count(100_000),
    default: '20',
    about: 'open WebSocket connections per user on an instance',
  },
  {
    env: 'SERVICE_NOTIFICATION_RETENTION',
    kind: 'string',
    rule: duration(60_000),
    default: '90d',
    about: 'notifications not updated for longer are deleted (hourly)',
  },
  {
    env: 'SERVICE_AUDIT_RETENTION',
    kind: 'string',
    rule: duration(86_400_000),
    default: '400d',
    about: 'audit events older than this are pruned (hourly); the chain stays verifiable from where it then starts',
  },
  {
    env: 'SERVICE_NOTIFICATION_MAX_PER_USER',
    kind: 'string',
    rule: count(10_000_000),
    default: '1000',
    about: 'notifications kept per user (and broadcasts kept) at most; the oldest go first',
  },
  {
    env: 'SERVICE_LOG_LEVEL',
    kind: 'string',
    rule: Joi.string().valid('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'),
    default: 'info',
    about: 'JSON log lines on stdout; secrets are redacted',
  },
];

const byEnv = new Map(SETTINGS.map((s) => [s.env, s]));
const byApi = new Map(SETTINGS.filter((s) => s.api).map((s) => [s.api!, s]));

/** The row of a variable (a typo is a bug: it throws at load). */
export function setting(env: string): SettingDef {
  const s = byEnv.get(env);
  if (!s) throw new Error(`no setting ${env}`);
  return s;
}

/** The row of a setting the API sets, by its API name. */
export const apiSetting = (name: string): SettingDef | undefined => byApi.get(name);

/** The rule of a value set through the API (or the CLI): lists also as comma-separated text. */
export function apiRule(s: SettingDef): Joi.Schema {
  if (s.kind === 'boolean') return Joi.boolean();
  if (s.kind !== 'list') return s.rule!;
  const items = s.rule as Joi.ArraySchema;
  return Joi.alternatives().try(
    items,
    Joi.string().custom((v: string, h) => {
      const { error, value } = items.validate(splitList(v));
      // h.message reads its text as a template: a brace in the value must stay text
      if (error) return h.message({ custom: fieldErrorsOf(error)[0]!.message.replace(/[{}]/g, '\\$&') });
      return value;
    }),
  );
}

const splitList = (v: string): string[] =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

const envBool = Joi.boolean().truthy('1', 'yes', 'on').falsy('0', 'no', 'off');

/** A value's text -> the checked value, or an Error whose message is the reason. */
function fromText(s: SettingDef, text: string): unknown {
  let value: unknown = text;
  if (s.kind === 'list') value = splitList(text);
  else if (s.kind === 'mapping') {
    try {
      value = JSON.parse(text);
    } catch {
      throw new Error('must be a JSON object mapping a name to a list of group names');
    }
  }
  const rule = s.kind === 'boolean' ? envBool : s.rule!;
  const { error, value: checked } = rule.validate(value, { convert: true });
  if (error) {
    const d = error.details[0]!;
    // a rule of our own (a duration) says why itself, without joi's "failed custom validation"
    const reason = d.type === 'any.custom' ? String((d.context?.error as Error | undefined)?.message ?? d.message) : fieldErrorsOf(error)[0]!.message;
    throw new Error(s.kind === 'mapping' ? `must be a JSON object mapping a name to a list of group names (${reason})` : reason);
  }
  return checked;
}

/** The rule of one environment variable: blank is unset, then the default applies. */
function envRule(s: SettingDef): Joi.Schema {
  const rule = Joi.string()
    .empty(Joi.string().trim().valid(''))
    .custom((v: string) => fromText(s, v));
  return s.default === undefined ? rule : rule.default(fromText(s, s.default) as Joi.BasicType);
}

/** joi schema of the raw environment; unknown variables pass through untouched */
export const ENV_SCHEMA = Joi.object(Object.fromEntries(SETTINGS.map((s) => [s.env, envRule(s)]))).unknown(true);
