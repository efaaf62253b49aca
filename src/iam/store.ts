import crypto from 'node:crypto';
import type { Knex } from 'knex';
import { onPostgres } from '../db/knex.js';
import { BaseModel } from '../db/model.js';
import { DomainError } from '../errors.js';

/** Users, groups and their linked identities: the objection models of their tables and the queries the IAM model makes. */

export interface User {
  id: string;
  username: string;
  email: string | null;
  displayName: string | null;
  hashedPassword: string | null;
  /** a trusted actor set the password, or the account itself from one that was (src/iam/afresh.ts) */
  passwordTrusted: boolean;
  roles: string[];
  groups: string[];
  extraPermissions: string[];
  disabled: boolean;
  /** has a confirmed second factor (kept by src/auth/mfa/) */
  mfaEnabled: boolean;
  /** what its directory account's end did to it (src/iam/login-writes.ts); null: nothing */
  directoryState: DirectoryState;
  createdAt: number;
  updatedAt: number;
}

/**
 * 'ended': disabled because the directory account behind it ended (its return there enables it
 * again); 'kept': an administrator enabled it while it was (the directory's end is not applied
 * again until the account has been back there).
 */
export type DirectoryState = 'ended' | 'kept' | null;

export interface Group {
  name: string;
  description: string;
  permissions: string[];
  createdAt: number;
  updatedAt: number;
}

export interface Identity {
  provider: string;
  providerUserId: string;
}

/**
 * The objection models of the three tables; their instances are the User, Group and Identity
 * above (each class takes its fields from the interface of the same shape).
 */
/* eslint-disable @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type -- each model class takes its fields from the interface of its name */
export interface UserModel extends User {}
export class UserModel extends BaseModel {
  static override tableName = 'users';
  static override jsonAttributes = ['roles', 'groups', 'extraPermissions'];
  static override booleanAttributes = ['disabled', 'mfaEnabled', 'passwordTrusted'];
  static override get relationMappings() {
    return { identities: { relation: BaseModel.HasManyRelation, modelClass: IdentityModel, join: { from: 'users.id', to: 'user_identities.user_id' } } };
  }
}

interface GroupModel extends Group {}
class GroupModel extends BaseModel {
  static override tableName = 'groups';
  static override idColumn = 'name';
  static override jsonAttributes = ['permissions'];
}

interface IdentityModel extends Identity {
  userId: string;
}
class IdentityModel extends BaseModel {
  static override tableName = 'user_identities';
}
/* eslint-enable @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type */

export interface NewUser {
  username: string;
  email?: string | null;
  displayName?: string | null;
  hashedPassword?: string | null;
  passwordTrusted?: boolean;
  roles?: string[];
  groups?: string[];
  extraPermissions?: string[];
  disabled?: boolean;
  mfaEnabled?: boolean;
  directoryState?: DirectoryState;
}

export type UserPatch = Partial<Omit<NewUser, 'username'>> & { username?: string };

const USER_FIELDS = [
  'username',
  'email',
  'displayName',
  'hashedPassword',
  'passwordTrusted',
  'roles',
  'groups',
  'extraPermissions',
  'disabled',
  'mfaEnabled',
  'directoryState',
] as const;
const GROUP_FIELDS = ['name', 'description', 'permissions'] as const;

/**
 * The fields of `input` a row has (a route body may carry more), those that are set: an
 * `undefined` means "not given", never "clear".
 */
function fieldsOf<T extends object>(input: T, fields: readonly string[]): Partial<T> {
  return Object.fromEntries(Object.entries(input).filter(([k, v]) => v !== undefined && fields.includes(k))) as Partial<T>;
}

/** A username another user holds in another case (a 409 where it is answered). */
export class NameTaken extends DomainError {
  constructor(wanted: string, held: string) {
    super('conflict', `username ${wanted} is taken (as ${held}: names must differ in more than case)`);
  }
}

export class IamStore {
  constructor(readonly db: Knex) {}

  async userById(id: string, trx: Knex = this.db): Promise<User | null> {
    return (await UserModel.query(trx).findById(id)) ?? null;
  }

