import type { Knex } from 'knex';
import { ensureSchema, type TableDef } from '../src/db/schema.js';
import { coreTables } from './20261125000000_core.js';

/**
 * The second factor: a user's factors (an authenticator app's TOTP secret, encrypted; passkeys
 * and security keys by credential id and public key) and their one-time recovery codes (SHA-256
 * only). Users gain `mfa_enabled`, web sessions `mfa_at` (when their holder last proved a factor).
 */
export const secondFactorTables: TableDef[] = [
  {
    name: 'mfa_factors',
    columns: {
      id: (t) => t.string('id', 36).primary(),
      user_id: (t) => t.string('user_id', 36).notNullable().references('users.id').onDelete('CASCADE'),
      kind: (t) => t.string('kind', 16).notNullable(),
      label: (t) => t.string('label', 128).notNullable().defaultTo(''),
      // totp: the secret, AES-256-GCM under the service's secret key
      secret: (t) => t.text('secret').nullable(),
      // totp: the last time step accepted (a code is taken once)
      last_step: (t) => t.bigInteger('last_step').nullable(),
      // webauthn: the credential (base64url), its public key (base64url), sign counter, transports (JSON)
      credential_id: (t) => t.string('credential_id', 1024).nullable(),
      public_key: (t) => t.text('public_key').nullable(),
      counter: (t) => t.bigInteger('counter').notNullable().defaultTo(0),
      transports: (t) => t.text('transports').nullable(),
      confirmed: (t) => t.boolean('confirmed').notNullable().defaultTo(false),
      created_at: (t) => t.bigInteger('created_at').notNullable().defaultTo(0),
      last_used_at: (t) => t.bigInteger('last_used_at').nullable(),
    },
    indexes: [
      { name: 'mfa_factors_user_idx', columns: ['user_id'] },
      { name: 'mfa_factors_credential_idx', columns: ['credential_id'], unique: true },
    ],
  },
  {
    name: 'mfa_recovery_codes',
    columns: {
      id: (t) => t.increments('id').primary(),
      user_id: (t) => t.string('user_id', 36).notNullable().references('users.id').onDelete('CASCADE'),
      code_hash: (t) => t.string('code_hash', 64).notNullable(),
      used_at: (t) => t.bigInteger('used_at').nullable(),
      created_at: (t) => t.bigInteger('created_at').notNullable().defaultTo(0),
    },
    indexes: [{ name: 'mfa_recovery_user_idx', columns: ['user_id'] }],
  },
];

export async function up(knex: Knex): Promise<void> {
  await ensureSchema(knex, [...coreTables.filter((t) => t.name === 'users' || t.name === 'api_keys'), ...secondFactorTables]);
}

// additive migrations are never rolled back: dropping tables would lose data
export async function down(): Promise<void> {}
