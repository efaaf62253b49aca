import type { EventBus } from '../bus/bus.js';
import { DomainError } from '../errors.js';
import { isUniqueViolation } from '../db/knex.js';
import { DEFAULT_GROUP_NAMES, requireKnownPermissions } from './permissions.js';
import { afreshOnFirstReach, holdsHostAccess, type Afresh, type EndEveryCredential } from './afresh.js';
import { addedHostPermissions, guardHostBoundary, guardOwnGrants, hostPermissionsOfGroups, isTrusted, reachesHost, type Actor } from './policy.js';
import type { Group, IamStore } from './store.js';
import type { CommandPath } from './commands.js';

const groupTarget = (name: string) => ({ type: 'group', id: name, name });

export interface GroupAdminDeps {
  store: IamStore;
  bus: EventBus;
  /** every change runs here: its event in its transaction, a refusal recorded */
  commands: CommandPath;
  isKnownPermission(p: string): boolean;
  /** before a trusted actor hands out host access: a fresh second factor (step-up) */
  requireStepUp?(actor: Actor): Promise<void>;
  /** do the login settings (default groups, mappings) name this group? */
  namedByLogin?(name: string): boolean;
  /** is `name` one of the groups whose members must use a second factor (mfa_required_groups)? */
  requiresSecondFactor?(name: string): boolean;
  /** a member starting afresh (src/iam/afresh.ts): the credentials area's part, and what ends after the commit */
  endEveryCredential: EndEveryCredential;
  passwordChanged(userId: string, keep: string | null): Promise<void>;
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

  async create(actor: Actor, input: { name: string; description?: string; permissions?: string[] }): Promise<Group> {
    return this.deps.commands.run({ action: 'group.created', actor, target: groupTarget(input.name) }, async () => {
      this.checkPermissions(input.permissions);
      const granted = await this.guardHostGrants(actor, [], input.permissions);
      await this.guardNameFree(input.name);
      // a name users still list (a membership written while the group was deleted) grants nothing: it must not start to
      await this.deps.store.forgetGroupName(input.name);
      let g: Group;
      try {
        g = await this.deps.commands.within(
          (trx) => this.deps.store.createGroup(input, trx),
          (created) => ({
            action: 'group.created',
            actor,
            target: groupTarget(created.name),
            details: { permissions: created.permissions, ...(granted.length ? { host_permissions: granted } : {}) },
          }),
        );
      } catch (err) {
        if (isUniqueViolation(err)) throw conflict(`group ${input.name} exists`);
        throw err;
      }
      this.changed(g.name);
      return g;
    });
  }