  /**
   * Two accounts whose names differ only in case would share what is counted per login name
   * (the lockout folds case: src/auth/attempts.ts lockoutKey): a name another user holds in any
   * case is taken. The unique index on lower(username) holds it across instances (made by the
   * migrations where no such pair existed before); this holds it where it could not be made.
   */
  private async refuseCaseTwin(username: string, exceptId: string | null, trx: Knex): Promise<void> {
    // the same name in the same case is the unique constraint's to refuse
    const twin = trx('users').whereRaw('lower(username) = ?', [username.toLowerCase()]).whereNot('username', username).first('username');
    if (exceptId) twin.whereNot('id', exceptId);
    const held = (await twin) as { username: string } | undefined;
    if (held) throw new NameTaken(username, held.username);
  }

  /** Usernames (or group names) that differ only in case, each set sorted (a database an older release filled may hold some). */
  async caseTwins(table: 'users' | 'groups' = 'users'): Promise<string[][]> {
    const column = table === 'users' ? 'username' : 'name';
    const rows: Array<Record<string, string>> = await this.db(table)
      .whereRaw(`lower(${column}) IN (SELECT lower(${column}) FROM ${table} GROUP BY lower(${column}) HAVING count(*) > 1)`)
      .select(column);
    const twins = new Map<string, string[]>();
    for (const row of rows) twins.set(row[column]!.toLowerCase(), [...(twins.get(row[column]!.toLowerCase()) ?? []), row[column]!]);
    // sorted here, not by the database's collation
    return [...twins.values()].map((names) => names.sort()).sort((a, b) => (a[0]! < b[0]! ? -1 : 1));
  }

  async userByUsername(username: string, trx: Knex = this.db): Promise<User | null> {
    return (await UserModel.query(trx).findOne({ username })) ?? null;
  }

  /** Users whose id is one of `ids` or whose username is one of `names` (id and username only): one query. */
  async usersByIdOrName(ids: string[], names: string[]): Promise<Array<{ id: string; username: string }>> {
    if (ids.length === 0 && names.length === 0) return [];
    return this.db('users')
      .where((q) => {
        if (ids.length) q.whereIn('id', ids);
        if (names.length) q.orWhereIn('username', names);
      })
      .select('id', 'username');
  }

  async usersByEmail(email: string): Promise<User[]> {
    return UserModel.query(this.db).whereRaw('lower(email) = ?', [email.toLowerCase()]);
  }

  /** Every user by name, or the one named `username` in any case (names are unique regardless of case). */
  async listUsers(filter: { username?: string } = {}): Promise<User[]> {
    const query = UserModel.query(this.db).orderBy('username');
    return filter.username === undefined ? query : query.whereRaw('lower(username) = ?', [filter.username.toLowerCase()]);
  }

  async createUser(input: NewUser, trx: Knex = this.db): Promise<User> {
    await this.refuseCaseTwin(input.username, null, trx);
    const now = Date.now();
    return UserModel.query(trx).insert({
      email: null,
      displayName: null,
      hashedPassword: null,
      roles: [],
      groups: [],
      extraPermissions: [],
      disabled: false,
      ...fieldsOf(input, USER_FIELDS),
      id: crypto.randomUUID(),
      createdAt: now,
      updatedAt: now,
    });
  }

  async updateUser(id: string, patch: UserPatch, trx: Knex = this.db): Promise<void> {
    await UserModel.query(trx)
      .findById(id)
      .patch({ ...fieldsOf(patch, USER_FIELDS), updatedAt: Date.now() });
  }

  /**
   * Sets `disabled` and `directoryState` when the row still holds `from` (a compare-and-set: two
   * rounds or a round and a sign-in change an account once); whether it changed.
   */
  async swapAccountState(
    id: string,
    from: { disabled: boolean; directoryState: DirectoryState },
    to: { disabled: boolean; directoryState: DirectoryState },
    trx: Knex = this.db,
  ): Promise<boolean> {
    const q = trx('users').where({ id, disabled: from.disabled });
    if (from.directoryState === null) q.whereNull('directory_state');
    else q.andWhere('directory_state', from.directoryState);
    return (await q.update({ disabled: to.disabled, directory_state: to.directoryState, updated_at: Date.now() })) > 0;
  }

