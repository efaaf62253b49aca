import type { Middleware } from 'koa';
import Joi from 'joi';
import type { Knex } from 'knex';
import type { EventBus } from '../bus/bus.js';
import { concealingLogger, type Logger } from '../log.js';
import { errorText, fieldErrorsOf, fieldErrorsText, fieldRoot, withTimeout, type FieldError } from '../errors.js';
import type { CatalogEntry } from '../iam/permissions.js';
import type { ManifestRole } from '../iam/ledger.js';
import type { CommandPath } from '../iam/commands.js';
import type { SocketRegistry } from '../sockets/registry.js';
import type { SocketRequestHandler } from '../sockets/bus-handler.js';
import type { PluginManifest } from './manifest.js';
import { PluginContextImpl, SDK, type AuthChainLike } from './context.js';
import type { PluginSettings, SecretsLike } from './settings.js';
import type { PluginStore } from './store.js';
import { importPluginModule } from './loader.js';
import { routerDispatch } from './routing.js';
import { providerProblems } from './view.js';
import type { PluginModule, PluginState } from './types.js';

/**
 * A plugin as the host keeps it (PluginRecord) and its lifecycle: setup run with its timeout,
 * the plugin stopped and torn down, its state saved and announced; the settings checked against
 * the plugin's own rules; and what the host is given (PluginHostDeps, which the lifecycle uses).
 * The host (src/plugins/host.ts) decides when; this does it.
 */

export interface PluginHostDeps {
  pluginsDir: string;
  db: Knex;
  bus: EventBus;
  log: Logger;
  /** IAM: the permission catalog, the role ledger and the secrets store (plugin settings) */
  iam: {
    setPluginCatalog(pluginId: string, entries: CatalogEntry[], routes: string[]): void;
    removePluginCatalog(pluginId: string): void;
    ledger: { setPlugin(source: { id: string; roles?: ManifestRole[] }): void; removePlugin(id: string): void; applyAll(): Promise<void> };
    secrets: SecretsLike;
    /** an administrator's enabling, disabling and settings of a plugin are audit events (refusals too) */
    commands?: Pick<CommandPath, 'record' | 'run'>;
  };
  sockets: { registry: SocketRegistry; requests: { handle: SocketRequestHandler } };
  /** the login chain: plugin auth providers are removed from it when their plugin stops */
  authChain?: AuthChainLike | null;
  /** where SERVICE_PLUGIN_<ID>_<KEY> settings are read (process.env) */
  env?: NodeJS.ProcessEnv;
  /** this instance's name: administration done here is announced to the others under it */
  instanceId?: string;
  /** where a plugin's client events go: to the ws clients allowed to see them, on every instance */
  clientEvents?: {
    /** forwards a bus event to ws clients holding `permission`; returns what stops it */
    forward(topic: string, permission: string): () => void;
    /** makes a bus event cluster-wide (the bus bridge carries it to the other instances) */
    clusterWide(topic: string): void;
  };
  setupTimeoutMs?: number;
  teardownTimeoutMs?: number;
}

export interface Running {
  ctx: PluginContextImpl;
  module: PluginModule;
  dispatch: Middleware;
  /** stops forwarding its client events */
  unforward: Array<() => void>;
}

export interface PluginRecord {
  /** the manifest id, or the folder name when the manifest has no usable id */
  key: string;
  folder: string;
  manifest: PluginManifest | null;
  enabled: boolean;
  state: PluginState;
  error: string | null;
  updatedAt: number;
  /** the context while setup runs or the plugin runs (the registry policy reads it) */
  context: PluginContextImpl | null;
  /** the module last imported (its settingsSchema checks settings changes while the plugin is stopped) */
  module: PluginModule | null;
  running: Running | null;
  /** serialises enable / disable / settings changes of one plugin */
  queue: Promise<unknown>;
  announced: boolean;
}

/**
 * Settings against the plugin's own rules (its module's settingsSchema): the converted values,
 * or what is wrong, field by field. What is said of a secret setting that has a value is
 * generic: a plugin's message (a custom rule's, an exception's) could repeat it in any form; of
 * one without a value ("is required") it is the schema's words. Any message quoting a secret
 * value shows its name instead (concealSecrets). A schema that fails itself is a problem of the
 * settings as a whole, in words of our own.
 */
export function settingProblems(
  mod: PluginModule,
  manifest: PluginManifest,
  values: Record<string, string | null>,
): { value: Record<string, unknown>; problems: FieldError[] } {
  if (typeof mod.settingsSchema !== 'function') return { value: values, problems: [] };
  let checked: Joi.ValidationResult;
  try {
    const schema = mod.settingsSchema(SDK);
    if (!Joi.isSchema(schema)) throw new Error('settingsSchema did not return a joi schema');
    checked = schema.validate(values, { abortEarly: false, convert: true });
  } catch {
    return { value: values, problems: [{ field: 'settings', message: "cannot be checked: the plugin's settingsSchema failed" }] };
  }
  const problems = (checked.error ? fieldErrorsOf(checked.error, 'settings') : []).map((p) => {
    const root = fieldRoot(p.field);
    if (manifest.settings[root]?.secret && values[root])
      return { field: p.field, message: 'is not a value the plugin accepts (not shown: the setting is secret)' };
    return { field: p.field, message: concealSecrets(p.message, manifest, values) };
  });
  return { value: (checked.value ?? values) as Record<string, unknown>, problems };
}

export class PluginLifecycle {
  constructor(
    private readonly deps: PluginHostDeps,
    private readonly store: PluginStore,
    private readonly settings: PluginSettings,
    /** the routes of the running plugins changed: the document of them is made again */
    private readonly routesChanged: () => void,
  ) {}