  async update(actor: Actor, group: Group, change: GroupChange): Promise<Group> {
    const { store } = this.deps;
    return this.deps.commands.run({ action: 'group.updated', actor, target: groupTarget(group.name) }, async () => {
      this.checkPermissions(change.permissions);
      const granted = await this.guardHostGrants(actor, group.permissions, change.permissions);
      const renaming = Boolean(change.name && change.name !== group.name);
      if (renaming) {
        if (DEFAULT_GROUP_NAMES.includes(group.name)) throw conflict(`built-in group ${group.name} cannot be renamed`);
        const hostPermissions = group.permissions.filter(reachesHost);
        guardHostBoundary(actor, hostPermissions, 'rename a group whose permissions reach the host');
        // a name is what logins map and rules name: renaming hands the group to whoever holds the
        // new name, and takes a rule that names the old one off its members
        guardOwnGrants(actor, group.permissions, 'rename a group whose permissions are not all');
        if (this.deps.requiresSecondFactor?.(group.name) && !isTrusted(actor))
          throw new DomainError('forbidden', `only a superadmin may rename ${group.name}: its members must use a second factor (mfa_required_groups)`);
        // the old name may be one a login maps to, or become one: renaming hands the host to whoever holds it
        if (hostPermissions.length) await this.deps.requireStepUp?.(actor);
        await this.guardNameFree(change.name!, group.name);
        await store.forgetGroupName(change.name!);
      }
      const name = renaming ? change.name! : group.name;
      let updated: Group;
      // members whose first access to the host this is start afresh (src/iam/afresh.ts)
      const afresh: Array<{ id: string; username: string } & Afresh> = [];
      try {
        updated = await this.deps.commands.within(
          async (trx) => {
            // the group locked, then, when the change adds a host permission to it as it stands now,
            // its members (a change of theirs waits, or has landed and is seen)
            const now = await store.lockGroup(group.name, trx);
            const adds = change.permissions ? addedHostPermissions(now?.permissions ?? [], change.permissions) : [];
            const members = adds.length ? await store.membersOf(group.name, trx, true) : [];
            const reached = await Promise.all(members.map((m) => holdsHostAccess(store, m, trx)));
            if (renaming) await store.renameOrDeleteGroup(group.name, name, trx);
            await store.updateGroup(name, { description: change.description, permissions: change.permissions }, trx);
            for (const [i, m] of members.entries()) {
              const ended = await afreshOnFirstReach(store, trx, m.id, reached[i], this.deps.endEveryCredential);
              if (ended) afresh.push({ id: m.id, username: m.username, ...ended });
            }
            return (await store.group(name, trx))!;
          },
          (g) => ({
            action: 'group.updated',
            actor,
            target: groupTarget(g.name),
            details: {
              fields: Object.keys(change).filter((k) => change[k as keyof GroupChange] !== undefined),
              ...(renaming ? { previous_name: group.name } : {}),
              ...(change.permissions ? { permissions: g.permissions, previous_permissions: group.permissions } : {}),
              ...(granted.length ? { host_permissions: granted } : {}),
              ...(afresh.length ? { members_started_afresh: afresh.map(({ id: _id, ...rest }) => rest) } : {}),
            },
          }),
        );
      } catch (err) {
        if (isUniqueViolation(err)) throw conflict(`group ${change.name} exists`);
        throw err;
      }
      for (const m of afresh) await this.deps.passwordChanged(m.id, null);
      if (renaming) this.changed(group.name);
      this.changed(name);
      return updated;
    });
  }

  /**
   * Deleting takes access away: open to every administrator of groups (built-in ones stay), but
   * for a group that reaches the host and that the login settings name: its deletion would
   * unlock those settings (src/auth/settings-change.ts) while the mapping still points at the name.
   */
  async remove(actor: Actor, group: Group): Promise<void> {
    await this.deps.commands.run({ action: 'group.deleted', actor, target: groupTarget(group.name) }, async () => {
      if (DEFAULT_GROUP_NAMES.includes(group.name)) throw conflict(`built-in group ${group.name} cannot be deleted`);
      if (this.deps.namedByLogin?.(group.name))
        guardHostBoundary(actor, group.permissions.filter(reachesHost), 'delete a group that reaches the host while the login settings name it');
      await this.deps.commands.within(
        (trx) => this.deps.store.renameOrDeleteGroup(group.name, null, trx),
        (members) => ({
          action: 'group.deleted',
          actor,
          target: groupTarget(group.name),
          details: { permissions: group.permissions, members: members.length },
        }),
      );
      this.changed(group.name);
    });
  }

  private changed(group: string): void {
    this.deps.bus.emit('iam:permissions_changed', { scope: 'group', group });
  }

  private checkPermissions(perms: string[] | undefined): void {
    requireKnownPermissions('permissions', perms, (p) => this.deps.isKnownPermission(p));
  }

  /** A name no other group holds, in any case (INT_ADMIN and int_admin would read as one in a list, a mapping, an event). */
  private async guardNameFree(name: string, renaming?: string): Promise<void> {
    const held = await this.deps.store.groupInAnyCase(name);
    if (!held || held.name === renaming) return;
    throw conflict(held.name === name ? `group ${name} exists` : `group ${held.name} exists: group names must differ in more than case`);
  }

  /** Host permissions added to a group: a trusted actor's grant only, with a fresh second factor; answers them (the event says it). */
  private async guardHostGrants(actor: Actor, before: string[], after: string[] | undefined): Promise<string[]> {
    const granted = after ? addedHostPermissions(before, after) : [];
    guardHostBoundary(actor, granted, 'grant permissions that reach the host');
    // every member gets what the group gets
    guardOwnGrants(
      actor,
      (after ?? []).filter((p) => !before.includes(p)),
      'give a group permissions',
    );
    if (granted.length === 0) return [];
    await this.deps.requireStepUp?.(actor);
    return granted;
  }
}
