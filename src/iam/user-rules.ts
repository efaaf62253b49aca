import type { Knex } from 'knex';
import { DomainError, fieldError } from '../errors.js';
import { requireKnownPermissions } from './permissions.js';
import {
  addedHostPermissions,
  guardHostBoundary,
  guardOwnGrants,
  hasProtectedRole,
  hostAccessOf,
  hostPermissionsOfGroups,
  isPrivilegedAccount,
  isSelf,
  isTrusted,
  onlyTakesAway,
  type Actor,
} from './policy.js';
import type { IamStore, User } from './store.js';
import type { UserChange } from './user-changes.js';

/** What the rules read: the users and groups, the catalog, and the two ways the login settings and step-up answer. */
export interface UserRulesDeps {
  store: IamStore;
  isKnownPermission(p: string): boolean;
  /** before a trusted actor hands out host access or trust: a fresh second factor (step-up) */
  requireStepUp?(actor: Actor): Promise<void>;
  /** the groups the login mappings of the providers this user signs in through can give them */
  loginGroupsOf?(user: User): Promise<string[]>;
}

export const refused = (message: string) => new DomainError('forbidden', message);

/** The groups a change makes the user join. */
export const joinedGroups = (user: Pick<User, 'groups'>, change: { groups?: string[] }) => (change.groups ?? []).filter((g) => !user.groups.includes(g));

/**
 * The rules of user administration that every writer of users and their credentials asks (the
 * user writer, UserAdmin, which is one; the key writer; the factor reset): who may take an
 * account over, mint a credential, hand out host access, change a protected account. Each
 * refusal is a DomainError.
 */
export class UserRules {
  constructor(protected readonly deps: UserRulesDeps) {}

  /** A user by id or username, or not_found. */
  async find(ref: { id?: string; username?: string }): Promise<User> {
    const user = ref.id ? await this.deps.store.userById(ref.id) : ref.username ? await this.deps.store.userByUsername(ref.username) : null;
    if (!user) throw new DomainError('not_found', ref.username ? `no user named ${ref.username}` : 'user not found');
    return user;
  }

  /**
   * Whether `actor` may act on `user`'s credentials or account (a new password, a key, a
   * re-enabling, any change but taking access away): oneself always; trusted actors too, with a
   * fresh second factor when the account holds a protected role or reaches the host; others not
   * then. `change` omitted: the
   * action hands the account over (a password, a key, deletion).
   */
  async guardTakeover(actor: Actor, user: User, change?: UserChange): Promise<void> {
    if (isSelf(actor, user.id)) return;
    const trusted = isTrusted(actor);
    if (!trusted && hasProtectedRole(user)) {
      throw refused(`only a superadmin may change the ${user.roles.includes('superadmin') ? 'superadmin' : 'bot'} account ${user.username}`);
    }
    if (change && onlyTakesAway(user, change)) return;
    // what the account holds now, and what its next single sign-on would give it back: taking
    // its host groups away first and its password next must not make it anyone's
    const mapped = (await this.deps.loginGroupsOf?.(user)) ?? [];
    const groups = await this.deps.store.groupsNamed([...new Set([...user.groups, ...mapped])]);
    const holds = [...hostAccessOf(user, groups), ...hostPermissionsOfGroups(groups, mapped)];
    // a trusted actor may, with a fresh second factor: taking over such an account hands out the host
    if (trusted) return holds.length || hasProtectedRole(user) ? this.deps.requireStepUp?.(actor) : undefined;
    guardHostBoundary(actor, holds, `take over ${user.username}, whose access reaches the host`);
    // whoever takes an account over holds what it holds: no self-escalation through it either
    guardOwnGrants(actor, [...user.extraPermissions, ...groups.flatMap((g) => g.permissions)], `take over ${user.username}, whose permissions are not all`);
  }

  /**
   * A key passes no second step: one of an account with a second factor (made before the factor,
   * or stolen) mints no credential the factor never saw: a key, a password, an account that signs
   * in, a role, a reset of someone's factors. That is for a web session that verified the factor
   * lately (step-up); the system key and the CLI hold the host already. `owner`: the account the
   * credential is for, when the caller has it read (it may be the key's own).
   */
  async guardCredentialMinting(actor: Actor, what: string, owner?: User): Promise<void> {
    if (actor.method !== 'api_key' || !actor.userId) return;
    // the account as it is now (a resolved identity's flag may be older)
    const account = owner && owner.id === actor.userId ? owner : await this.find({ id: actor.userId });
    if (actor.mfaEnabled || account.mfaEnabled) {
      throw refused(
        `an API key of an account with a second factor cannot ${what}: do it from a signed-in session that verified the factor lately (POST /api/auth/step-up)`,
      );
    }
  }

