import Joi from 'joi';
import { AUTH_PROVIDER_IDS, SETTING_RULES, type Config, type LdapConfig, type OidcConfig } from '../config.js';
import type { SecretsStore } from '../iam/secrets.js';
import { DomainError, type FieldError } from '../errors.js';
import { GROUP_NAME } from '../iam/schemas.js';

/**
 * Authentication provider settings: each field comes from the environment,
 * else the encrypted secrets store (namespace core/auth), else its default. A field set in the
 * environment is locked: the settings API refuses to change it (409).
 */
export const AUTH_NS = 'core/auth';
export const MASK = '********';

export interface AuthSettings {
  providers: string[];
  ssoDefaultGroups: string[];
  ldap: LdapConfig;
  oidc: OidcConfig;
}

type FieldKind = 'string' | 'secret' | 'list' | 'mapping' | 'boolean';

interface FieldDef {
  env: string;
  kind: FieldKind;
  schema: Joi.Schema;
  /** the value in Config (env or default) */
  read(c: Config): unknown;
  write(s: AuthSettings, v: unknown): void;
}

const mapping = Joi.object().pattern(Joi.string().min(1).max(1024), Joi.array().items(Joi.string().pattern(GROUP_NAME)).max(100).single()).max(500);
/** A list given as a JSON array or a comma-separated string; each item validated by `items`. */
const listOf = (items: Joi.ArraySchema) =>
  Joi.alternatives().try(
    items,
    Joi.string().custom((v: string, h) => {
      const parts = v.split(',').map((x) => x.trim()).filter(Boolean);
      const { error, value } = items.validate(parts);
      if (error) return h.message(error.message.replace(/^"[^"]*"/, 'the list') as any);
      return value;
    }),
  );
const providerList = Joi.array()
  .items(Joi.string().valid(...AUTH_PROVIDER_IDS))
  .min(1)
  .unique()
  .messages({ 'array.min': 'must name at least one provider', 'array.unique': 'names a provider twice' });
const nullable = (s: Joi.Schema) => s.allow(null);

/** The fields of GET|PATCH /api/settings/auth, keyed by their API (and store) name. */
export const FIELDS: Record<string, FieldDef> = {
  auth_providers: {
    env: 'SERVICE_AUTH_PROVIDERS',
    kind: 'list',
    schema: listOf(providerList),
    read: (c) => c.authProviders,
    write: (s, v) => (s.providers = v as string[]),
  },
  sso_default_groups: {
    env: 'SERVICE_SSO_DEFAULT_GROUPS',
    kind: 'list',
    schema: listOf(Joi.array().items(Joi.string().pattern(GROUP_NAME)).max(100).unique()),
    read: (c) => c.ssoDefaultGroups,
    write: (s, v) => (s.ssoDefaultGroups = v as string[]),
  },
  ldap_url: {
    env: 'SERVICE_LDAP_URL',
    kind: 'string',
    schema: nullable(SETTING_RULES.ldapUrl),
    read: (c) => c.ldap.url,
    write: (s, v) => (s.ldap.url = v as string | null),
  },
  ldap_bind_dn: {
    env: 'SERVICE_LDAP_BIND_DN',
    kind: 'string',
    schema: nullable(SETTING_RULES.ldapBindDn),
    read: (c) => c.ldap.bindDN,
    write: (s, v) => (s.ldap.bindDN = v as string | null),
  },
  ldap_bind_password: {
    env: 'SERVICE_LDAP_BIND_PASSWORD',
    kind: 'secret',
    schema: nullable(SETTING_RULES.ldapBindPassword),
    read: (c) => c.ldap.bindPassword,
    write: (s, v) => (s.ldap.bindPassword = v as string | null),
  },
  ldap_base_dn: {
    env: 'SERVICE_LDAP_BASE_DN',
    kind: 'string',
    schema: nullable(SETTING_RULES.ldapBaseDn),
    read: (c) => c.ldap.baseDN,
    write: (s, v) => (s.ldap.baseDN = v as string | null),
  },
  ldap_user_filter: {
    env: 'SERVICE_LDAP_USER_FILTER',
    kind: 'string',
    schema: SETTING_RULES.ldapUserFilter,
    read: (c) => c.ldap.userFilter,
    write: (s, v) => (s.ldap.userFilter = v as string),
  },
  ldap_group_attr: {
    env: 'SERVICE_LDAP_GROUP_ATTR',
    kind: 'string',
    schema: SETTING_RULES.ldapGroupAttr,
    read: (c) => c.ldap.groupAttr,
    write: (s, v) => (s.ldap.groupAttr = v as string),
  },
  ldap_group_mapping: {
    env: 'SERVICE_LDAP_GROUP_MAPPING',
    kind: 'mapping',
    schema: mapping,
    read: (c) => c.ldap.groupMapping,
    write: (s, v) => (s.ldap.groupMapping = v as Record<string, string[]>),
  },
  ldap_tls_verify: {
    env: 'SERVICE_LDAP_TLS_VERIFY',
    kind: 'boolean',
    schema: Joi.boolean(),
    read: (c) => c.ldap.tlsVerify,
    write: (s, v) => (s.ldap.tlsVerify = v as boolean),
  },
  oidc_issuer: {
    env: 'SERVICE_OIDC_ISSUER',
    kind: 'string',
    schema: nullable(SETTING_RULES.oidcIssuer),
    read: (c) => c.oidc.issuer,
    write: (s, v) => (s.oidc.issuer = v as string | null),
  },
  oidc_client_id: {
    env: 'SERVICE_OIDC_CLIENT_ID',
    kind: 'string',
    schema: nullable(SETTING_RULES.oidcClientId),
    read: (c) => c.oidc.clientId,
    write: (s, v) => (s.oidc.clientId = v as string | null),
  },
  oidc_client_secret: {
    env: 'SERVICE_OIDC_CLIENT_SECRET',
    kind: 'secret',
    schema: nullable(SETTING_RULES.oidcClientSecret),
    read: (c) => c.oidc.clientSecret,
    write: (s, v) => (s.oidc.clientSecret = v as string | null),
  },
  oidc_scopes: {
    env: 'SERVICE_OIDC_SCOPES',
    kind: 'string',
    schema: SETTING_RULES.oidcScopes,
    read: (c) => c.oidc.scopes,
    write: (s, v) => (s.oidc.scopes = v as string),
  },
  oidc_groups_claim: {
    env: 'SERVICE_OIDC_GROUPS_CLAIM',
    kind: 'string',
    schema: SETTING_RULES.oidcGroupsClaim,
    read: (c) => c.oidc.groupsClaim,
    write: (s, v) => (s.oidc.groupsClaim = v as string),
  },
  oidc_group_mapping: {
    env: 'SERVICE_OIDC_GROUP_MAPPING',
    kind: 'mapping',
    schema: mapping,
    read: (c) => c.oidc.groupMapping,
    write: (s, v) => (s.oidc.groupMapping = v as Record<string, string[]>),
  },
  oidc_label: {
    env: 'SERVICE_OIDC_LABEL',
    kind: 'string',
    schema: SETTING_RULES.oidcLabel,
    read: (c) => c.oidc.label,
    write: (s, v) => (s.oidc.label = v as string),
  },
};

/** A secret and the fields naming where it is sent: when one of those changes, the secret is entered anew. */
const SECRET_BOUND_TO: Record<string, string[]> = {
  ldap_bind_password: ['ldap_url', 'ldap_bind_dn'],
  oidc_client_secret: ['oidc_issuer', 'oidc_client_id'],
};

/** PATCH body: any subset of the fields; null resets a field to its default. */
export const patchSchema = Joi.object(Object.fromEntries(Object.entries(FIELDS).map(([name, f]) => [name, f.schema.allow(null)])))
  .min(1)
  .messages({ 'object.min': 'name at least one setting to change' });

export type FieldSource = 'env' | 'store' | 'default';

export interface FieldView {
  value: unknown;
  source: FieldSource;
  locked: boolean;
  secret: boolean;
  configured: boolean;
}

function clone(c: Config): AuthSettings {
  return {
    providers: [...c.authProviders],
    ssoDefaultGroups: [...c.ssoDefaultGroups],
    ldap: { ...c.ldap, groupMapping: { ...c.ldap.groupMapping } },
    oidc: { ...c.oidc, groupMapping: { ...c.oidc.groupMapping } },
  };
}

function normalise(name: string, value: unknown): unknown {
  if (FIELDS[name]!.kind === 'mapping' && value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, Array.isArray(v) ? v : [v]]));
  }
  if (typeof value === 'string' && FIELDS[name]!.kind !== 'secret') {
    const t = value.trim();
    return t === '' ? null : t;
  }
  return value;
}

