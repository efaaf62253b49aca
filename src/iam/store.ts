import crypto from 'node:crypto';
import type { Knex } from 'knex';

/** Row mappers and queries for users, groups and identities (knex; JSON list columns parsed here). */

export interface User {
  id: string;
  username: string;
  email: string | null;
  displayName: string | null;
  hashedPassword: string | null;
  roles: string[];
  groups: string[];
  extraPermissions: string[];
  disabled: boolean;
  createdAt: number;
  updatedAt: number;
}

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

const list = (v: unknown): string[] => {
  if (Array.isArray(v)) return v.map(String);
  if (typeof v !== 'string' || v === '') return [];
  try {
    const parsed = JSON.parse(v);
    return Array.isArray(parsed) ? parsed.map(String) : [];
  } catch {
    return [];
  }
};

export function toUser(row: any): User {
  return {
    id: row.id,
    username: row.username,
    email: row.email ?? null,
    displayName: row.display_name ?? null,
    hashedPassword: row.hashed_password ?? null,
    roles: list(row.roles),
    groups: list(row.groups),
    extraPermissions: list(row.extra_permissions),
    disabled: Boolean(row.disabled),
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
  };
}

export function toGroup(row: any): Group {
  return {
    name: row.name,
    description: row.description ?? '',
    permissions: list(row.permissions),
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
  };
}

export interface NewUser {
  username: string;
  email?: string | null;
  displayName?: string | null;
  hashedPassword?: string | null;
  roles?: string[];
  groups?: string[];
  extraPermissions?: string[];
  disabled?: boolean;
}

export type UserPatch = Partial<Omit<NewUser, 'username'>> & { username?: string };

/** The column of each field a user is created or changed with. */
const USER_COLUMNS: Record<keyof UserPatch, string> = {
  username: 'username',
  email: 'email',
  displayName: 'display_name',
  hashedPassword: 'hashed_password',
  roles: 'roles',
  groups: 'groups',
  extraPermissions: 'extra_permissions',
  disabled: 'disabled',
};
/** columns holding a JSON list */
const LIST_COLUMNS = new Set(['roles', 'groups', 'extra_permissions']);

export class IamStore {
  constructor(readonly db: Knex) {}

  async userById(id: string, trx: Knex = this.db): Promise<User | null> {
    const row = await trx('users').where({ id }).first();
    return row ? toUser(row) : null;
  }

  async userByUsername(username: string, trx: Knex = this.db): Promise<User | null> {
    const row = await trx('users').where({ username }).first();
    return row ? toUser(row) : null;
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
    const rows = await this.db('users').whereRaw('lower(email) = ?', [email.toLowerCase()]);
    return rows.map(toUser);
  }

  async listUsers(): Promise<User[]> {
    return (await this.db('users').orderBy('username')).map(toUser);
  }

  async createUser(input: NewUser, trx: Knex = this.db): Promise<User> {
    const now = Date.now();
    const row = {
      id: crypto.randomUUID(),
      username: input.username,
      email: input.email ?? null,
      display_name: input.displayName ?? null,
      hashed_password: input.hashedPassword ?? null,
      roles: JSON.stringify(input.roles ?? []),
      groups: JSON.stringify(input.groups ?? []),
      extra_permissions: JSON.stringify(input.extraPermissions ?? []),
      disabled: input.disabled ?? false,
      created_at: now,
      updated_at: now,
    };
    await trx('users').insert(row);
    return toUser(row);
  }

  async updateUser(id: string, patch: UserPatch, trx: Knex = this.db): Promise<void> {
    const row: Record<string, unknown> = { updated_at: Date.now() };
    for (const [k, v] of Object.entries(patch) as Array<[keyof UserPatch, unknown]>) {
      if (v === undefined) continue;
      const column = USER_COLUMNS[k];
      if (!column) throw new Error(`updateUser: no field ${String(k)}`);
      row[column] = LIST_COLUMNS.has(column) ? JSON.stringify(v) : v;
    }
    await trx('users').where({ id }).update(row);
  }

  async deleteUser(id: string): Promise<void> {
    await this.db('users').where({ id }).delete();
  }