  /**
   * The host boundary judged again inside a write, on the account as `trx` locked it (and the
   * groups `change` joins, locked by the caller): guardTakeover and the grant check judged them
   * before the hash, and a grant may have landed since. A non-trusted actor then neither takes
   * the account over nor hands out what a joined group has come to hold.
   */
  async guardHostAtWrite(
    actor: Actor,
    user: Pick<User, 'id' | 'username' | 'groups' | 'extraPermissions' | 'roles'>,
    change: UserChange | null,
    trx: Knex,
  ): Promise<void> {
    if (isTrusted(actor)) return;
    const joined = change ? joinedGroups(user, change) : [];
    const groups = await this.deps.store.groupsNamed([...new Set([...user.groups, ...joined])], trx);
    if (!isSelf(actor, user.id) && !(change && onlyTakesAway(user, change)))
      guardHostBoundary(actor, hostAccessOf(user, groups), `take over ${user.username}, whose access reaches the host`);
    const direct = change?.extraPermissions ? addedHostPermissions(user.extraPermissions, change.extraPermissions) : [];
    guardHostBoundary(actor, [...direct, ...hostPermissionsOfGroups(groups, joined)], 'grant permissions that reach the host');
  }

  /** A credential written for `userId` (a password, a key): its row locked in `trx`, then guardHostAtWrite; the account as locked. */
  async lockForCredential(actor: Actor, userId: string, trx: Knex): Promise<User | null> {
    const user = await this.deps.store.lockUser(userId, trx);
    if (user) await this.guardHostAtWrite(actor, user, null, trx);
    return user;
  }

  /** A superadmin or bot account: even taking its access away (revoking a key) is for trusted actors. */
  guardProtectedRole(actor: Actor, user: User): void {
    if (hasProtectedRole(user) && !isTrusted(actor)) {
      throw refused(`only a superadmin may change the ${user.roles.includes('superadmin') ? 'superadmin' : 'bot'} account ${user.username}`);
    }
  }

  /**
   * Does the account administer the service or reach the host, now or once it has `joining`
   * too (the groups a login would map onto it)? No login joins such an account by e-mail.
   */
  async isPrivileged(user: User, joining: readonly string[] = []): Promise<boolean> {
    const all = [...new Set([...user.groups, ...joining])];
    return isPrivilegedAccount({ ...user, groups: all }, await this.deps.store.groupsNamed(all));
  }

  /** Roles hand out trust: a trusted actor's, with a fresh second factor. */
  protected async rolesAllowed(actor: Actor): Promise<void> {
    guardHostBoundary(actor, isTrusted(actor) ? [] : ['role:superadmin'], 'set roles');
    await this.deps.requireStepUp?.(actor);
  }

  protected async checkRefs(change: { groups?: string[]; extraPermissions?: string[] }): Promise<void> {
    if (change.groups?.length) {
      const found = new Set((await this.deps.store.groupsNamed(change.groups)).map((g) => g.name));
      const missing = change.groups.filter((g) => !found.has(g));
      if (missing.length) throw fieldError('groups', `unknown group ${missing.join(', ')}`);
    }
    requireKnownPermissions('extra_permissions', change.extraPermissions, (p) => this.deps.isKnownPermission(p));
  }

  /**
   * Permissions that reach the host, directly or through a group joined, are granted only by a
   * trusted actor with a fresh second factor; answers what the change grants (the event says it).
   */
  protected async guardHostGrants(
    actor: Actor,
    before: { groups: string[]; extraPermissions: string[] },
    after: { groups?: string[]; extraPermissions?: string[] },
  ): Promise<string[]> {
    const direct = after.extraPermissions ? addedHostPermissions(before.extraPermissions, after.extraPermissions) : [];
    const joined = (after.groups ?? []).filter((g) => !before.groups.includes(g));
    const joinedGroups = joined.length ? (await this.deps.store.groupsNamed(joined)).filter((g) => joined.includes(g.name)) : [];
    const viaGroups = hostPermissionsOfGroups(joinedGroups, joined);
    const granted = [...new Set([...direct, ...viaGroups])];
    guardHostBoundary(actor, granted, 'grant permissions that reach the host');
    const addedExtra = (after.extraPermissions ?? []).filter((p) => !before.extraPermissions.includes(p));
    guardOwnGrants(actor, [...addedExtra, ...joinedGroups.flatMap((g) => g.permissions)], 'hand out groups and permissions');
    if (granted.length === 0) return [];
    await this.deps.requireStepUp?.(actor);
    return granted;
  }
}
