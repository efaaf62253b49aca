import type { Group, User } from './store.js';

/** Who changes the model: what the policies need of an identity. */
export interface Actor {
  username: string;
  isSystem: boolean;
  isSuperadmin: boolean;
}

/** The system key and superadmins: the only actors trusted with the host and with protected accounts. */
export function isTrusted(actor: Actor): boolean {
  return actor.isSystem || actor.isSuperadmin;
}

/**
 * A permission that reaches the host through a socket provider (spawn a container, mount a host
 * directory, repair permissions): whoever holds one is close to root on the machine.
 */
export function reachesHost(permission: string): boolean {
  return permission.startsWith('socket:');
}

/** Superadmin and bot accounts: their credentials, groups and keys change only by a trusted actor. */
export function isProtectedAccount(user: Pick<User, 'roles'>): boolean {
  return user.roles.includes('superadmin') || user.roles.includes('bot');
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