  /** Runs setup; on success the plugin is `loaded` (or `degraded` when its declared providers are missing). */
  async start(rec: PluginRecord): Promise<void> {
    const m = rec.manifest!;
    let config: Record<string, string | null>;
    try {
      config = await this.settings.values(m);
    } catch (err) {
      await this.setState(rec, 'failed', `settings unreadable: ${errorText(err)}`);
      return;
    }
    let mod: PluginModule | null = null;
    let ctx: PluginContextImpl | null = null;
    // every line under the plugin's name, its own and the host's about it, shows no secret setting
    const log = concealingLogger(this.deps.log.child({ plugin: m.id }), (text) => concealSecrets(text, m, config, ctx?.settings ?? {}));
    try {
      mod = await importPluginModule(rec.folder, m.entry);
      rec.module = mod;
      // settings that break the plugin's own rules (set in the environment): it does not start
      const checked = settingProblems(mod, m, config);
      if (checked.problems.length) throw new Error(`invalid settings: ${fieldErrorsText(checked.problems)}`);
      ctx = new PluginContextImpl({
        manifest: m,
        config,
        settings: checked.value,
        log,
        bus: this.deps.bus,
        registry: this.deps.sockets.registry,
        socketRequests: this.deps.sockets.requests.handle,
        authChain: this.deps.authChain,
      });
      rec.context = ctx;
      await withTimeout(Promise.resolve(mod.setup(ctx)), this.deps.setupTimeoutMs ?? 10_000, 'setup');
    } catch (err) {
      // the plugin's own words may quote a setting: its secret ones are not shown (logs, the API)
      const reason = `setup failed: ${concealSecrets(errorText(err), m, config, ctx?.settings ?? {})}`;
      log.error({ reason }, 'plugin failed to start');
      if (ctx) await this.release(rec, ctx, mod);
      await this.setState(rec, 'failed', reason);
      return;
    }
    const unforward = m.client_events.map((e) => {
      this.deps.clientEvents?.clusterWide(e.topic);
      return this.deps.clientEvents?.forward(e.topic, e.permission) ?? (() => undefined);
    });
    rec.running = { ctx, module: mod, dispatch: routerDispatch(ctx.router, log), unforward };
    // its routes are new (a restart may bring other ones): the document is made again
    this.routesChanged();
    const problems = providerProblems(this.deps.sockets.registry, m);
    this.deps.iam.ledger.setPlugin({ id: m.id, roles: m.roles });
    await this.setState(rec, problems.length ? 'degraded' : 'loaded', problems.length ? problems.join('; ') : null);
    if (problems.length) log.warn({ reasons: problems }, 'plugin degraded');
    else log.info({ version: m.version }, 'plugin loaded');
  }

  /** Stops a plugin: routes first, then its teardown, then everything it attached. */
  async stop(rec: PluginRecord): Promise<void> {
    const running = rec.running;
    rec.running = null;
    this.routesChanged();
    for (const off of running?.unforward ?? []) off();
    this.deps.iam.ledger.removePlugin(rec.key);
    if (rec.context) await this.release(rec, rec.context, running?.module ?? null);
  }

  private async release(rec: PluginRecord, ctx: PluginContextImpl, mod: PluginModule | null): Promise<void> {
    const log = ctx.log;
    if (mod?.teardown) {
      try {
        await withTimeout(Promise.resolve(mod.teardown()), this.deps.teardownTimeoutMs ?? 5000, 'teardown');
      } catch (err) {
        log.warn({ reason: errorText(err) }, 'plugin teardown failed');
      }
    }
    ctx.close();
    await this.deps.sockets.registry.unregisterOwner(rec.key);
    for (const id of ctx.authProviderIds) this.deps.authChain?.unregister(id);
    if (rec.context === ctx) rec.context = null;
  }

  async setState(rec: PluginRecord, state: PluginState, error: string | null): Promise<void> {
    const changed = !rec.announced || rec.state !== state || rec.error !== error;
    rec.state = state;
    rec.error = error;
    rec.updatedAt = Date.now();
    await this.store.save({ id: rec.key, enabled: rec.enabled, version: rec.manifest?.version ?? null, state, error, updated_at: rec.updatedAt });
    if (!changed) return;
    rec.announced = true;
    this.routesChanged();
    this.deps.bus.emit('plugin:state_changed', { plugin_id: rec.key, state, enabled: rec.enabled });
  }
}

/**
 * `text` with the value of each of the plugin's secret settings replaced by its name, `[secret
 * token]`: as set (`config`), as the plugin's schema made it (`settings`), JSON-escaped and
 * URL-encoded; the longest first, so that a secret holding another is not half shown. A value
 * under 4 characters is not looked for: replacing it would mark ordinary text, and show it as well.
 */
export function concealSecrets(text: string, manifest: Pick<PluginManifest, 'settings'>, ...sources: Array<Readonly<Record<string, unknown>>>): string {
  const forms: Array<[string, string]> = [];
  for (const [key, def] of Object.entries(manifest.settings)) {
    if (!def.secret) continue;
    for (const source of sources) {
      const value = source[key];
      if (typeof value !== 'string') continue;
      for (const form of [value, JSON.stringify(value).slice(1, -1), encodeURIComponent(value)]) if (form.length >= 4) forms.push([form, key]);
    }
  }
  let out = text;
  for (const [form, key] of forms.sort((a, b) => b[0].length - a[0].length)) out = out.split(form).join(`[secret ${key}]`);
  return out;
}
