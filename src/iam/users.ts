import type { Knex } from 'knex';
import type { EventBus } from '../bus/bus.js';
import { DomainError, fieldError } from '../errors.js';
import { isUniqueViolation } from '../db/knex.js';
import { ADMIN_GROUP, ADMIN_USERS_PERMISSION } from './permissions.js';
import { afreshOnFirstReach, holdsHostAccess, type Afresh, type EndEveryCredential } from './afresh.js';
import { administers, guardBootAdminFlag, guardBootstrapRemoval, guardLastAdmin } from './last-admin.js';
import type { Passwords } from './passwords.js';
import { requireStrongPassword } from '../password-strength.js';
import { guardHostBoundary, holds, isSelf, isTrusted, type Actor } from './policy.js';
import type { User } from './store.js';
import type { CommandPath } from './commands.js';
import { LoginWrites, userTarget } from './login-writes.js';
import { joinedGroups, refused, UserRules, type UserRulesDeps } from './user-rules.js';
import { changeDetails, unchanged, type UserChange } from './user-changes.js';

export type { UserChange } from './user-changes.js';

export { DIRECTORY_RECHECK_ACTOR, LOGIN_MAPPING_ACTOR, userTarget } from './login-writes.js';

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

export interface UserAdminDeps extends UserRulesDeps {
  passwords: Passwords;
  bus: EventBus;
  /** every change runs here: its event in its transaction, a refusal recorded */
  commands: CommandPath;
  /** ends the user's web sessions but `keep` and drops what the old password proved */
  passwordChanged(userId: string, keep: string | null): Promise<void>;
  /** an account being disabled: its sessions and keys end for good, in the same transaction */
  accountDisabled(userId: string, trx: Knex): Promise<void>;
  /** an account starting afresh (src/iam/afresh.ts): the credentials area's part */
  endEveryCredential: EndEveryCredential;
  /** the bootstrap admin's username: every start of the service sets its superadmin flag from SERVICE_ADMIN_FORCE_SUPERADMIN */
  bootAdmin?: string;
  /** the bootstrap bot's username: like the admin, made again at every start when missing */
  bootBot?: string;
}

/**
 * The only writer of users: creating, changing and deleting them under the rules every caller
 * obeys (the admin API, the CLI, the login chain): groups and permissions must exist, INT_ADMIN
 * keeps an enabled member, and the host boundary of src/iam/policy.ts holds: host permissions
 * are granted, and accounts that reach the host taken over, only by a trusted actor.
 * Errors are DomainErrors.
 */
export class UserAdmin extends UserRules {
  /** the writes of the login chain and the directory recheck (src/iam/login-writes.ts) */
  readonly logins: LoginWrites;

  constructor(protected override readonly deps: UserAdminDeps) {
    super(deps);
    this.logins = new LoginWrites({
      store: deps.store,
      commands: deps.commands,
      changed: (userId) => this.changed(userId),
      grants: async (actor, user, groups) => {
        await this.checkRefs({ groups });
        return this.guardHostGrants(actor, user, { groups });
      },
      endEveryCredential: deps.endEveryCredential,
      passwordChanged: deps.passwordChanged,
    });
  }