/** Resolves and changes the auth settings; `current()` is what the provider chain is built from. */
export class AuthSettingsStore {
  private stored: Record<string, unknown> = {};

  constructor(private readonly config: Config, private readonly secrets: SecretsStore) {}

  isLocked(name: string): boolean {
    const f = FIELDS[name];
    return Boolean(f && this.config.fromEnv.has(f.env));
  }

  /** 409 naming every field of `names` that the environment sets. */
  assertUnlocked(names: string[]): void {
    const locked = names.filter((name) => this.isLocked(name));
    if (locked.length) {
      throw new DomainError('conflict', `set in the environment and locked: ${locked.join(', ')}`, { locked: locked.map((name) => ({ field: name, env: FIELDS[name]!.env })) });
    }
  }

  /** Reads the stored values (at boot and before each change). Unreadable or invalid values are ignored. */
  async load(): Promise<AuthSettings> {
    const raw = await this.secrets.getAll(AUTH_NS);
    const stored: Record<string, unknown> = {};
    for (const [name, text] of Object.entries(raw)) {
      const f = FIELDS[name];
      if (!f) continue;
      try {
        const { error, value } = (patchSchema.extract(name) as Joi.Schema).validate(JSON.parse(text));
        if (!error && value !== null) stored[name] = normalise(name, value);
      } catch {
        /* a value this version cannot read stays unused */
      }
    }
    this.stored = stored;
    return this.current();
  }

