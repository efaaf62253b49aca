import { DomainError } from '../errors.js';
import { ADMIN_GROUP } from './permissions.js';
import type { IamStore, User } from './store.js';

/** What a change leaves of an account (null: the account is deleted). */
type Next = { groups: string[]; disabled: boolean; roles: string[] } | null;

/**
 * Would this change leave INT_ADMIN without an enabled member, or the service without an enabled
 * superadmin (nobody could then administer it, grant host access or a protected account through
 * the API, the page or the CLI)? Refused (conflict), saying what to do first. The boot's
 * SERVICE_ADMIN_FORCE_SUPERADMIN stays the operator's way back.
 */
export async function guardLastAdmin(store: IamStore, user: User, next: Next): Promise<void> {
  if (await leavesNoAdmin(store, user, next)) throw new DomainError('conflict', `${user.username} is the last enabled member of ${ADMIN_GROUP}`);
  if (!user.roles.includes('superadmin') || user.disabled || (next && next.roles.includes('superadmin') && !next.disabled)) return;
  const others = (await store.listUsers()).filter((u) => u.id !== user.id && !u.disabled && u.roles.includes('superadmin'));
  if (others.length === 0) {
    const becomes = next ? (next.disabled ? 'disabled' : 'demoted') : 'deleted';
    throw new DomainError(
      'conflict',
      `${user.username} is the last enabled superadmin: make another account superadmin first (roles: ["superadmin"]), then this one can be ${becomes}`,
    );
  }
}

/** Would `user`, changed to `next`, leave INT_ADMIN without an enabled member? */
export async function leavesNoAdmin(store: IamStore, user: User, next: Pick<NonNullable<Next>, 'groups' | 'disabled'> | null): Promise<boolean> {
  if (!user.groups.includes(ADMIN_GROUP) || user.disabled) return false;
  if (next && next.groups.includes(ADMIN_GROUP) && !next.disabled) return false;
  const others = (await store.membersOf(ADMIN_GROUP)).filter((m) => m.id !== user.id && !m.disabled);
  return others.length === 0;
}