  async create(actor: Actor, input: NewUserInput): Promise<User> {
    const { store, passwords } = this.deps;
    return this.deps.commands.run({ action: 'user.created', actor, target: { type: 'user', name: input.username } }, async () => {
      // a role is trust handed out: rolesAllowed's step-up gate applies the same rule to it
      if (input.password) await this.guardCredentialMinting(actor, 'create an account with a password');
      if (input.roles?.length) await this.rolesAllowed(actor);
      guardBootAdminFlag(this.deps.bootAdmin, { username: input.username, roles: [] }, input.roles ?? []);
      await this.checkRefs(input);
      const granted = await this.guardHostGrants(actor, { groups: [], extraPermissions: [] }, input);
      if (input.password) requireStrongPassword(input.password, 'password', [input.username, input.email, input.displayName]);
      const hashedPassword = input.password ? await passwords.hash(input.password) : null;
      let user: User;
      try {
        user = await this.deps.commands.within(
          async (trx) => {
            // the groups it joins as the write finds them (locked): one that came to reach the host meanwhile is judged again
            await store.lockGroups(input.groups ?? [], trx);
            const none = { id: '', username: input.username, groups: [], extraPermissions: [], roles: [] };
            await this.guardHostAtWrite(actor, none, { groups: input.groups, extraPermissions: input.extraPermissions }, trx);
            const u = await store.createUser(
              {
                username: input.username,
                email: input.email ?? null,
                displayName: input.displayName || null,
                hashedPassword,
                passwordTrusted: Boolean(hashedPassword) && isTrusted(actor),
                groups: input.groups ?? [],
                extraPermissions: input.extraPermissions ?? [],
                roles: input.roles ?? [],
              },
              trx,
            );
            // a user created without a password is SSO-only: no local identity until one is set
            if (input.password) await store.linkIdentity(u.id, 'local', u.username, trx);
            return u;
          },
          (u) => ({
            action: 'user.created',
            actor,
            target: userTarget(u),
            details: {
              groups: u.groups,
              extra_permissions: u.extraPermissions,
              roles: u.roles,
              password: Boolean(input.password),
              ...(granted.length ? { host_permissions: granted } : {}),
            },
          }),
        );
      } catch (err) {
        if (isUniqueViolation(err)) throw new DomainError('conflict', `username ${input.username} is taken`);
        throw err;
      }
      this.changed(user.id);
      return user;
    });
  }

  /** `keepSession`: the web session making the change, which a new password does not end. */
  async update(actor: Actor, user: User, change: UserChange, keepSession: string | null = null): Promise<User> {
    const { store, passwords } = this.deps;
    return this.deps.commands.run({ action: 'user.updated', actor, target: userTarget(user) }, async () => {
      await this.guardTakeover(actor, user, change);
      if (change.roles && change.roles.some((r) => !user.roles.includes(r))) await this.rolesAllowed(actor);
      else if (change.roles) guardHostBoundary(actor, isTrusted(actor) ? [] : ['role:superadmin'], 'set roles');
      if (change.roles) guardBootAdminFlag(this.deps.bootAdmin, user, change.roles);
      // a scoped key is not its owner (src/iam/policy.ts isSelf): it never changes its owner's credentials
      if (actor.keyScopes && actor.userId === user.id && (change.password || change.email !== undefined))
        throw refused("a scoped API key cannot change its owner's password or e-mail address");
      // one's own password is changed with the current one (setPassword), whatever the route
      if (change.password && actor.userId === user.id)
        throw fieldError(
          'password',
          'your own password is changed with your current one: POST /api/users/{id}/password with current_password (the account page)',
        );
      if (change.password) await this.guardCredentialMinting(actor, "set another account's password");
      await this.checkRefs(change);
      const granted = await this.guardHostGrants(actor, user, change);
      const next = { groups: change.groups ?? user.groups, disabled: change.disabled ?? user.disabled, roles: change.roles ?? user.roles };
      const { password, ...rest } = change;
      if (password) requireStrongPassword(password, 'password', [user.username, rest.email ?? user.email, rest.displayName ?? user.displayName]);
      const hashedPassword = password ? await passwords.hash(password) : undefined;
      // the fields whose value changes, judged by the row as this transaction finds it (another
      // change may have landed since `user` was read): a change to what the user holds already is
      // no event (`demote` of a user who is no superadmin)
      let before = user;
      let fields: string[] = [];
      let afresh: Afresh | null = null;
      // enabling an account its directory's end disabled keeps it (the end is not applied again
      // until the account has been back there); disabling is the administrator's own
      const turned = change.disabled !== undefined && change.disabled !== user.disabled;
      const directoryState = turned ? (!change.disabled && user.directoryState === 'ended' ? 'kept' : null) : undefined;
      const updated = await this.deps.commands.within(
        async (trx) => {
          // judged again as the transaction finds the account and the groups it joins (locked): a
          // grant that landed meanwhile is not handed on by one who may not, and is seen to start it afresh
          await store.lockGroups([...joinedGroups(user, change), ...(administers(user) ? [ADMIN_GROUP] : [])], trx);
          await guardLastAdmin(store, trx, user, next);
          before = (await store.lockUser(user.id, trx)) ?? user;
          const reachedHost = await holdsHostAccess(store, before, trx);
          await this.guardHostAtWrite(actor, before, change, trx);
          fields = (Object.keys(rest) as (keyof typeof rest)[]).filter((k) => rest[k] !== undefined && !unchanged(before, k, rest[k]));
          await store.updateUser(
            user.id,
            {
              ...rest,
              displayName: rest.displayName === '' ? null : rest.displayName,
              directoryState,
              ...(hashedPassword ? { hashedPassword, passwordTrusted: isTrusted(actor) } : {}),
            },
            trx,
          );
          if (password) await store.linkIdentity(user.id, 'local', user.username, trx);
          // a disabled account's credentials end with it (as its directory's end does): enabling it again brings none back
          if (turned && change.disabled) await this.deps.accountDisabled(user.id, trx);
          afresh = await afreshOnFirstReach(store, trx, user.id, reachedHost, this.deps.endEveryCredential);
          return (await store.userById(user.id, trx))!;
        },
        (u) => [
          ...(fields.length
            ? [
                {
                  action: 'user.updated' as const,
                  actor,
                  target: userTarget(u),
                  details: { ...changeDetails(before, u, fields, granted), ...(afresh ? { started_afresh: afresh } : {}) },
                },
              ]
            : []),
          ...(password ? [{ action: 'user.password_changed' as const, actor, target: userTarget(u) }] : []),
        ],
      );
      if (afresh) await this.deps.passwordChanged(user.id, null);
      else if (password) await this.deps.passwordChanged(user.id, keepSession);
      this.changed(user.id);
      return updated;
    });
  }