  /** env, then store, then default, field by field. */
  current(): AuthSettings {
    return this.merge(this.stored);
  }

  private merge(stored: Record<string, unknown>): AuthSettings {
    const s = clone(this.config);
    for (const [name, f] of Object.entries(FIELDS)) {
      if (this.isLocked(name)) continue; // Config already holds the env value
      if (name in stored) f.write(s, stored[name]);
    }
    return s;
  }

  /**
   * Validated changes -> the settings they would produce, without saving them. A locked field
   * is a 409. Secret fields sent back as the mask keep their value, unless the endpoint or
   * account they authenticate changes: then the secret must be entered again (400), so a stored
   * password is never sent to a server it was not set for.
   */
  preview(patch: Record<string, unknown>): { settings: AuthSettings; changes: Record<string, unknown> } {
    this.assertUnlocked(Object.keys(patch));
    const changes: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(patch)) {
      if (FIELDS[name]!.kind === 'secret' && value === MASK) continue;
      changes[name] = value === null ? null : normalise(name, value);
    }
    const next = { ...this.stored };
    for (const [name, value] of Object.entries(changes)) {
      if (value === null) delete next[name];
      else next[name] = value;
    }
    const before = this.current();
    const after = this.merge(next);
    const problems: FieldError[] = [];
    for (const [secret, boundTo] of Object.entries(SECRET_BOUND_TO)) {
      const moved = boundTo.filter((f) => JSON.stringify(readSetting(before, f)) !== JSON.stringify(readSetting(after, f)));
      const kept = readSetting(after, secret) !== null && !(secret in changes);
      if (moved.length && kept) {
        problems.push({
          field: secret,
          message: this.isLocked(secret)
            ? `is set in the environment (${FIELDS[secret]!.env}): change ${moved.join(' and ')} there, together with it`
            : `must be entered again when ${moved.join(' or ')} changes`,
        });
      }
    }
    if (problems.length) throw new DomainError('validation_failed', problems.map((p) => `${p.field}: ${p.message}`).join('; '), problems);
    return { settings: after, changes };
  }

  /** Persists changes produced by preview(); null removes the stored value. */
  async save(changes: Record<string, unknown>): Promise<AuthSettings> {
    for (const [name, value] of Object.entries(changes)) {
      if (value === null) await this.secrets.delete(AUTH_NS, name);
      else await this.secrets.set(AUTH_NS, name, JSON.stringify(value));
    }
    return this.load();
  }

  /** The API view: every field with its source and lock; secrets masked (never returned). */
  view(): Record<string, FieldView> {
    const s = this.current();
    const out: Record<string, FieldView> = {};
    for (const [name, f] of Object.entries(FIELDS)) {
      const locked = this.isLocked(name);
      const source: FieldSource = locked ? 'env' : name in this.stored ? 'store' : 'default';
      const value = readSetting(s, name);
      const configured = value !== null && value !== undefined && value !== '';
      out[name] = {
        value: f.kind === 'secret' ? (configured ? MASK : null) : value,
        source,
        locked,
        secret: f.kind === 'secret',
        configured,
      };
    }
    return out;
  }
}

/** Reads one field of resolved settings by its API name. */
export function readSetting(s: AuthSettings, name: string): unknown {
  const shim = {
    authProviders: s.providers,
    ssoDefaultGroups: s.ssoDefaultGroups,
    ldap: s.ldap,
    oidc: s.oidc,
  } as unknown as Config;
  return FIELDS[name]!.read(shim);
}
