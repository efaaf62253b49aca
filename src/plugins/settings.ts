import type { PluginManifest } from './manifest.js';

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

  /** Stores (string) or removes (null) values; the caller checked keys and locks. */
  async update(m: PluginManifest, changes: Record<string, string | null>): Promise<void> {
    const ns = settingsNamespace(m.id);
    for (const [key, value] of Object.entries(changes)) {
      if (value === null) await this.secrets.delete(ns, key);
      else await this.secrets.set(ns, key, value);
    }
  }

  isLocked(m: PluginManifest, key: string): boolean {
    const v = this.env[settingEnvName(m.id, key)];
    return v !== undefined && v !== '';
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