  async remove(actor: Actor, user: User): Promise<void> {
    await this.deps.commands.run({ action: 'user.deleted', actor, target: userTarget(user) }, async () => {
      await this.guardTakeover(actor, user);
      guardBootstrapRemoval([this.deps.bootAdmin, this.deps.bootBot], user);
      await this.deps.commands.within(
        async (trx) => {
          await guardLastAdmin(this.deps.store, trx, user, null);
          await this.deps.store.deleteUser(user.id, trx);
        },
        () => ({ action: 'user.deleted', actor, target: userTarget(user), details: { groups: user.groups } }),
      );
      this.changed(user.id);
      this.deps.bus.emit('iam:password_changed', { user_id: user.id });
    });
  }

  /**
   * Sets a password: oneself, proving the current one (`current`: the attempt gate's check of
   * it, src/auth/reauth.ts), or whoever administers users and may take this account over (the
   * host boundary). A scoped key never changes its owner's password. `keepSession`: the web
   * session making the change, which the new password does not end.
   */
  async setPassword(
    actor: Actor,
    user: User,
    password: string,
    /** `field`: what the caller calls the new password (a refusal names it) */
    opts: { keepSession?: string | null; current?: (() => Promise<void>) | null; field?: string } = {},
  ): Promise<void> {
    await this.deps.commands.run({ action: 'user.password_changed', actor, target: userTarget(user) }, async () => {
      if (actor.keyScopes && actor.userId === user.id) throw refused("a scoped API key cannot change its owner's password or e-mail address");
      if (isSelf(actor, user.id)) {
        if (!opts.current) throw fieldError('current_password', 'is required to change your own password');
        await opts.current();
      } else {
        if (!holds(actor, ADMIN_USERS_PERMISSION)) throw refused(`missing permission ${ADMIN_USERS_PERMISSION}`);
        await this.guardCredentialMinting(actor, "set another account's password");
        await this.guardTakeover(actor, user);
      }
      requireStrongPassword(password, opts.field ?? 'password', [user.username, user.email, user.displayName]);
      const hashedPassword = await this.deps.passwords.hash(password);
      await this.deps.commands.within(
        async (trx) => {
          const locked = (await this.lockForCredential(actor, user.id, trx)) ?? user;
          // one's own change proves the password before it, and is as trusted as that one was
          const passwordTrusted = isTrusted(actor) || (isSelf(actor, user.id) && locked.passwordTrusted);
          await this.deps.store.updateUser(user.id, { hashedPassword, passwordTrusted }, trx);
          await this.deps.store.linkIdentity(user.id, 'local', user.username, trx);
        },
        () => ({ action: 'user.password_changed', actor, target: userTarget(user), details: { own: actor.userId === user.id } }),
      );
      await this.deps.passwordChanged(user.id, opts.keepSession ?? null);
    });
  }

  /** Every form of iam:permissions_changed about one user comes from here. */
  private changed(userId: string): void {
    this.deps.bus.emit('iam:permissions_changed', { scope: 'user', user_id: userId });
  }
}
