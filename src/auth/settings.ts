import type { Knex } from 'knex';
import Joi from 'joi';
import type { Config } from '../config.js';
import { apiRule, SETTINGS, type SettingKind } from '../settings-table.js';
import type { AuthSettingView } from '../client/api-types.js';
import type { SecretsStore } from '../iam/secrets.js';
import { DomainError, type FieldError } from '../errors.js';

/**
 * Authentication provider settings: each field comes from the environment,
 * else the encrypted secrets store (namespace core/auth), else its default. A field set in the
 * environment is locked: the settings API refuses to change it (409).
 */
export const AUTH_NS = 'core/auth';
export const MASK = '********';

/** The settings the login chain is built from: the same shape as in Config. */
export type AuthSettings = Pick<Config, 'authProviders' | 'ssoDefaultGroups' | 'mfaRequiredGroups' | 'ldap' | 'oidc'>;

/** A field of GET|PATCH /api/settings/auth: a row of src/settings-table.ts with an API name and a path. */
export interface FieldDef {
  env: string;
  kind: SettingKind;
  label: string;
  /** the rule of a value sent through the API */
  schema: Joi.Schema;
  /** where it lives in Config and in AuthSettings: "ldap.url" */
  path: string[];
}

const AUTH_FIELD_ROWS = SETTINGS.filter((s) => s.api && s.path);

/** The fields of GET|PATCH /api/settings/auth, keyed by their API (and store) name. */
export const FIELDS: Record<string, FieldDef> = Object.fromEntries(
  AUTH_FIELD_ROWS.map((s) => [s.api!, { env: s.env, kind: s.kind, label: s.label!, schema: apiRule(s), path: s.path!.split('.') }]),
);

/** A secret and the fields naming where it is sent: when one of those changes, the secret is entered anew. */
const SECRET_BOUND_TO: Record<string, string[]> = {
  // turning certificate checks off lets whoever sits on the network read the bind password, and
  // another CA (or StartTLS) decides which server may present itself as the directory
  ldap_bind_password: ['ldap_url', 'ldap_bind_dn', 'ldap_tls_verify', 'ldap_ca_cert', 'ldap_starttls'],
  oidc_client_secret: ['oidc_issuer', 'oidc_client_id'],
};

/** A secret and the field naming where it is sent: unsetting that field unsets the secret with it (it has nowhere to go). */
const SECRET_GOES_WITH: Record<string, string> = { ldap_bind_password: 'ldap_url', oidc_client_secret: 'oidc_issuer' };

/** PATCH body: any subset of the fields; null resets a field to its default. */
export type AuthSettingsPatch = Record<string, unknown>;

// the keys are FIELDS' (made at load time): the type cannot list them, so the schema is not a strict one
export const patchSchema = Joi.object<AuthSettingsPatch>(Object.fromEntries(Object.entries(FIELDS).map(([name, f]) => [name, f.schema.allow(null)])))
  .min(1)
  .messages({ 'object.min': 'name at least one setting to change' });

function clone(c: Config): AuthSettings {
  return {
    authProviders: [...c.authProviders],
    ssoDefaultGroups: [...c.ssoDefaultGroups],
    mfaRequiredGroups: [...c.mfaRequiredGroups],
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

  constructor(
    private readonly config: Config,
    private readonly secrets: SecretsStore,
  ) {}

  isLocked(name: string): boolean {
    const f = FIELDS[name];
    return Boolean(f && this.config.fromEnv.has(f.env));
  }

  /** 409 naming every field of `names` that the environment sets. */
  assertUnlocked(names: string[]): void {
    const locked = names.filter((name) => this.isLocked(name));
    if (locked.length) {
      throw new DomainError('conflict', `set in the environment and locked: ${locked.join(', ')}`, {
        locked: locked.map((name) => ({ field: name, env: FIELDS[name]!.env })),
      });
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
    for (const name of Object.keys(FIELDS)) {
      if (this.isLocked(name)) continue; // Config already holds the env value
      if (name in stored) writeSetting(s, name, stored[name]);
    }
    return s;
  }

  /**
   * Validated changes -> the settings they would produce, without saving them. A locked field
   * is a 409. Secret fields sent back as the mask keep their value, unless the endpoint or
   * account they authenticate changes: then the secret must be entered again (400), so a stored
   * password is never sent to a server it was not set for. Unsetting the server's address
   * (ldap_url, oidc_issuer) unsets its stored secret in the same change (named in `changes`).
   */
  preview(patch: Record<string, unknown>): { settings: AuthSettings; changes: Record<string, unknown> } {
    this.assertUnlocked(Object.keys(patch));
    const changes: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(patch)) {
      if (FIELDS[name]!.kind === 'secret' && value === MASK) continue;
      changes[name] = value === null ? null : normalise(name, value);
    }
    for (const [secret, endpoint] of Object.entries(SECRET_GOES_WITH)) {
      const cleared = endpoint in changes && (changes[endpoint] === null || changes[endpoint] === '');
      if (cleared && !(secret in changes) && secret in this.stored && !this.isLocked(secret) && !this.isLocked(endpoint)) changes[secret] = null;
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
  async save(changes: Record<string, unknown>, trx?: Knex): Promise<void> {
    for (const [name, value] of Object.entries(changes)) {
      if (value === null) await this.secrets.delete(AUTH_NS, name, trx);
      else await this.secrets.set(AUTH_NS, name, JSON.stringify(value), trx);
    }
  }

  /** The API view: every field with its source and lock; secrets masked (never returned). */
  view(): Record<string, AuthSettingView> {
    const s = this.current();
    const out: Record<string, AuthSettingView> = {};
    for (const [name, f] of Object.entries(FIELDS)) {
      const locked = this.isLocked(name);
      const source: AuthSettingView['source'] = locked ? 'env' : name in this.stored ? 'store' : 'default';
      // a field holds a value of its kind (FIELDS), which is what the view's type lists
      const value = readSetting(s, name) as AuthSettingView['value'];
      const configured = value !== null && value !== undefined && value !== '';
      out[name] = {
        label: f.label,
        kind: f.kind,
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
  return FIELDS[name]!.path.reduce<unknown>((at, key) => (at as Record<string, unknown> | undefined)?.[key], s);
}

function writeSetting(s: AuthSettings, name: string, value: unknown): void {
  const path = FIELDS[name]!.path;
  const parent = path.slice(0, -1).reduce<Record<string, unknown>>((at, key) => at[key] as Record<string, unknown>, s as unknown as Record<string, unknown>);
  parent[path[path.length - 1]!] = value;
}
