import type { Actor } from '../iam/policy.js';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import type { Middleware } from 'koa';
import { DomainError, fieldErrorsText, withTimeout } from '../errors.js';
import { pluginCatalog, type PluginManifest } from './manifest.js';
import { PluginSettings } from './settings.js';
import { PluginStore } from './store.js';
import { importPluginModule, readManifest } from './loader.js';
import { pluginRoutes, routeEndpoints } from './routing.js';
import type { Endpoint } from '../http/api.js';
import { pluginView } from './view.js';
import type { PluginView } from './types.js';
import { PluginLifecycle, settingProblems, type PluginHostDeps, type PluginRecord } from './lifecycle.js';

export type { PluginView };
export type { PluginHostDeps };

export class PluginNotFoundError extends DomainError {
  constructor(message: string) {
    super('not_found', message);
  }
}
export class PluginConflictError extends DomainError {
  constructor(message: string) {
    super('conflict', message);
  }
}

/**
 * The plugin host: scans SERVICE_PLUGINS_DIR after iam:ready, validates each manifest, runs
 * each plugin's setup in isolation, records state in the database and announces every change
 * with plugin:state_changed (which also makes IAM apply the plugin's grants once).
 */
export class PluginHost {
  private readonly records = new Map<string, PluginRecord>();
  private readonly store: PluginStore;
  readonly settings: PluginSettings;
  /** starts and stops the plugins, saves and announces their state (src/plugins/lifecycle.ts) */
  private readonly lifecycle: PluginLifecycle;
  private loaded = false;
  private closing = false;

  constructor(private readonly deps: PluginHostDeps) {
    this.store = new PluginStore(deps.db);
    this.settings = new PluginSettings(deps.iam.secrets, deps.env ?? process.env);
    this.lifecycle = new PluginLifecycle(deps, this.store, this.settings, () => this.routesVersion++);
    // socket rule 3: a plugin registers only the providers its manifest declares, by either path
    // (ctx.registerSocketProvider or the socket:provider:register event)
    deps.sockets.registry.setPolicy((owner, name) => {
      if (owner === 'core') return true;
      const rec = this.records.get(owner);
      if (!rec?.manifest || !rec.context || rec.context.closed) return `plugin ${owner} is not running`;
      if (!rec.manifest.socket_providers.provides.includes(name)) {
        return `plugin ${owner} does not declare socket provider ${name} in socket_providers.provides`;
      }
      return true;
    });
    // an administrator acted on another instance: this one follows what the database says (the
    // row is written before the message goes out), never the message's word alone: a message
    // replayed to an instance that started since cannot turn a disabled plugin back on
    deps.bus.on('plugin:admin_changed', ({ plugin_id, action, instance }) => {
      if (instance === this.instanceId || !this.records.has(plugin_id)) return;
      const follow = async () => {
        const enabled = (await this.store.all()).get(plugin_id)?.enabled ?? false;
        if (!enabled) await this.disable(null, plugin_id);
        else if (action === 'restart') await this.restart(plugin_id);
        else await this.enable(null, plugin_id);
      };
      follow().catch((err) => deps.log.warn({ plugin: plugin_id, action, reason: (err as Error).message }, 'following a plugin change made elsewhere failed'));
    });
  }

  /** An administrator's change of a plugin, for the audit trail (a change followed from another instance is that instance's event). */
  private recordChange(actor: Actor, id: string, action: 'plugin.state_changed' | 'settings.changed', details: Record<string, unknown>): void {
    this.deps.iam.commands?.record({ action, actor, target: { type: 'plugin', id, name: this.records.get(id)?.manifest?.name ?? id }, details });
  }

  private get instanceId(): string {
    return this.deps.instanceId ?? 'local';
  }

  private announce(plugin_id: string, action: 'enable' | 'disable' | 'restart'): void {
    this.deps.bus.emit('plugin:admin_changed', { plugin_id, action, instance: this.instanceId });
  }

  get ready(): boolean {
    return this.loaded;
  }

