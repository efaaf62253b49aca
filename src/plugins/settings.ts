import type { PluginManifest } from './manifest.js';
import { DomainError, fieldError, fieldErrorsText, type FieldError } from '../errors.js';
import { isTrusted, type Actor } from '../iam/policy.js';

/**
 * Plugin settings. A plugin declares each key in its manifest (`settings`); the value comes from,
 * in order: the environment variable SERVICE_PLUGIN_<ID>_<KEY> (locked: the API cannot change
 * it), the settings API (stored encrypted in the secrets store, namespace plugins/<id>), the
 * manifest default. Only declared keys are read, so a plugin never sees other variables.
 */

export interface SecretsLike {
  getAll(namespace: string): Promise<Record<string, string>>;
  set(namespace: string, key: string, value: string): Promise<void>;
  delete(namespace: string, key: string): Promise<void>;
  /** refuses (409) when the database's master key is no longer this instance's */
  assertCurrent(): Promise<void>;
}

export type SettingSource = 'env' | 'store' | 'default' | 'unset';

export interface ResolvedSetting {
  key: string;
  description: string;
  secret: boolean;
  value: string | null;
  source: SettingSource;
}

export const settingsNamespace = (pluginId: string) => `plugins/${pluginId}`;

/** SERVICE_PLUGIN_<ID>_<KEY>, every character outside A-Z 0-9 turned into `_`. */
export function settingEnvName(pluginId: string, key: string): string {
  const up = (s: string) => s.toUpperCase().replace(/[^A-Z0-9]/g, '_');
  return `SERVICE_PLUGIN_${up(pluginId)}_${up(key)}`;
}

export class PluginSettings {
  constructor(
    private readonly secrets: SecretsLike,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  async resolve(m: PluginManifest): Promise<ResolvedSetting[]> {
    const stored = await this.secrets.getAll(settingsNamespace(m.id));
    return Object.entries(m.settings).map(([key, def]) => {
      const fromEnv = this.env[settingEnvName(m.id, key)];
      let value: string | null = null;
      let source: SettingSource = 'unset';
      if (fromEnv !== undefined && fromEnv !== '') {
        value = fromEnv;
        source = 'env';
      } else if (Object.prototype.hasOwnProperty.call(stored, key)) {
        value = stored[key];
        source = 'store';
      } else if (def.default !== null) {
        value = def.default;
        source = 'default';
      }
      return { key, description: def.description, secret: def.secret, value, source };
    });
  }

  async values(m: PluginManifest): Promise<Record<string, string | null>> {
    return Object.fromEntries((await this.resolve(m)).map((s) => [s.key, s.value]));
  }

  /** The values the plugin would read once `changes` are stored (null: back to the manifest default). */
  async valuesAfter(m: PluginManifest, changes: Record<string, string | null>): Promise<Record<string, string | null>> {
    const now = await this.values(m);
    for (const [key, value] of Object.entries(changes)) {
      // a locked key is refused by check(); the environment would win anyway
      if (this.isLocked(m, key) || !Object.prototype.hasOwnProperty.call(m.settings, key)) continue;
      now[key] = value ?? m.settings[key]!.default;
    }
    return now;
  }

  /** Stores (string) or removes (null) values; `check` has passed. */
  async update(m: PluginManifest, changes: Record<string, string | null>): Promise<void> {
    const ns = settingsNamespace(m.id);
    // all or nothing on an instance whose master key was rotated under it (each set() would refuse, the deletes before it not)
    await this.secrets.assertCurrent();
    for (const [key, value] of Object.entries(changes)) {
      if (value === null) await this.secrets.delete(ns, key);
      else await this.secrets.set(ns, key, value);
    }
  }

  /**
   * Checks a change before it is stored: only declared keys, none the environment locks (409),
   * a `trusted_only` setting (and, while it is not at its default, those it `guards`) changed by
   * a trusted actor only (403), and a stored secret never follows an endpoint it was not set for:
   * when a setting a secret is `sent_to` takes another value while the secret has one and is not
   * entered again, 400 on it.
   */
  async check(actor: Actor, m: PluginManifest, changes: Record<string, string | null>): Promise<void> {
    for (const key of Object.keys(changes)) {
      if (!Object.prototype.hasOwnProperty.call(m.settings, key)) throw fieldError(key, `is not a setting of plugin ${m.id}`);
      if (this.isLocked(m, key))
        throw new DomainError('conflict', `setting ${key} is set in the environment and cannot be changed here`, [
          { field: key, message: `is set in the environment (${settingEnvName(m.id, key)})` },
        ]);
    }
    const before = await this.values(m);
    if (!isTrusted(actor)) guardTrusted(m, changes, before);
    const after = (key: string) => (key in changes ? (changes[key] ?? m.settings[key]!.default) : before[key]);
    const problems: FieldError[] = [];
    for (const [key, def] of Object.entries(m.settings)) {
      const moved = def.sent_to.filter((target) => after(target) !== before[target]);
      if (!moved.length || key in changes || before[key] === null || before[key] === '') continue;
      problems.push({
        field: key,
        message: this.isLocked(m, key)
          ? `is set in the environment (${settingEnvName(m.id, key)}): change ${moved.join(' and ')} there, together with it`
          : `must be entered again when ${moved.join(' or ')} changes`,
      });
    }
    if (problems.length) throw new DomainError('validation_failed', fieldErrorsText(problems), problems);
  }

  isLocked(m: PluginManifest, key: string): boolean {
    const v = this.env[settingEnvName(m.id, key)];
    return v !== undefined && v !== '';
  }
}

/**
 * What only a trusted actor changes: a `trusted_only` setting widens what the plugin may reach,
 * and the settings it guards are what it was allowed for (else a plain administrator would point
 * an allowance a superadmin gave one receiver at another). 403 naming the first such field.
 */
function guardTrusted(m: PluginManifest, changes: Record<string, string | null>, before: Record<string, string | null>): void {
  for (const [key, def] of Object.entries(m.settings)) {
    if (!def.trusted_only) continue;
    const refuse = (field: string, message: string) => {
      throw new DomainError('forbidden', `${field}: ${message}`, [{ field, message }]);
    };
    if (key in changes) refuse(key, 'only a superadmin or the system key may change it');
    const on = before[key] !== def.default;
    const moved = (def.guards ?? []).find((g) => g in changes);
    if (on && moved) refuse(moved, `only a superadmin or the system key may change it while ${key} is set`);
  }
}

/** The API view: secret values are never shown, only whether one is configured. */
export function settingsView(settings: ResolvedSetting[]) {
  return settings.map((s) => ({
    key: s.key,
    description: s.description,
    secret: s.secret,
    value: s.secret ? null : s.value,
    configured: s.value !== null && s.value !== '',
    source: s.source,
    locked: s.source === 'env',
  }));
}
