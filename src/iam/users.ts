import type { EventBus } from '../bus/bus.js';
import { DomainError, fieldError } from '../errors.js';
import type { Logger } from '../log.js';
import { isUniqueViolation } from '../db/knex.js';
import { ADMIN_GROUP, requireKnownPermissions } from './permissions.js';
import type { Passwords } from './passwords.js';
import { addedHostPermissions, hostPermissionsOfGroups, isProtectedAccount, isTrusted, type Actor } from './policy.js';
import type { IamStore, User } from './store.js';

/** What a user is created with (already validated in shape: createUserSchema). */
export interface NewUserInput {
  username: string;
  password?: string;
  email?: string | null;
  displayName?: string | null;
  groups?: string[];
  extraPermissions?: string[];
  roles?: string[];
}

/** A change to a user (already validated in shape: patchUserSchema). */
export interface UserChange {
  email?: string | null;
  displayName?: string | null;
  groups?: string[];
  extraPermissions?: string[];
  roles?: string[];
  disabled?: boolean;
  password?: string;
}

export interface UserAdminDeps {
  store: IamStore;
  passwords: Passwords;
  bus: EventBus;
  isKnownPermission(p: string): boolean;
  /** ends the user's web sessions but `keep` and drops what the old password proved */
  passwordChanged(userId: string, keep: string | null): Promise<void>;
}

const refused = (message: string) => new DomainError('forbidden', message);

/**
 * Creating, changing and deleting users under the rules every caller obeys (the admin API and
 * the CLI alike): groups and permissions must exist, INT_ADMIN keeps an enabled member,
 * protected accounts and host permissions are changed only by a trusted actor, and each host
 * grant is an audit line. Errors are DomainErrors.
 */
export class UserAdmin {
  constructor(private readonly deps: UserAdminDeps) {}

  /** A user by id or username, or not_found. */
  async find(ref: { id?: string; username?: string }): Promise<User> {
    const user = ref.id ? await this.deps.store.userById(ref.id) : ref.username ? await this.deps.store.userByUsername(ref.username) : null;
    if (!user) throw new DomainError('not_found', ref.username ? `no user named ${ref.username}` : 'user not found');
    return user;
  }

  async create(actor: Actor, input: NewUserInput, log: Logger): Promise<User> {
    const { store, passwords } = this.deps;
    if (input.roles?.length) this.rolesAllowed(actor);
    await this.checkRefs(input);
    const audit = await this.guardHostGrants(actor, { groups: [], extraPermissions: [] }, input, log);
    let user: User;
    try {
      user = await store.createUser({
        username: input.username,
        email: input.email ?? null,
        displayName: input.displayName || null,
        hashedPassword: input.password ? await passwords.hash(input.password) : null,
        groups: input.groups ?? [],
        extraPermissions: input.extraPermissions ?? [],
        roles: input.roles ?? [],
      });
    } catch (err) {
      if (isUniqueViolation(err)) throw new DomainError('conflict', `username ${input.username} is taken`);
      throw err;
    }
    // a user created without a password is SSO-only: no local identity until one is set
    if (input.password) await store.linkIdentity(user.id, 'local', user.username);
    audit(user.id, user.username);
    return user;
  }

  /** `keepSession`: the web session making the change, which a new password does not end. */
  async update(actor: Actor, user: User, change: UserChange, log: Logger, keepSession: string | null = null): Promise<User> {
    const { store, passwords, bus } = this.deps;
    this.guardPrivileged(actor, user);
    if (change.roles) this.rolesAllowed(actor);
    await this.checkRefs(change);
    const audit = await this.guardHostGrants(actor, user, change, log);
    await this.guardLastAdmin(user, { groups: change.groups ?? user.groups, disabled: change.disabled ?? user.disabled });
    const { password, ...rest } = change;
    await store.updateUser(user.id, {
      ...rest,
      displayName: rest.displayName === '' ? null : rest.displayName,
      ...(password ? { hashedPassword: await passwords.hash(password) } : {}),
    });
    if (password) {
      await store.linkIdentity(user.id, 'local', user.username);
      await this.deps.passwordChanged(user.id, keepSession);
    }
    bus.emit('iam:permissions_changed', { user_id: user.id });
    audit(user.id, user.username);
    return (await store.userById(user.id))!;
  }

