import type { EventBus } from '../bus/bus.js';
import { DomainError, fieldError } from '../errors.js';
import type { Logger } from '../log.js';
import { isUniqueViolation } from '../db/knex.js';
import { ADMIN_GROUP, requireKnownPermissions } from './permissions.js';
import type { Passwords } from './passwords.js';
import {
  addedHostPermissions,
  guardHostBoundary,
  hasProtectedRole,
  hostAccessOf,
  hostPermissionsOfGroups,
  isPrivilegedAccount,
  isTrusted,
  onlyTakesAway,
  type Actor,
} from './policy.js';
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

/**
 * The login chain applying the login settings (default groups, group mappings): whatever those
 * hand out, a trusted actor configured (src/auth/settings-change.ts), so it acts as one.
 */
export const LOGIN_MAPPING_ACTOR: Actor = { username: 'login-mapping', userId: null, isSystem: true, isSuperadmin: false };

const refused = (message: string) => new DomainError('forbidden', message);

/**
 * The only writer of users: creating, changing and deleting them under the rules every caller
 * obeys (the admin API, the CLI, the login chain): groups and permissions must exist, INT_ADMIN
 * keeps an enabled member, and the host boundary of src/iam/policy.ts holds: host permissions
 * are granted, and accounts that reach the host taken over, only by a trusted actor.
 * Errors are DomainErrors.
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
    this.changed(user.id);
    audit(user.id, user.username);
    return user;
  }

  /** `keepSession`: the web session making the change, which a new password does not end. */
  async update(actor: Actor, user: User, change: UserChange, log: Logger, keepSession: string | null = null): Promise<User> {
    const { store, passwords } = this.deps;
    await this.guardTakeover(actor, user, change);
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
    this.changed(user.id);
    audit(user.id, user.username);
    return (await store.userById(user.id))!;
  }

  async remove(actor: Actor, user: User): Promise<void> {
    await this.guardTakeover(actor, user);
    await this.guardLastAdmin(user, null);
    await this.deps.store.deleteUser(user.id);
    this.changed(user.id);
    this.deps.bus.emit('iam:password_changed', { user_id: user.id });
  }

  /**
   * Sets a password: oneself (the caller has checked the current one) or an actor the host
   * boundary lets take the account over. `keepSession` as in update().
   */
  async setPassword(actor: Actor, user: User, password: string, keepSession: string | null = null): Promise<void> {
    await this.guardTakeover(actor, user);
    await this.deps.store.updateUser(user.id, { hashedPassword: await this.deps.passwords.hash(password) });
    await this.deps.store.linkIdentity(user.id, 'local', user.username);
    await this.deps.passwordChanged(user.id, keepSession);
  }

  /**
   * Whether `actor` may act on `user`'s credentials or account (a new password, a key, a
   * re-enabling, any change but taking access away): oneself and trusted actors always; others
   * not when the account holds a protected role or reaches the host. `change` omitted: the
   * action hands the account over (a password, a key, deletion).
   */
  async guardTakeover(actor: Actor, user: User, change?: UserChange): Promise<void> {
    if (isTrusted(actor) || (actor.userId && actor.userId === user.id)) return;
    if (hasProtectedRole(user)) {
      throw refused(`only a superadmin may change the ${user.roles.includes('superadmin') ? 'superadmin' : 'bot'} account ${user.username}`);
    }
    if (change && onlyTakesAway(user, change)) return;
    const holds = hostAccessOf(user, await this.deps.store.groupsNamed(user.groups));
    guardHostBoundary(actor, holds, `take over ${user.username}, whose access reaches the host`);
  }

  /** A superadmin or bot account: even taking its access away (revoking a key) is for trusted actors. */
  guardProtectedRole(actor: Actor, user: User): void {
    if (hasProtectedRole(user) && !isTrusted(actor)) {
      throw refused(`only a superadmin may change the ${user.roles.includes('superadmin') ? 'superadmin' : 'bot'} account ${user.username}`);
    }
  }

  /** Does the account administer the service or reach the host (no login joins it by e-mail)? */
  async isPrivileged(user: User): Promise<boolean> {
    return isPrivilegedAccount(user, await this.deps.store.groupsNamed(user.groups));
  }

  /**
   * Groups a login provider's mapping decides (every other group the user has stays): the
   * login chain's write, under the same refs and host rules as every other (LOGIN_MAPPING_ACTOR).
   */
  async setGroupsFromLogin(user: User, groups: string[], log: Logger): Promise<void> {
    await this.checkRefs({ groups });
    const audit = await this.guardHostGrants(LOGIN_MAPPING_ACTOR, user, { groups }, log);
    await this.deps.store.updateUser(user.id, { groups });
    this.changed(user.id);
    audit(user.id, user.username);
  }

  /** Every form of iam:permissions_changed about one user comes from here. */
  private changed(userId: string): void {
    this.deps.bus.emit('iam:permissions_changed', { scope: 'user', user_id: userId });
  }

  private rolesAllowed(actor: Actor): void {
    guardHostBoundary(actor, isTrusted(actor) ? [] : ['role:superadmin'], 'set roles');
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
    guardHostBoundary(actor, granted, 'grant permissions that reach the host');
    return (userId, username) =>
      log.info({ audit: 'host_permission_granted', actor: actor.username, user_id: userId, username, permissions: granted, groups: joined }, 'audit: host permission granted');
  }
}
