import { isUniqueViolation } from '../db/knex.js';
import type { AuditInput } from './audit.js';
import type { CommandPath } from './commands.js';
import { leavesNoAdmin } from './last-admin.js';
import { afreshOnFirstReach, holdsHostAccess, type EndEveryCredential } from './afresh.js';
import { ADMIN_GROUP } from './permissions.js';
import { listDiff } from './user-changes.js';
import type { Actor } from './policy.js';
import { NameTaken, type DirectoryState, type IamStore, type User } from './store.js';

/** A user as the audit trail names it. */
export const userTarget = (u: Pick<User, 'id' | 'username'>) => ({ type: 'user', id: u.id, name: u.username });

/**
 * The login chain applying the login settings (default groups, group mappings): whatever those
 * hand out, a trusted actor configured (src/auth/settings-change.ts), so it acts as one.
 */
export const LOGIN_MAPPING_ACTOR: Actor = { username: 'login-mapping', userId: null, isSystem: true, isSuperadmin: false };

/**
 * The directory recheck (src/auth/directory-recheck.ts) between sign-ins: it applies what the
 * directory says of a linked account now (its end, its return, the mapping, its name), as the
 * login mapping does at a sign-in.
 */
export const DIRECTORY_RECHECK_ACTOR: Actor = { username: 'directory-recheck', userId: null, isSystem: true, isSuperadmin: false };

/** What a provider says of the person now, to be copied onto the profile (each field only when it differs). */
export interface ProfileChange {
  username?: string;
  email?: string;
  displayName?: string;
}

export interface LoginWritesDeps {
  store: IamStore;
  commands: CommandPath;
  /** iam:permissions_changed about this user (UserAdmin's one emitter) */
  changed(userId: string): void;
  /** UserAdmin's checks of `groups` given to `user`: they exist, and the host grants among them (answered) are `actor`'s to give */
  grants(actor: Actor, user: User, groups: string[]): Promise<string[]>;
  /** an account starting afresh (src/iam/afresh.ts): the credentials area's part, and what ends after the commit */
  endEveryCredential: EndEveryCredential;
  passwordChanged(userId: string, keep: string | null): Promise<void>;
}

/**
 * The writes the login chain and the directory recheck make on users, part of UserAdmin (the
 * only writer of users, `users.logins`): identities linked, a profile filled or kept in step
 * with its provider, an account ended and restored by its directory, groups a mapping was
 * refused. Each is one transaction with its event, by `actor` (the login mapping, the recheck).
 *
 * An account whose directory account ended (disabled, expired, gone) is disabled here, which
 * every way in honours (a local password, Basic, OIDC, a passkey, a second step, a key):
 * `directory_state` 'ended' says the directory did it. The account's return there (a sign-in
 * through the directory, or the recheck finding it active) enables it again; an administrator
 * may enable it meanwhile ('kept': the end is not applied again until the account has been
 * back in the directory), and an administrator's own disabling is theirs (the state is cleared).
 */
export class LoginWrites {
  constructor(private readonly deps: LoginWritesDeps) {}

  /**
   * Groups a login provider's mapping decides (every other group the user has stays): the
   * login chain's write (LOGIN_MAPPING_ACTOR) or the directory recheck's (DIRECTORY_RECHECK_ACTOR),
   * under the same refs and host rules as every other (UserAdmin's, `grants`).
   */
  async setGroups(actor: Actor, user: User, groups: string[], provider: string): Promise<{ groups: string[]; kept: string[] }> {
    // the last enabled member of INT_ADMIN keeps it, whatever the mapping says: a directory
    // change must not leave the service without an administrator (update() refuses it; a
    // login, which cannot be refused for it, keeps the group and says so: in the event of a
    // change, and the caller's log line each time)
    const keep = !groups.includes(ADMIN_GROUP) && (await leavesNoAdmin(this.deps.store, user, { groups, disabled: user.disabled })) ? [ADMIN_GROUP] : [];
    const next = [...groups, ...keep];
    if (next.length === user.groups.length && next.every((g) => user.groups.includes(g))) return { groups: user.groups, kept: keep };
    const granted = await this.deps.grants(actor, user, next);
    const { store } = this.deps;
    const afresh = await this.deps.commands.within(
      async (trx) => {
        // judged as the transaction finds the account and the groups it joins (locked)
        await store.lockGroups(
          next.filter((g) => !user.groups.includes(g)),
          trx,
        );
        const reachedHost = await holdsHostAccess(store, (await store.lockUser(user.id, trx)) ?? user, trx);
        await store.updateUser(user.id, { groups: next }, trx);
        // its first access to the host, given by this sign-in
        return afreshOnFirstReach(store, trx, user.id, reachedHost, this.deps.endEveryCredential);
      },
      (afresh) => ({
        action: 'user.updated',
        actor,
        target: userTarget(user),
        details: {
          fields: ['groups'],
          groups: next,
          previous_groups: user.groups,
          groups_added: listDiff(user.groups, next).added,
          groups_removed: listDiff(user.groups, next).removed,
          provider,
          ...(granted.length ? { host_permissions: granted } : {}),
          ...(keep.length ? { kept: keep, because: 'last enabled member' } : {}),
          ...(afresh ? { started_afresh: afresh } : {}),
        },
      }),
    );
    if (afresh) await this.deps.passwordChanged(user.id, null);
    this.deps.changed(user.id);
    return { groups: next, kept: keep };
  }

