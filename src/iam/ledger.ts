import type { PluginRole } from '../client/api-types.js';
import type { IamStore } from './store.js';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { DEFAULT_GROUP_NAMES } from './permissions.js';
import { reachesHost, SERVICE_ACTOR } from './policy.js';
import type { CommandPath } from './commands.js';

/** A role a plugin's manifest declares: the API's view of it (PluginRole) before the manifest fills in its defaults. */
export type ManifestRole = Pick<PluginRole, 'id' | 'permissions'> & Partial<Pick<PluginRole, 'label' | 'auto_map_groups'>>;

export interface PluginGrantSource {
  id: string;
  roles?: ManifestRole[];
}

/**
 * The role grant ledger: each (group, permission) a plugin grants is applied exactly once and
 * recorded in role_grants, so an administrator's later revocation is never re-applied.
 */
export class RoleLedger {
  /** the plugins whose grants apply (the plugin host keeps this current) */
  private readonly sources = new Map<string, PluginGrantSource>();

  constructor(
    private readonly store: IamStore,
    private readonly bus: EventBus,
    private readonly log: Logger,
    /** each grant runs here: the group's change and its event (by the service) in one transaction */
    private readonly commands: CommandPath,
  ) {
    // boot applies the grants before it completes (src/service.ts), again at boot_complete and
    // whenever a plugin changes state; the ledger makes the repetition harmless, and what a pass
    // the database refused is applied by the next one
    const again = () =>
      void this.applyAll().catch((err: unknown) =>
        this.log.warn({ reason: (err as Error).message }, 'plugin role grants not applied; the next plugin change or start applies them'),
      );
    bus.on('plugin:state_changed', again);
    bus.on('system:boot_complete', again);
  }

  setPlugin(source: PluginGrantSource): void {
    this.sources.set(source.id, source);
  }

  removePlugin(id: string): void {
    this.sources.delete(id);
  }

  private running: Promise<void> | null = null;
  private again = false;

  /**
   * Applies every known plugin's grants. Triggers that arrive while a pass runs are coalesced
   * into one more pass, so passes never overlap; the promise settles when no pass is pending.
   */
  applyAll(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    let pass!: Promise<void>;
    // eslint-disable-next-line prefer-const -- the pass reads itself in its finally: TypeScript needs it declared first
    pass = (async () => {
      // yield first, so `running` is set before a pass with nothing to do can finish
      await Promise.resolve();
      try {
        do {
          this.again = false;
          for (const source of [...this.sources.values()]) await this.applyPlugin(source);
        } while (this.again);
      } finally {
        if (this.running === pass) this.running = null;
      }
    })();
    this.running = pass;
    return pass;
  }

  /** Waits for a pass in progress (shutdown must not cut it off mid-query). */
  async idle(): Promise<void> {
    while (this.running) await this.running.catch(() => undefined);
  }

  /** Baseline per-plugin grants plus the plugin's ManifestRoles. Returns the grants newly applied. */
  async applyPlugin(plugin: PluginGrantSource): Promise<{ group: string; permission: string }[]> {
    const id = plugin.id;
    const wanted: { role: string; group: string; permission: string }[] = [];
    for (const g of DEFAULT_GROUP_NAMES) {
      wanted.push({ role: 'baseline', group: g, permission: `plugin:${id}` });
      wanted.push({ role: 'baseline', group: g, permission: `plugin:${id}:api:read` });
    }
    for (const g of ['INT_USER', 'INT_ADMIN']) wanted.push({ role: 'baseline', group: g, permission: `plugin:${id}:api:write` });
    for (const role of plugin.roles ?? []) {
      // a role grants only its plugin's own ids (src/plugins/manifest.ts); never one that reaches the host
      for (const g of role.auto_map_groups ?? [])
        for (const p of role.permissions) if (!reachesHost(p)) wanted.push({ role: role.id, group: g, permission: p });
    }
    const applied: { group: string; permission: string }[] = [];
    for (const w of wanted) if (await this.grantOnce(id, w.role, w.group, w.permission)) applied.push({ group: w.group, permission: w.permission });
    if (applied.length) this.bus.emit('iam:permissions_changed', { scope: 'all' });
    return applied;
  }

  /** Records (group, permission) in the ledger and adds it to the group, unless recorded before. */
  async grantOnce(pluginId: string, roleId: string, group: string, permission: string): Promise<boolean> {
    // recorded before (every pass after the first, on every instance): nothing to write, so no
    // write lock is taken; on SQLite, instances booting together on one file would otherwise
    // queue for its one writer at every pass
    if (await this.store.db('role_grants').where({ group_name: group, permission }).first('id')) return false;
    return this.commands.within(
      async (trx) => {
        const locked = await this.store.lockGroup(group, trx);
        if (!locked) return false; // a group that does not exist gets nothing, and nothing is recorded
        const inserted = await trx('role_grants')
          .insert({ plugin_id: pluginId, role_id: roleId, group_name: group, permission, granted_at: Date.now() })
          .onConflict(['group_name', 'permission'])
          .ignore()
          .returning('id');
        if (!inserted.length) return false;
        if (!locked.permissions.includes(permission)) await this.store.updateGroup(group, { permissions: [...locked.permissions, permission] }, trx);
        return true;
      },
      (granted) =>
        granted
          ? {
              action: 'group.updated',
              actor: SERVICE_ACTOR,
              target: { type: 'group', id: group, name: group },
              details: { permissions_added: [permission], plugin: pluginId, role: roleId, via: 'role_ledger' },
            }
          : null,
    );
  }
}
