import { DomainError } from '../errors.js';
import { CORE_FEATURES, grantsInclude } from './permissions.js';
import type { Group, User } from './store.js';

/** Who changes the model: what the policies need of an identity. */
export interface Actor {
  username: string;
  /** the acting user's id (null: the system key, the CLI, the login mapping) */
  userId?: string | null;
  isSystem: boolean;
  isSuperadmin: boolean;
  /** an API key narrowed to these permissions (null or absent: not a scoped key) */
  keyScopes?: readonly string[] | null;
  /** what the actor proved itself with (an identity's credential: `api_key`, `session_cookie`…; the service: `boot`) */
  method?: string;
  /** the acting account has a second factor (as read when its credential was resolved) */
  mfaEnabled?: boolean;
}

/** The service itself at boot (seeding, the environment's superadmin flag): trusted, recorded as `service` by `boot`. */
export const SERVICE_ACTOR: Actor = { username: 'service', userId: null, isSystem: true, isSuperadmin: true, method: 'boot' };

/** The admin CLI on the host (and `npx knex seed:run`): trusted, whoever may run it holds the host already. */
export const CLI_ACTOR: Actor = { username: 'cli', userId: null, isSystem: true, isSuperadmin: true };

/**
 * The system key and superadmins: the only actors trusted with the host and with protected
 * accounts. A superadmin's scoped API key is not: it was made to do less than its owner.
 */
export function isTrusted(actor: Actor): boolean {
  return actor.isSystem || (actor.isSuperadmin && !actor.keyScopes);
}

/**
 * Does the actor hold `permission`? The system key and the CLI hold everything; an identity
 * answers for itself (its groups, extra permissions and a key's scopes); an actor that cannot
 * say holds nothing.
 */
export function holds(actor: Actor, permission: string): boolean {
  if (actor.isSystem) return true;
  const allows = (actor as { allows?: unknown }).allows;
  return typeof allows === 'function' && (allows as (p: string) => boolean).call(actor, permission) === true;
}

/** Is the actor this user, acting with a credential of their own that is not narrowed (a scoped key is not the whole person)? */
export function isSelf(actor: Actor, userId: string): boolean {
  return Boolean(actor.userId) && actor.userId === userId && !actor.keyScopes;
}

/**
 * A permission that reaches the host through a socket provider (spawn a container, mount a host
 * directory, repair permissions): whoever holds one is close to root on the machine.
 */
export function reachesHost(permission: string): boolean {
  return permission.startsWith('socket:');
}

/** The roles that make an account trusted (superadmin) or a machine account (bot). */
export const PROTECTED_ROLES = ['superadmin', 'bot'] as const;

/**
 * The host boundary, the one rule every writer of users, groups, keys and login settings keeps
 * (docs/security.md, "Who may hand out the host"): only a trusted actor may make any account,
 * key or connection gain a permission that reaches the host, or the trusted status itself.
 * `handsOut` is what the change would hand out (host permissions, `role:superadmin`, `system key`,
 * or the host access of an account it takes over); empty, the change hands nothing out.
 */
export function guardHostBoundary(actor: Actor, handsOut: readonly string[], what: string): void {
  if (handsOut.length && !isTrusted(actor)) {
    // where to go from here: docs/sockets.md says who may grant what and how one becomes a superadmin
    throw new DomainError('forbidden', `only a superadmin may ${what} (${[...new Set(handsOut)].join(', ')}); see docs/sockets.md, "Who may grant what"`, {
      reason: 'host_boundary',
      docs: 'docs/sockets.md#who-may-grant-what',
    });
  }
}

/**
 * Does `actor` cover `permission` when handing it out? It holds it; or it is a page's
 * `route:` permission (it opens the page only: its data stays behind the API's permissions); or
 * a plugin's permission and the actor administers plugins (enabling, configuring and the role
 * grants of a plugin are theirs already).
 */
function covers(actor: Actor, permission: string): boolean {
  return holds(actor, permission) || permission.startsWith('route:') || (permission.startsWith('plugin:') && holds(actor, 'feature:admin.plugins'));
}

/**
 * No self-escalation (docs/security.md): an administrator hands out a group or a permission only
 * when their own effective permissions cover every permission it gives; trusted actors (the
 * system key, the CLI, superadmins) cover everything. `gives`: what the change would give (the
 * permissions added to an account or a group, those of the groups it joins or that a login
 * would hand out). Refused (forbidden) naming what the actor lacks.
 */
export function guardOwnGrants(actor: Actor, gives: Iterable<string>, what: string): void {
  if (isTrusted(actor)) return;
  const lacking = [...new Set(gives)].filter((p) => !covers(actor, p));
  if (lacking.length) throw new DomainError('forbidden', `you may only ${what} within your own permissions: you lack ${lacking.join(', ')}`);
}

/** The host permissions in `after` that `before` did not grant. */
export function addedHostPermissions(before: Iterable<string>, after: Iterable<string>): string[] {
  const had = new Set(before);
  return [...new Set(after)].filter((p) => reachesHost(p) && !had.has(p));
}

/** The host permissions a user gains by joining `added` groups (their permissions as stored now). */
export function hostPermissionsOfGroups(groups: readonly Group[], added: readonly string[]): string[] {
  const joining = new Set(added);
  return [...new Set(groups.filter((g) => joining.has(g.name)).flatMap((g) => g.permissions.filter(reachesHost)))];
}

/**
 * What an account holds that a takeover would hand out: its protected roles and the host
 * permissions among its effective ones (`groups`: the account's groups as stored now).
 */
export function hostAccessOf(user: Pick<User, 'roles' | 'extraPermissions' | 'groups'>, groups: readonly Group[]): string[] {
  const roles = user.roles.filter((r) => (PROTECTED_ROLES as readonly string[]).includes(r)).map((r) => `role:${r}`);
  return [...new Set([...roles, ...user.extraPermissions.filter(reachesHost), ...hostPermissionsOfGroups(groups, user.groups)])];
}

/** An account with the superadmin or bot role: even taking its access away is for trusted actors. */
export function hasProtectedRole(user: Pick<User, 'roles'>): boolean {
  return user.roles.some((r) => (PROTECTED_ROLES as readonly string[]).includes(r));
}

const ADMIN_FEATURES = CORE_FEATURES.filter((f) => f.startsWith('feature:admin.'));

/**
 * An account that administers the service or reaches the host: no login may be joined to it
 * by e-mail alone (an address in a directory is only as trustworthy as whoever can edit it).
 */
export function isPrivilegedAccount(user: Pick<User, 'roles' | 'extraPermissions' | 'groups'>, groups: readonly Group[]): boolean {
  if (hostAccessOf(user, groups).length) return true;
  const perms = new Set([...user.extraPermissions, ...groups.filter((g) => user.groups.includes(g.name)).flatMap((g) => g.permissions)]);
  return ADMIN_FEATURES.some((f) => grantsInclude(perms, f));
}

/** Does a change of a user only take access away (disable, leave groups, drop extra permissions)? */
export function onlyTakesAway(user: Pick<User, 'groups' | 'extraPermissions'>, change: object): boolean {
  const subset = (next: unknown, now: readonly string[]) => Array.isArray(next) && next.every((x) => now.includes(x));
  return Object.entries(change).every(([field, value]) => {
    if (value === undefined) return true;
    if (field === 'disabled') return value === true;
    if (field === 'groups') return subset(value, user.groups);
    if (field === 'extraPermissions') return subset(value, user.extraPermissions);
    return false;
  });
}
