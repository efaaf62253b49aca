import type { Knex } from 'knex';
import { hostAccessOf } from './policy.js';
import type { IamStore, User } from './store.js';

/** What an account first reaching the host lost (its event says it). */
export interface Afresh {
  credentials_revoked: number;
  factors_removed: number;
  password_cleared: boolean;
}

/** The credentials area's part (src/auth): the account's keys and sessions end, its second factors and recovery codes go. */
export type EndEveryCredential = (userId: string, trx: Knex) => Promise<{ credentials_revoked: number; factors_removed: number }>;

/**
 * An account that comes to reach the host (or to hold a protected role) starts afresh, in the
 * change's transaction (`reachedBefore`: judged before it, with the groups involved locked):
 * nothing made on it while it reached nothing carries that access, since a plain administrator
 * may have made its keys, set its password, or signed in with a password they knew and enrolled
 * a passkey (which signs in alone) or an app. Its keys and sessions end, and its second factors
 * and recovery codes go (it enrols again). Its password stays only when a trusted actor set it
 * (`passwordTrusted`: or the account itself, changing one that was); any other is cleared. The
 * sign-ins linked to it (a directory's, a provider's) stay: they are that provider's word on who
 * the person is. Answers what ended, or null when nothing did (or the account reached the host
 * before); the caller ends what the old credentials proved (passwordChanged) once the
 * transaction committed.
 */
export async function afreshOnFirstReach(
  store: IamStore,
  trx: Knex,
  userId: string,
  reachedBefore: boolean,
  endEveryCredential: EndEveryCredential,
): Promise<Afresh | null> {
  if (reachedBefore) return null;
  const user = await store.userById(userId, trx);
  if (!user || !(await holdsHostAccess(store, user, trx))) return null;
  const ended = await endEveryCredential(userId, trx);
  const password_cleared = Boolean(user.hashedPassword) && !user.passwordTrusted;
  if (password_cleared) {
    await store.updateUser(userId, { hashedPassword: null, passwordTrusted: false }, trx);
    await trx('user_identities').where({ user_id: userId, provider: 'local' }).delete();
  }
  return ended.credentials_revoked || ended.factors_removed || password_cleared ? { ...ended, password_cleared } : null;
}

/** Whether `user` reaches the host or holds a protected role, its groups read in `trx`. */
export async function holdsHostAccess(store: IamStore, user: Pick<User, 'roles' | 'extraPermissions' | 'groups'>, trx: Knex): Promise<boolean> {
  return hostAccessOf(user, await store.groupsNamed(user.groups, trx)).length > 0;
}

/**
 * What to tell whoever made the change from `before` to `after` when it cleared the password
 * (the account started afresh), or null: the users API's answer and the CLI say it alike.
 */
export function passwordClearedWarning(before: Pick<User, 'hashedPassword'>, after: Pick<User, 'hashedPassword' | 'username'>): string | null {
  if (!before.hashedPassword || after.hashedPassword) return null;
  return `${after.username} now reaches the host, and its password, which no superadmin had set, was cleared with its keys, sessions and second factors: set a new one (POST /api/users/{id}/password, service-core user set-password ${after.username}), or let it sign in through its directory or single sign-on`;
}
