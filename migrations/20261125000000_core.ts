import type { Knex } from 'knex';
import { ensureSchema, type TableDef } from '../src/db/schema.js';

/**
 * The core schema. Timestamps are epoch milliseconds (bigint) so both dialects compare them
 * the same way; list-valued fields are JSON text.
 */
const now = (t: Knex.CreateTableBuilder, name: string) => t.bigInteger(name).notNullable().defaultTo(0);
const json = (t: Knex.CreateTableBuilder, name: string, def = '[]') => t.text(name).notNullable().defaultTo(def);

export const coreTables: TableDef[] = [
  {
    name: 'users',
    columns: {
      id: (t) => t.string('id', 36).primary(),
      username: (t) => t.string('username', 128).notNullable().unique(),
      email: (t) => t.string('email', 320).nullable(),
      display_name: (t) => t.string('display_name', 256).nullable(),
      hashed_password: (t) => t.string('hashed_password', 128).nullable(),
      roles: (t) => json(t, 'roles'),
      groups: (t) => json(t, 'groups'),
      extra_permissions: (t) => json(t, 'extra_permissions'),
      disabled: (t) => t.boolean('disabled').notNullable().defaultTo(false),
      created_at: (t) => now(t, 'created_at'),
      updated_at: (t) => now(t, 'updated_at'),
      // kept by the second-factor service: whether the user has a confirmed factor (read with the user, no join)
      mfa_enabled: (t) => t.boolean('mfa_enabled').notNullable().defaultTo(false),
      // kept by the directory recheck: 'ended' (disabled because its directory account ended),
      // 'kept' (an administrator enabled it again while it was), else null (src/iam/login-writes.ts)
      directory_state: (t) => t.string('directory_state', 16).nullable(),
      // whether a trusted actor set the password (or the account itself from one that was): src/iam/afresh.ts
      password_trusted: (t) => t.boolean('password_trusted').notNullable().defaultTo(false),
    },
    indexes: [{ name: 'users_email_idx', columns: ['email'] }],
  },
  {
    name: 'groups',
    columns: {
      name: (t) => t.string('name', 128).primary(),
      description: (t) => t.text('description').notNullable().defaultTo(''),
      permissions: (t) => json(t, 'permissions'),
      created_at: (t) => now(t, 'created_at'),
      updated_at: (t) => now(t, 'updated_at'),
    },
  },
  {
    name: 'user_identities',
    columns: {
      id: (t) => t.increments('id').primary(),
      user_id: (t) => t.string('user_id', 36).notNullable().references('users.id').onDelete('CASCADE'),
      provider: (t) => t.string('provider', 64).notNullable(),
      provider_user_id: (t) => t.string('provider_user_id', 512).notNullable(),
      created_at: (t) => now(t, 'created_at'),
    },
    indexes: [
      { name: 'user_identities_provider_uid', columns: ['provider', 'provider_user_id'], unique: true },
      { name: 'user_identities_user_idx', columns: ['user_id'] },
    ],
  },
  {
    // per-user API keys and web-session tokens: only the SHA-256 of the secret is kept
    name: 'api_keys',
    columns: {
      id: (t) => t.string('id', 36).primary(),
      user_id: (t) => t.string('user_id', 36).notNullable().references('users.id').onDelete('CASCADE'),
      kind: (t) => t.string('kind', 16).notNullable().defaultTo('key'),
      label: (t) => t.string('label', 128).notNullable().defaultTo(''),
      prefix: (t) => t.string('prefix', 32).notNullable().defaultTo(''),
      token_hash: (t) => t.string('token_hash', 64).notNullable().unique(),
      scopes: (t) => t.text('scopes').nullable(),
      created_at: (t) => now(t, 'created_at'),
      last_used_at: (t) => t.bigInteger('last_used_at').nullable(),
      expires_at: (t) => t.bigInteger('expires_at').nullable(),
      revoked_at: (t) => t.bigInteger('revoked_at').nullable(),
      // a web session: when its holder last proved a second factor (sign-in or step-up)
      mfa_at: (t) => t.bigInteger('mfa_at').nullable(),
      // a key minted with another key: it ends when that one is revoked
      parent_id: (t) => t.string('parent_id', 36).nullable(),
    },
    indexes: [{ name: 'api_keys_user_idx', columns: ['user_id'] }],
  },
  {
    // the role grant ledger: each (group, permission) a plugin grants is recorded once, so an
    // administrator's later revocation is never re-applied
    name: 'role_grants',
    columns: {
      id: (t) => t.increments('id').primary(),
      plugin_id: (t) => t.string('plugin_id', 128).notNullable(),
      role_id: (t) => t.string('role_id', 128).notNullable(),
      group_name: (t) => t.string('group_name', 128).notNullable(),
      permission: (t) => t.string('permission', 256).notNullable(),
      granted_at: (t) => now(t, 'granted_at'),
    },
    indexes: [{ name: 'role_grants_unique', columns: ['group_name', 'permission'], unique: true }],
  },
  {
    // encrypted settings store (AES-256-GCM under SERVICE_SECRET_KEY)
    name: 'secrets',
    columns: {
      namespace: (t) => t.string('namespace', 64).notNullable(),
      key: (t) => t.string('key', 128).notNullable(),
      ciphertext: (t) => t.text('ciphertext').notNullable(),
      updated_at: (t) => now(t, 'updated_at'),
    },
    indexes: [{ name: 'secrets_ns_key', columns: ['namespace', 'key'], unique: true }],
  },
  {
    // koa-session external store, shared by every instance
    name: 'web_sessions',
    columns: {
      id: (t) => t.string('id', 64).primary(),
      data: (t) => t.text('data').notNullable(),
      expires_at: (t) => t.bigInteger('expires_at').notNullable(),
    },
  },
  {
    name: 'login_failures',
    columns: {
      id: (t) => t.increments('id').primary(),
      username: (t) => t.string('username', 256).notNullable(),
      ip: (t) => t.string('ip', 64).notNullable(),
      at: (t) => now(t, 'at'),
    },
    indexes: [{ name: 'login_failures_lookup', columns: ['username', 'ip', 'at'] }],
  },
  {
    // one-time values: OIDC states, exchange codes, ws tickets; looked up by SHA-256
    name: 'one_time_values',
    columns: {
      hash: (t) => t.string('hash', 64).primary(),
      purpose: (t) => t.string('purpose', 32).notNullable(),
      data: (t) => t.text('data').notNullable(),
      expires_at: (t) => t.bigInteger('expires_at').notNullable(),
    },
  },
];

export async function up(knex: Knex): Promise<void> {
  await ensureSchema(knex, coreTables);
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
