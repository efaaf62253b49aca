import { DomainError } from '../errors.js';
import { ADMIN_GROUP } from './permissions.js';
import type { Knex } from 'knex';
import type { IamStore, User } from './store.js';

/** What a change leaves of an account (null: the account is deleted). */
type Next = { groups: string[]; disabled: boolean; roles: string[] } | null;

/**
 * Would this change leave INT_ADMIN without an enabled member, or the service without an enabled
 * superadmin (nobody could then administer it, grant host access or a protected account through
 * the API, the page or the CLI)? Refused (conflict), saying what to do first. The boot's
 * SERVICE_ADMIN_FORCE_SUPERADMIN stays the operator's way back.
 *
 * Runs inside the change's transaction `trx`: a change that concerns an administrator first takes
 * the INT_ADMIN group's row lock, so two such changes at once are judged one after the other
 * (two last superadmins disabled together would otherwise each count the other).
 */
/** An enabled superadmin or member of INT_ADMIN: guardLastAdmin judges (and locks INT_ADMIN for) its changes. */
export function administers(user: Pick<User, 'disabled' | 'roles' | 'groups'>): boolean {
  return !user.disabled && (user.roles.includes('superadmin') || user.groups.includes(ADMIN_GROUP));
}

export async function guardLastAdmin(store: IamStore, trx: Knex, user: User, next: Next): Promise<void> {
  if (!administers(user)) return;
  await store.lockGroup(ADMIN_GROUP, trx);
  const others = (await trx('users').whereNot({ id: user.id }).select('disabled', 'roles', 'groups')).filter((r) => !r.disabled);
  const holding = (column: 'roles' | 'groups', value: string) =>
    others.some((r) => (typeof r[column] === 'string' ? (JSON.parse(r[column]) as string[]) : (r[column] as string[])).includes(value));
  const stays = (has: (n: NonNullable<Next>) => boolean) => next !== null && has(next) && !next.disabled;
  if (user.groups.includes(ADMIN_GROUP) && !stays((n) => n.groups.includes(ADMIN_GROUP)) && !holding('groups', ADMIN_GROUP))
    throw new DomainError('conflict', `${user.username} is the last enabled member of ${ADMIN_GROUP}`);
  if (user.roles.includes('superadmin') && !stays((n) => n.roles.includes('superadmin')) && !holding('roles', 'superadmin')) {
    const becomes = next ? (next.disabled ? 'disabled' : 'demoted') : 'deleted';
    throw new DomainError(
      'conflict',
      `${user.username} is the last enabled superadmin: make another account superadmin first (service-core user promote <name>, or roles ["superadmin"] through the API), then this one can be ${becomes}`,
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

/**
 * The bootstrap accounts (`names`: the admin's and the bot's) are made again at every start of
 * the service when missing: deleting one would come undone silently. Refused (conflict), with the
 * way that lasts: disabling it, which every start keeps.
 */
export function guardBootstrapRemoval(names: readonly (string | undefined)[], user: Pick<User, 'username'>): void {
  const name = user.username.toLowerCase();
  if (!names.some((n) => n?.toLowerCase() === name)) return;
  throw new DomainError(
    'conflict',
    `${user.username} is a bootstrap account: every start of the service makes it again when it is missing; disable it instead (PATCH /api/users/{id} {"disabled": true}, or service-core user disable ${user.username}), which lasts`,
  );
}

/**
 * The bootstrap admin's superadmin flag is the environment's: every start of the service sets it
 * from SERVICE_ADMIN_FORCE_SUPERADMIN, so a change to it through the user writer would be undone
 * silently by the next one (whatever the environment of whoever asks says). Refused (conflict),
 * with the ways that last. `bootAdmin`: its username.
 */
export function guardBootAdminFlag(bootAdmin: string | undefined, user: Pick<User, 'username' | 'roles'>, roles: string[]): void {
  const wanted = roles.includes('superadmin');
  if (!bootAdmin || user.username.toLowerCase() !== bootAdmin.toLowerCase() || wanted === user.roles.includes('superadmin')) return;
  const follows = `the superadmin flag of ${user.username} follows SERVICE_ADMIN_FORCE_SUPERADMIN at every start of the service`;
  throw new DomainError(
    'conflict',
    wanted
      ? `${follows} (true gives it, anything else takes it away): set it to true in the service's environment and restart, or make another account superadmin`
      : `${follows} (true gives it, anything else takes it away): remove it from the service's environment and restart`,
  );
}