  /** Scans the plugins folder and starts every enabled plugin. Returns the ids now running. */
  async loadAll(): Promise<string[]> {
    const { log, pluginsDir } = this.deps;
    const rows = await this.store.all();
    let folders: string[] = [];
    try {
      const entries = await fsp.readdir(pluginsDir, { withFileTypes: true });
      folders = entries
        .filter((e) => (e.isDirectory() || e.isSymbolicLink()) && !e.name.startsWith('.'))
        .map((e) => e.name)
        .sort();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') log.info({ dir: pluginsDir }, 'no plugins folder; no plugins loaded');
      else log.error({ dir: pluginsDir, reason: (err as Error).message }, 'cannot read the plugins folder; no plugins loaded');
    }
    for (const name of folders) {
      if (this.closing) break; // the service stops while plugins load
      const folder = path.join(pluginsDir, name);
      const rec = await this.discover(name, folder);
      if (!rec) continue;
      const row = rows.get(rec.key);
      rec.enabled = row ? row.enabled : true;
      this.records.set(rec.key, rec);
      if (!rec.manifest) {
        await this.lifecycle.setState(rec, 'failed', rec.error);
        continue;
      }
      this.deps.iam.setPluginCatalog(
        rec.key,
        pluginCatalog(rec.manifest),
        rec.manifest.routes.map((r) => r.path),
      );
      if (rec.enabled) await this.lifecycle.start(rec);
      else await this.lifecycle.setState(rec, 'disabled', null);
    }
    this.loaded = true;
    const running = [...this.records.values()].filter((r) => r.running).map((r) => r.key);
    log.info({ plugins: running, failed: [...this.records.values()].filter((r) => r.state === 'failed').map((r) => r.key) }, 'plugins loaded');
    return running;
  }

  /** Reads and validates one folder's plugin.json; null when the folder holds no plugin. */
  private async discover(name: string, folder: string): Promise<PluginRecord | null> {
    const blank = (key: string, error: string | null, manifest: PluginManifest | null): PluginRecord => ({
      key,
      folder,
      manifest,
      enabled: true,
      state: 'failed',
      error,
      updatedAt: Date.now(),
      context: null,
      module: null,
      running: null,
      queue: Promise.resolve(),
      announced: false,
    });
    const read = await readManifest(folder);
    if (read.kind === 'none') {
      this.deps.log.warn({ folder }, 'folder in the plugins folder has no plugin.json; skipped');
      return null;
    }
    if (read.kind === 'ok') {
      const existing = this.records.get(read.manifest.id);
      if (existing) return blank(this.freeKey(name), `duplicate plugin id ${read.manifest.id} (already in ${path.basename(existing.folder)})`, null);
      return blank(read.manifest.id, null, read.manifest);
    }
    // a usable id names the failed plugin in lists and logs; else the folder does
    const key = read.rawId && !this.records.has(read.rawId) ? read.rawId : this.freeKey(name);
    if (read.rawId !== undefined) this.deps.log.error({ plugin: key, folder, reason: read.error }, 'plugin manifest rejected');
    return blank(key, read.error, null);
  }

  private freeKey(name: string): string {
    let key = name;
    for (let n = 2; this.records.has(key); n++) key = `${name}~${n}`;
    return key;
  }

  private serial<T>(rec: PluginRecord, work: () => Promise<T>): Promise<T> {
    const run = rec.queue.then(work, work);
    rec.queue = run.catch(() => undefined);
    return run;
  }

  private record(id: string): PluginRecord {
    const rec = this.records.get(id);
    if (!rec) throw new PluginNotFoundError(`plugin ${id} not found`);
    return rec;
  }

  /** Enables and starts a plugin here; `announce`: the other instances follow. */
  async enable(actor: Actor | null, id: string): Promise<PluginView> {
    const rec = this.record(id);
    if (!rec.manifest) throw new PluginConflictError(`plugin ${id} cannot be enabled: ${rec.error}`);
    await this.serial(rec, async () => {
      if (rec.running) return;
      rec.enabled = true;
      await this.lifecycle.start(rec);
    });
    await this.deps.iam.ledger.applyAll();
    // an administrator's change (the others follow); null: following one made elsewhere
    if (actor) {
      this.announce(id, 'enable');
      this.recordChange(actor, id, 'plugin.state_changed', { enabled: true, state: rec.state });
    }
    return this.view(rec);
  }

  /** Stops and disables a plugin here; `announce`: the other instances follow. */
  async disable(actor: Actor | null, id: string): Promise<PluginView> {
    const rec = this.record(id);
    await this.serial(rec, async () => {
      rec.enabled = false;
      if (rec.running || rec.context) await this.lifecycle.stop(rec);
      await this.lifecycle.setState(rec, rec.manifest ? 'disabled' : 'failed', rec.manifest ? null : rec.error);
    });
    if (actor) {
      this.announce(id, 'disable');
      this.recordChange(actor, id, 'plugin.state_changed', { enabled: false, state: rec.state });
    }
    return this.view(rec);
  }