  async remove(actor: Actor, user: User): Promise<void> {
    this.guardPrivileged(actor, user);
    await this.guardLastAdmin(user, null);
    await this.deps.store.deleteUser(user.id);
    this.deps.bus.emit('iam:permissions_changed', { user_id: user.id });
    this.deps.bus.emit('iam:password_changed', { user_id: user.id });
  }

  /** Sets a password (the caller has checked who may: oneself, or guardPrivileged); `keepSession` as in update(). */
  async setPassword(user: User, password: string, keepSession: string | null = null): Promise<void> {
    await this.deps.store.updateUser(user.id, { hashedPassword: await this.deps.passwords.hash(password) });
    await this.deps.store.linkIdentity(user.id, 'local', user.username);
    await this.deps.passwordChanged(user.id, keepSession);
  }

  /** A superadmin or bot account is changed only by a superadmin, the system key, or (its password) itself. */
  guardPrivileged(actor: Actor, user: User): void {
    if (isProtectedAccount(user) && !isTrusted(actor)) {
      throw refused(`only a superadmin may change the ${user.roles.includes('superadmin') ? 'superadmin' : 'bot'} account ${user.username}`);
    }
  }

  private rolesAllowed(actor: Actor): void {
    if (!isTrusted(actor)) throw refused('only a superadmin may set roles');
  }

  private async checkRefs(change: { groups?: string[]; extraPermissions?: string[] }): Promise<void> {
    if (change.groups?.length) {
      const found = new Set((await this.deps.store.groupsNamed(change.groups)).map((g) => g.name));
      const missing = change.groups.filter((g) => !found.has(g));
      if (missing.length) throw fieldError('groups', `unknown group ${missing.join(', ')}`);
    }
    requireKnownPermissions('extra_permissions', change.extraPermissions, (p) => this.deps.isKnownPermission(p));
  }

  /** Would this change leave INT_ADMIN without an enabled member? */
  private async guardLastAdmin(user: User, next: { groups: string[]; disabled: boolean } | null): Promise<void> {
    if (!user.groups.includes(ADMIN_GROUP) || user.disabled) return;
    if (next && next.groups.includes(ADMIN_GROUP) && !next.disabled) return;
    const others = (await this.deps.store.membersOf(ADMIN_GROUP)).filter((m) => m.id !== user.id && !m.disabled);
    if (others.length === 0) throw new DomainError('conflict', `${user.username} is the last enabled member of ${ADMIN_GROUP}`);
  }

  /**
   * Permissions that reach the host, directly or through a group joined, are granted only by a
   * trusted actor; each such grant is an audit line (returned, to be written once the change is made).
   */
  private async guardHostGrants(
    actor: Actor,
    before: { groups: string[]; extraPermissions: string[] },
    after: { groups?: string[]; extraPermissions?: string[] },
    log: Logger,
  ): Promise<(userId: string, username: string) => void> {
    const direct = after.extraPermissions ? addedHostPermissions(before.extraPermissions, after.extraPermissions) : [];
    const joined = (after.groups ?? []).filter((g) => !before.groups.includes(g));
    const viaGroups = joined.length ? hostPermissionsOfGroups(await this.deps.store.groupsNamed(joined), joined) : [];
    const granted = [...new Set([...direct, ...viaGroups])];
    if (granted.length === 0) return () => undefined;
    if (!isTrusted(actor)) throw refused(`only a superadmin may grant permissions that reach the host (${granted.join(', ')})`);
    return (userId, username) =>
      log.info({ audit: 'host_permission_granted', actor: actor.username, user_id: userId, username, permissions: granted, groups: joined }, 'audit: host permission granted');
  }
}