  async identitiesOf(userIds: string[]): Promise<Map<string, Identity[]>> {
    const out = new Map<string, Identity[]>();
    if (userIds.length === 0) return out;
    const rows = await this.db('user_identities').whereIn('user_id', userIds).orderBy('id');
    for (const r of rows) {
      const l = out.get(r.user_id) ?? [];
      l.push({ provider: r.provider, providerUserId: r.provider_user_id });
      out.set(r.user_id, l);
    }
    return out;
  }

  async userByIdentity(provider: string, providerUserId: string): Promise<User | null> {
    const row = await this.db('users')
      .join('user_identities', 'users.id', 'user_identities.user_id')
      .where({ 'user_identities.provider': provider, 'user_identities.provider_user_id': providerUserId })
      .first('users.*');
    return row ? toUser(row) : null;
  }

  async linkIdentity(userId: string, provider: string, providerUserId: string, trx: Knex = this.db): Promise<void> {
    await trx('user_identities')
      .insert({ user_id: userId, provider, provider_user_id: providerUserId, created_at: Date.now() })
      .onConflict(['provider', 'provider_user_id'])
      .ignore();
  }

  async listGroups(): Promise<Group[]> {
    return (await this.db('groups').orderBy('name')).map(toGroup);
  }

  async group(name: string, trx: Knex = this.db): Promise<Group | null> {
    const row = await trx('groups').where({ name }).first();
    return row ? toGroup(row) : null;
  }

  async groupsNamed(names: readonly string[]): Promise<Group[]> {
    if (names.length === 0) return [];
    return (await this.db('groups').whereIn('name', names as string[])).map(toGroup);
  }

  async createGroup(input: { name: string; description?: string; permissions?: string[] }, trx: Knex = this.db): Promise<Group> {
    const now = Date.now();
    const row = {
      name: input.name,
      description: input.description ?? '',
      permissions: JSON.stringify(input.permissions ?? []),
      created_at: now,
      updated_at: now,
    };
    await trx('groups').insert(row);
    return toGroup(row);
  }

  async updateGroup(name: string, patch: { description?: string; permissions?: string[] }, trx: Knex = this.db): Promise<void> {
    const row: Record<string, unknown> = { updated_at: Date.now() };
    if (patch.description !== undefined) row.description = patch.description;
    if (patch.permissions !== undefined) row.permissions = JSON.stringify(patch.permissions);
    await trx('groups').where({ name }).update(row);
  }

  /** Members of a group (JSON list column: filtered after a coarse LIKE). */
  async membersOf(group: string, trx: Knex = this.db): Promise<User[]> {
    // group names cannot hold % or quotes (schema), so this LIKE is a safe coarse filter
    const rows = await trx('users').where('groups', 'like', `%${JSON.stringify(group)}%`);
    return rows.map(toUser).filter((u) => u.groups.includes(group));
  }

  /** Renames (newName) or deletes (null) a group and rewrites every member's `groups`, in one transaction. */
  async renameOrDeleteGroup(name: string, newName: string | null): Promise<string[]> {
    return this.db.transaction(async (trx) => {
      const group = await this.group(name, trx);
      if (!group) return [];
      // locked (PostgreSQL; SQLite has one writer anyway) so a concurrent membership edit cannot be overwritten
      const members = (await trx('users').select('id', 'groups').forUpdate()).map((r: any) => ({ id: r.id as string, groups: list(r.groups) }));
      if (newName) {
        await trx('groups').insert({ name: newName, description: group.description, permissions: JSON.stringify(group.permissions), created_at: group.createdAt, updated_at: Date.now() });
        await trx('role_grants').where({ group_name: name }).update({ group_name: newName });
      } else {
        await trx('role_grants').where({ group_name: name }).delete();
      }
      const touched: string[] = [];
      for (const m of members) {
        if (!m.groups.includes(name)) continue;
        const next = m.groups.filter((g) => g !== name);
        if (newName && !next.includes(newName)) next.push(newName);
        await trx('users').where({ id: m.id }).update({ groups: JSON.stringify(next), updated_at: Date.now() });
        touched.push(m.id);
      }
      await trx('groups').where({ name }).delete();
      return touched;
    });
  }
}