  /**
   * Stores settings and restarts the plugin when it is enabled, so it sees the new values (here
   * and everywhere). The values as they would be after the change must pass the plugin's own
   * rules (its module's settingsSchema) first: else 400 naming each field, nothing is stored
   * and a running plugin keeps running. A `trusted_only` setting is a superadmin's or the
   * system key's to change (403 for a plain administrator, recorded denied).
   */
  async updateSettings(actor: Actor, id: string, changes: Record<string, string | null>): Promise<PluginView> {
    const rec = this.record(id);
    const m = rec.manifest;
    if (!m) throw new PluginConflictError(`plugin ${id} has no valid manifest: ${rec.error}`);
    // a refusal (a setting only a trusted actor changes) is recorded denied by the command path
    const command = { action: 'settings.changed' as const, actor, target: { type: 'plugin', id, name: m.name } };
    const run = <T>(body: () => Promise<T>) => (this.deps.iam.commands ? this.deps.iam.commands.run(command, body) : body());
    // checked and stored in one turn of the plugin's queue: two changes at once are each checked
    // against what the other stored
    await run(() =>
      this.serial(rec, async () => {
        // the service's rules (declared keys, the environment's locks, the trusted actors' settings, secrets sent to a new place) first
        await this.settings.check(actor, m, changes);
        const mod =
          rec.running?.module ??
          rec.module ??
          (await withTimeout(importPluginModule(rec.folder, m.entry), this.deps.setupTimeoutMs ?? 10_000, 'import').catch(() => null));
        // a module that cannot be imported has no rules to check against (and fails its start anyway)
        if (mod) {
          rec.module = mod;
          const checked = settingProblems(mod, m, await this.settings.valuesAfter(m, changes));
          if (checked.problems.length) throw new DomainError('validation_failed', fieldErrorsText(checked.problems), checked.problems);
        }
        await this.settings.update(m, changes);
      }),
    );
    // the names of the settings, never their values (a plugin's secrets among them)
    this.recordChange(actor, id, 'settings.changed', { fields: Object.keys(changes) });
    const view = await this.restart(id);
    this.announce(id, 'restart');
    return view;
  }

  /** An enabled plugin starts again with the settings as stored now (a failed one gets another try). */
  private async restart(id: string): Promise<PluginView> {
    const rec = this.record(id);
    await this.serial(rec, async () => {
      if (!rec.enabled || !rec.manifest) return;
      if (rec.running || rec.context) await this.lifecycle.stop(rec);
      await this.lifecycle.start(rec);
    });
    return this.view(rec);
  }

  manifestOf(id: string): PluginManifest | null {
    return this.record(id).manifest;
  }

  list(): PluginView[] {
    return [...this.records.values()].map((r) => this.view(r));
  }

  get(id: string): PluginView {
    return this.view(this.record(id));
  }

  private view(rec: PluginRecord): PluginView {
    const registry = this.deps.sockets.registry;
    return pluginView(
      rec,
      registry.names().filter((n) => registry.ownerOf(n) === rec.key),
    );
  }

  /** changes whenever a plugin starts or stops: the routes documented below changed */
  private routesVersion = 0;

  /** The routes of every running plugin, for the OpenAPI document (src/plugins/routing.ts). */
  documentedRoutes(): { version: number; endpoints: Endpoint[] } {
    // a route a plugin adds after its setup counts as a change too
    let layers = 0;
    for (const rec of this.records.values()) layers += rec.running?.ctx.router.stack.length ?? 0;
    if (this.documented && this.documented.layers !== layers) this.routesVersion++;
    if (this.documented?.version !== this.routesVersion) {
      const endpoints = [...this.records.values()].flatMap((rec) => (rec.running ? routeEndpoints(rec.key, rec.manifest!.name, rec.running.ctx.router) : []));
      this.documented = { version: this.routesVersion, layers, endpoints };
    }
    return this.documented;
  }

  private documented: { version: number; layers: number; endpoints: Endpoint[] } | null = null;

  /** The one dispatch middleware of every running plugin's routes (src/plugins/routing.ts). */
  middleware(): Middleware {
    return pluginRoutes((id) => this.records.get(id)?.running?.dispatch ?? null);
  }

  /**
   * Stops every running plugin (service shutdown), all at once: each teardown may take its whole
   * timeout, and one after another they would overrun the stop's 10 s. The enabled flags stay as
   * they are.
   */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    await Promise.all(
      [...this.records.values()].map(async (rec) => {
        await rec.queue.catch(() => undefined);
        if (rec.running || rec.context) await this.lifecycle.stop(rec);
      }),
    );
  }
}
