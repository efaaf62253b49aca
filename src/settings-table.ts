import Joi from 'joi';
import { fieldErrorsOf } from './errors.js';
import { hostName, parseDuration, urlWithScheme, usernameRule, type SettingDef } from './settings-kinds.js';
import { AUTH_SETTINGS } from './settings-table-auth.js';
import { HOST_SETTINGS } from './settings-table-hosts.js';

/**
 * Every SERVICE_* setting, once: its variable, kind, value rule, default and description. The
 * environment parse (src/config.ts), the auth settings API and page (src/auth/settings.ts), the
 * CLI's `settings` commands and the README's configuration table
 * (`npm run docs:settings`) are all derived from this table, so a rule cannot differ between them.
 */

export {
  GROUP_NAME,
  GROUP_NAME_WORDS,
  groupNameRule,
  parseDuration,
  USERNAME,
  USERNAME_WORDS,
  usernameRule,
  type SettingDef,
  type SettingKind,
} from './settings-kinds.js';
export { AUTH_PROVIDER_IDS } from './settings-table-auth.js';

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

export const SETTINGS: readonly SettingDef[] = [
  { env: 'SERVICE_HOST', kind: 'string', rule: hostName, default: '127.0.0.1', about: 'listen address' },
  { env: 'SERVICE_PORT', kind: 'string', rule: Joi.number().integer().min(0).max(65535), default: '8080', about: 'listen port' },
  {
    env: 'SERVICE_PUBLIC_URL',
    kind: 'string',
    rule: urlWithScheme(['http', 'https']),
    defaultText: '`http://localhost:<port>`',
    about: 'base URL; origin for cookies, OIDC redirects, Origin checks',
  },
  { env: 'SERVICE_DATA_DIR', kind: 'string', rule: Joi.string().min(1), default: './data', about: 'SQLite file, generated secret key (mode 0600)' },
  {
    env: 'SERVICE_DATABASE_URL',
    kind: 'string',
    rule: urlWithScheme(['postgres', 'postgresql', 'sqlite', 'file']),
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
  { env: 'SERVICE_ADMIN_USER', kind: 'string', rule: usernameRule, default: 'admin', about: 'bootstrap admin (INT_ADMIN)' },
  {
    env: 'SERVICE_ADMIN_PASSWORD',
    kind: 'secret',
    rule: Joi.string().min(8).max(200),
    defaultText: 'dev default',
    about:
      "the bootstrap admin's password; applied at a start where its value differs from the one last applied, so a password set since (CLI, UI) stays until the variable changes",
  },
  { env: 'SERVICE_BOT_USER', kind: 'string', rule: usernameRule, default: 'bot', about: 'bootstrap bot (roles `[bot]`, INT_USER)' },
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
    about:
      "at every start of the service, sets (or clears) the superadmin flag on the admin, as an audited action: the flag is the environment's (`user promote admin` is refused; promote an account of your own)",
  },
  // the sign-in rows: login chain, SSO defaults, second factor, LDAP, OIDC (src/settings-table-auth.ts)
  ...AUTH_SETTINGS,
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
  // DNS, DHCP, init system, gRPC (src/settings-table-hosts.ts)
  ...HOST_SETTINGS,
  { env: 'SERVICE_PLUGINS_DIR', kind: 'string', rule: Joi.string().min(1), default: './plugins', about: 'plugin folders' },
  // http(s) only: another scheme's origin is "null", which every sandboxed page sends
  {
    env: 'SERVICE_ALLOWED_ORIGINS',
    kind: 'list',
    rule: Joi.array().items(urlWithScheme(['http', 'https'])),
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
    rule: urlWithScheme(['redis', 'rediss']),
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