  /** Renames a user and its local identity (the name a local login types) together. */
  async renameUser(id: string, from: string, to: string, trx: Knex): Promise<void> {
    await this.refuseCaseTwin(to, id, trx);
    await UserModel.query(trx).findById(id).patch({ username: to, updatedAt: Date.now() });
    await trx('user_identities').where({ user_id: id, provider: 'local', provider_user_id: from }).update({ provider_user_id: to });
  }

  async deleteUser(id: string, trx: Knex = this.db): Promise<void> {
    await UserModel.query(trx).deleteById(id);
  }

  /** The external identities linked to each of these users, oldest first. */
  async identitiesOf(userIds: string[]): Promise<Map<string, Identity[]>> {
    const out = new Map<string, Identity[]>();
    if (userIds.length === 0) return out;
    const rows = await UserModel.relatedQuery<IdentityModel>('identities', this.db).for(userIds).orderBy('id');
    for (const r of rows) out.set(r.userId, [...(out.get(r.userId) ?? []), { provider: r.provider, providerUserId: r.providerUserId }]);
    return out;
  }

  async userByIdentity(provider: string, providerUserId: string): Promise<User | null> {
    const user = await UserModel.query(this.db)
      .joinRelated('identities')
      .findOne({ 'identities.provider': provider, 'identities.provider_user_id': providerUserId })
      .select('users.*');
    return user ?? null;
  }

  /** The users with an identity at `provider`. */
  async usersLinkedTo(provider: string): Promise<User[]> {
    return UserModel.query(this.db).joinRelated('identities').where('identities.provider', provider).select('users.*');
  }

  /** Links a login at `provider` to a user; false when that identity was linked already (to this user or another). */
  async linkIdentity(userId: string, provider: string, providerUserId: string, trx: Knex = this.db): Promise<boolean> {
    // plain knex for the insert: objection answers with the model whether or not a row was written
    const inserted = await trx('user_identities')
      .insert({ user_id: userId, provider, provider_user_id: providerUserId, created_at: Date.now() })
      .onConflict(['provider', 'provider_user_id'])
      .ignore()
      .returning('id');
    return inserted.length > 0;
  }

  async listGroups(): Promise<Group[]> {
    return GroupModel.query(this.db).orderBy('name');
  }

  async group(name: string, trx: Knex = this.db): Promise<Group | null> {
    return (await GroupModel.query(trx).findById(name)) ?? null;
  }

  /** The group whose name is `name` in any case (names are ASCII: lower() folds them on both databases). */
  async groupInAnyCase(name: string, trx: Knex = this.db): Promise<Group | null> {
    return (await GroupModel.query(trx).whereRaw('lower(name) = ?', [name.toLowerCase()]).first()) ?? null;
  }

  async groupsNamed(names: readonly string[], trx: Knex = this.db): Promise<Group[]> {
    if (names.length === 0) return [];
    return GroupModel.query(trx).findByIds([...names]);
  }

  async createGroup(input: { name: string; description?: string; permissions?: string[] }, trx: Knex = this.db): Promise<Group> {
    const now = Date.now();
    return GroupModel.query(trx).insert({ description: '', permissions: [], ...fieldsOf(input, GROUP_FIELDS), createdAt: now, updatedAt: now });
  }

  /** Creates the group unless one of that name exists, which stays as it is; whether it was created. */
  async createGroupIfMissing(input: { name: string; description?: string; permissions?: string[] }): Promise<boolean> {
    const now = Date.now();
    // plain knex for the insert: objection answers with the model whether or not a row was written
    const row = GroupModel.fromJson({ description: '', permissions: [], ...fieldsOf(input, GROUP_FIELDS), createdAt: now, updatedAt: now }).$toDatabaseJson();
    const inserted = await this.db('groups').insert(row).onConflict('name').ignore().returning('name');
    return inserted.length > 0;
  }

  /**
   * The user, its row locked until `trx` ends: a credential written for it and a grant that makes
   * it reach the host are judged one after the other (PostgreSQL; on SQLite the write lock, taken
   * first as lockGroup does).
   */
  async lockUser(id: string, trx: Knex): Promise<User | null> {
    await this.writeLock('users', 'id', id, trx);
    return (await UserModel.query(trx).findById(id).forUpdate()) ?? null;
  }