  /**
   * Joins a login at `provider` to `user` (the login chain's linking: a local login's missing
   * identity, a verified e-mail address, a new account): an event naming the provider and how.
   * False when that identity was linked already (a concurrent login may have linked it elsewhere).
   */
  async linkIdentity(user: User, provider: string, providerUserId: string, via: 'local' | 'email' | 'created'): Promise<boolean> {
    return this.deps.commands.within(
      (trx) => this.deps.store.linkIdentity(user.id, provider, providerUserId, trx),
      (linked) => (linked ? { action: 'user.linked', actor: LOGIN_MAPPING_ACTOR, target: userTarget(user), details: { provider, via } } : null),
    );
  }

  /** A login provider not trusted with the host named groups that reach it: left out, and a refusal in the trail. */
  groupsRefused(user: User, provider: string, groups: string[]): void {
    this.deps.commands.record({
      action: 'user.updated',
      actor: LOGIN_MAPPING_ACTOR,
      target: userTarget(user),
      outcome: 'denied',
      details: { fields: ['groups'], provider, refused_groups: groups, reason: 'only a trusted actor hands out groups that reach the host' },
    });
  }

  /**
   * What a provider tells of the person copied onto the profile (the caller decided which fields
   * and checked that another user holds neither name nor address). A name taken in between is
   * not taken: the rest is written, and the answer says the name was not (`renamed` false).
   */
  async follow(actor: Actor, user: User, change: ProfileChange, provider: string): Promise<{ renamed: boolean }> {
    const { username, ...rest } = change;
    const fields = (['username', 'email', 'displayName'] as const).filter((k) => change[k] !== undefined);
    if (fields.length === 0) return { renamed: false };
    try {
      await this.deps.commands.within(
        async (trx) => {
          if (Object.keys(rest).length) await this.deps.store.updateUser(user.id, rest, trx);
          if (username) await this.deps.store.renameUser(user.id, user.username, username, trx);
        },
        () => ({
          action: 'user.updated',
          actor,
          target: userTarget({ id: user.id, username: username ?? user.username }),
          details: { fields, provider, ...(username ? { previous_username: user.username } : {}) },
        }),
      );
    } catch (err) {
      if (!username || !(isUniqueViolation(err) || err instanceof NameTaken)) throw err;
      await this.follow(actor, user, rest, provider);
      return { renamed: false };
    }
    this.deps.changed(user.id);
    return { renamed: Boolean(username) };
  }

  /** A user a first login made in vain (a concurrent first login of the same person won): gone again, nobody has seen it. */
  async dropDuplicate(user: User, provider: string): Promise<void> {
    await this.deps.commands.within(
      (trx) => this.deps.store.deleteUser(user.id, trx),
      () => ({ action: 'user.deleted', actor: LOGIN_MAPPING_ACTOR, target: userTarget(user), details: { groups: user.groups, provider, duplicate: true } }),
    );
    this.deps.changed(user.id);
  }

  /**
   * The directory account behind `user` ended (`state`): the account is disabled, whatever else
   * it signs in with. False when it was not enabled (or kept by an administrator) any more.
   * `lastAdmin`: it was the last enabled member of INT_ADMIN (the person left: the end applies
   * all the same, and the caller says so).
   */
  async endByDirectory(actor: Actor, user: User, state: string, provider: string): Promise<{ ended: boolean; lastAdmin: boolean }> {
    const lastAdmin = await leavesNoAdmin(this.deps.store, user, { groups: user.groups, disabled: true });
    const ended = await this.swap(actor, user, { disabled: false, directoryState: null }, { disabled: true, directoryState: 'ended' }, provider, {
      directory_account: state,
      because: 'its directory account ended',
      ...(lastAdmin ? { last_admin: true } : {}),
    });
    return { ended, lastAdmin: ended && lastAdmin };
  }

  /** The directory account is active again: an account its end disabled is enabled. False when there was none to enable. */
  restoreByDirectory(actor: Actor, user: User, provider: string): Promise<boolean> {
    return this.swap(actor, user, { disabled: true, directoryState: 'ended' }, { disabled: false, directoryState: null }, provider, {
      because: 'its directory account is active again',
    });
  }

  /** The directory account is active again: an administrator's keeping of the account is over (a new end applies again). */
  clearKept(actor: Actor, user: User, provider: string): Promise<boolean> {
    return this.swap(actor, user, { disabled: false, directoryState: 'kept' }, { disabled: false, directoryState: null }, provider, {
      because: 'its directory account is active again',
    });
  }

  private async swap(
    actor: Actor,
    user: User,
    from: { disabled: boolean; directoryState: DirectoryState },
    to: { disabled: boolean; directoryState: DirectoryState },
    provider: string,
    why: Record<string, unknown>,
  ): Promise<boolean> {
    const fields = from.disabled === to.disabled ? ['directory_state'] : ['disabled'];
    const swapped = await this.deps.commands.within(
      (trx) => this.deps.store.swapAccountState(user.id, from, to, trx),
      (done): AuditInput | null =>
        done
          ? {
              action: 'user.updated',
              actor,
              target: userTarget(user),
              details: { fields, disabled: to.disabled, directory_state: to.directoryState, provider, ...why },
            }
          : null,
    );
    if (swapped) this.deps.changed(user.id);
    return swapped;
  }
}
