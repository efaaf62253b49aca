import type { EventBus } from '../bus/bus.js';
import { DomainError } from '../errors.js';
import type { Logger } from '../log.js';
import { isUniqueViolation } from '../db/knex.js';
import { DEFAULT_GROUP_NAMES, requireKnownPermissions } from './permissions.js';
import { addedHostPermissions, guardHostBoundary, hostPermissionsOfGroups, reachesHost, type Actor } from './policy.js';
import type { Group, IamStore } from './store.js';

export interface GroupAdminDeps {
  store: IamStore;
  bus: EventBus;
  isKnownPermission(p: string): boolean;
}

/** A change to a group (already validated in shape: patchGroupSchema). */
export interface GroupChange {
  name?: string;
  description?: string;
  permissions?: string[];
}

const conflict = (message: string) => new DomainError('conflict', message);

/**
 * The only writer of groups, for the admin API and the CLI: permissions must exist, built-in
 * groups keep their names, and (the host boundary, src/iam/policy.ts) only a trusted actor adds
 * a permission that reaches the host or renames a group holding one: a new name may be one a
 * login mapping, the SSO default groups or a plugin role already points at.
 */
export class GroupAdmin {
  constructor(private readonly deps: GroupAdminDeps) {}

  async find(name: string): Promise<Group> {
    const g = await this.deps.store.group(name);
    if (!g) throw new DomainError('not_found', `no group named ${name}`);
    return g;
  }

  /** The permissions reaching the host that the groups `names` hold now (for login settings that name them). */
  async hostPermissionsOf(names: readonly string[]): Promise<string[]> {
    if (names.length === 0) return [];
    return hostPermissionsOfGroups(await this.deps.store.groupsNamed(names), names);
  }

  async create(actor: Actor, input: { name: string; description?: string; permissions?: string[] }, log: Logger): Promise<Group> {
    this.checkPermissions(input.permissions);
    const audit = this.guardHostGrants(actor, [], input.permissions, log);
    if (await this.deps.store.group(input.name)) throw conflict(`group ${input.name} exists`);
    let g: Group;
    try {
      g = await this.deps.store.createGroup(input);
    } catch (err) {
      if (isUniqueViolation(err)) throw conflict(`group ${input.name} exists`);
      throw err;
    }
    audit(g.name);
    return g;
  }

  async update(actor: Actor, group: Group, change: GroupChange, log: Logger): Promise<Group> {
    const { store } = this.deps;
    this.checkPermissions(change.permissions);
    const audit = this.guardHostGrants(actor, group.permissions, change.permissions, log);
    let name = group.name;
    if (change.name && change.name !== group.name) {
      if (DEFAULT_GROUP_NAMES.includes(group.name)) throw conflict(`built-in group ${group.name} cannot be renamed`);
      guardHostBoundary(actor, group.permissions.filter(reachesHost), 'rename a group whose permissions reach the host');
      if (await store.group(change.name)) throw conflict(`group ${change.name} exists`);
      try {
        await store.renameOrDeleteGroup(group.name, change.name);
      } catch (err) {
        if (isUniqueViolation(err)) throw conflict(`group ${change.name} exists`);
        throw err;
      }
      this.changed(group.name);
      name = change.name;
    }
    await store.updateGroup(name, { description: change.description, permissions: change.permissions });
    this.changed(name);
    audit(name);
    return (await store.group(name))!;
  }

  /** Deleting takes access away: open to every administrator of groups (built-in ones stay). */
  async remove(_actor: Actor, group: Group): Promise<void> {
    if (DEFAULT_GROUP_NAMES.includes(group.name)) throw conflict(`built-in group ${group.name} cannot be deleted`);
    await this.deps.store.renameOrDeleteGroup(group.name, null);
    this.changed(group.name);
  }

  private changed(group: string): void {
    this.deps.bus.emit('iam:permissions_changed', { scope: 'group', group });
  }

  private checkPermissions(perms: string[] | undefined): void {
    requireKnownPermissions('permissions', perms, (p) => this.deps.isKnownPermission(p));
  }

  /** Host permissions added to a group: a trusted actor's grant only, logged as an audit line. */
  private guardHostGrants(actor: Actor, before: string[], after: string[] | undefined, log: Logger): (group: string) => void {
    const granted = after ? addedHostPermissions(before, after) : [];
    if (granted.length === 0) return () => undefined;
    guardHostBoundary(actor, granted, 'grant permissions that reach the host');
    return (group) => log.info({ audit: 'host_permission_granted', actor: actor.username, group, permissions: granted }, 'audit: host permission granted');
  }
}