  /** The groups `names` (those that exist), their rows locked until `trx` ends, in name order (no two writers wait on each other). */
  async lockGroups(names: readonly string[], trx: Knex): Promise<void> {
    for (const name of [...new Set(names)].sort()) await this.lockGroup(name, trx);
  }

  /** The group, its row locked until `trx` ends (PostgreSQL; SQLite has one writer anyway). */
  async lockGroup(name: string, trx: Knex): Promise<Group | null> {
    await this.writeLock('groups', 'name', name, trx);
    return (await GroupModel.query(trx).findById(name).forUpdate()) ?? null;
  }

  /**
   * SQLite has no row locks (knex drops forUpdate): a write takes the database's write lock
   * first, so two connections that both read before writing cannot end in "database is locked".
   */
  private async writeLock(table: 'users' | 'groups', key: 'id' | 'name', value: string, trx: Knex): Promise<void> {
    if (!onPostgres(this.db))
      await trx(table)
        .where(key, value)
        .update({ updated_at: trx.raw('updated_at') });
  }

  async updateGroup(name: string, patch: { description?: string; permissions?: string[] }, trx: Knex = this.db): Promise<void> {
    // never the name: a rename rewrites the members too (renameOrDeleteGroup)
    await GroupModel.query(trx)
      .findById(name)
      .patch({ ...fieldsOf(patch, ['description', 'permissions']), updatedAt: Date.now() });
  }

  /** Members of a group (JSON list column: filtered after a coarse LIKE); `lock`: their rows locked until `trx` ends. */
  async membersOf(group: string, trx: Knex = this.db, lock = false): Promise<User[]> {
    // group names cannot hold % or quotes (schema), so this LIKE is a safe coarse filter
    const query = UserModel.query(trx).where('groups', 'like', `%${JSON.stringify(group)}%`);
    // locked in id order: two writers locking members of two groups never wait on each other
    const users = await (lock ? query.orderBy('id').forUpdate() : query);
    return users.filter((u) => u.groups.includes(group));
  }

  /** Removes `name` from every user's `groups` while no group has that name (a stale membership). */
  async forgetGroupName(name: string): Promise<void> {
    await this.db.transaction(async (trx) => {
      if (await this.group(name, trx)) return;
      for (const u of await this.membersOf(name, trx)) {
        await UserModel.query(trx)
          .findById(u.id)
          .patch({ groups: u.groups.filter((g) => g !== name), updatedAt: Date.now() });
      }
    });
  }

  /** Renames (newName) or deletes (null) a group and rewrites every member's `groups`, in one transaction. */
  async renameOrDeleteGroup(name: string, newName: string | null, outer: Knex | null = null): Promise<string[]> {
    const run = (fn: (trx: Knex) => Promise<string[]>) => (outer ? fn(outer) : this.db.transaction(fn));
    return run(async (trx) => {
      const group = await this.group(name, trx);
      if (!group) return [];
      // locked (PostgreSQL; SQLite has one writer anyway) so a concurrent membership edit cannot be overwritten
      const members = await UserModel.query(trx).select('id', 'groups').forUpdate();
      if (newName) {
        // the old row goes first: names are unique in any case, and a rename may change only the case
        await GroupModel.query(trx).deleteById(name);
        await GroupModel.query(trx).insert({ ...group, name: newName, updatedAt: Date.now() });
        await trx('role_grants').where({ group_name: name }).update({ group_name: newName });
      } else {
        await trx('role_grants').where({ group_name: name }).delete();
      }
      const touched: string[] = [];
      for (const m of members) {
        if (!m.groups.includes(name)) continue;
        const next = m.groups.filter((g) => g !== name);
        if (newName && !next.includes(newName)) next.push(newName);
        await UserModel.query(trx).findById(m.id).patch({ groups: next, updatedAt: Date.now() });
        touched.push(m.id);
      }
      if (!newName) await GroupModel.query(trx).deleteById(name);
      return touched;
    });
  }
}
