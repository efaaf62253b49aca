import crypto from 'node:crypto';
import type { Knex } from 'knex';
import type { Config } from '../config.js';
import { DEFAULT_GROUPS, ADMIN_GROUP } from './permissions.js';
import { IamStore } from './store.js';
import { Passwords } from './passwords.js';
import { SecretsStore } from './secrets.js';
import type { Actor } from './policy.js';
import type { AuditInput } from './audit.js';
import type { CommandPath } from './commands.js';
import type { EndEveryCredential } from './afresh.js';

type SeedConfig = Pick<
  Config,
  | 'adminUser'
  | 'adminPassword'
  | 'adminPasswordConfigured'
  | 'botUser'
  | 'botPassword'
  | 'botPasswordConfigured'
  | 'adminForceSuperadmin'
  | 'secretKey'
  | 'secretKeyKept'
  | 'bcryptCost'
>;
type PinConfig = Pick<Config, 'adminUser' | 'adminPasswordConfigured' | 'botUser' | 'botPasswordConfigured'>;

export type PasswordVariable = 'SERVICE_ADMIN_PASSWORD' | 'SERVICE_BOT_PASSWORD';

/**
 * Where the fingerprint of the password last applied from the environment is kept, one entry per
 * bootstrap account (`<variable>:<username>`), encrypted like every entry of the secrets store.
 * The fingerprint is an HMAC under a key derived from the master key: it tells whether the
 * environment's value changed, and never gives the password back.
 */
export const ENV_PASSWORD_NAMESPACE = 'core/bootstrap';
export const entryKey = (variable: PasswordVariable, username: string) => `${variable}:${username}`;

export function fingerprint(masterKey: string, username: string, password: string): string {
  const key = Buffer.from(crypto.hkdfSync('sha256', masterKey, 'service-bootstrap-password', username, 32));
  return crypto.createHmac('sha256', key).update(password, 'utf8').digest('base64url');
}

/** A password the environment applied to an existing account, replacing the one it had. */
export interface EnvPasswordApplied {
  username: string;
  variable: PasswordVariable;
  /**
   * `changed`: the variable has a new value; `first`: no earlier value of it is known here;
   * `promoted`: the account became superadmin (SERVICE_ADMIN_FORCE_SUPERADMIN) with another password
   */
  why: 'changed' | 'first' | 'promoted';
}

/** How a seeding runs: the service's boot, or a seed command (`service-core seed`, `npx knex seed:run`). */
export interface SeedOptions {
  /**
   * `boot`: the admin's superadmin flag follows SERVICE_ADMIN_FORCE_SUPERADMIN, set or cleared
   * (DESIGN: applied by the service's boot only). `command`: what is missing is created, and
   * no existing account's roles change.
   */
  mode: 'boot' | 'command';
  /** who seeds, as the trail records it: SERVICE_ACTOR at boot, CLI_ACTOR for the commands */
  actor: Actor;
  /** every change runs here: its event in its transaction */
  commands: Pick<CommandPath, 'within'>;
  /** what the admin made superadmin loses: the credentials area's part (src/iam/afresh.ts) */
  endEveryCredential: EndEveryCredential;
  /** hashing on this thread at the configured cost (`knex seed:run`, which has no pool of its own) */
  passwords?: Passwords;
}

/**
 * Idempotent seeding, run on every boot and by the seed commands: default groups are created
 * if missing and never overwritten (operator edits survive); the admin and bot users are
 * created if missing; at boot only, the superadmin flag follows SERVICE_ADMIN_FORCE_SUPERADMIN.
 * A password set in the environment is applied when its value is new: differs from the value
 * last applied from the environment. A password set since then (CLI, UI, API) therefore stays
 * until the variable changes. Each change is an audit event by `actor`. Returns the ids of
 * users whose password changed (their cached verifications must go) and what the environment
 * replaced.
 */
export interface SeedResult {
  passwordChanged: string[];
  changed: boolean;
  envApplied: EnvPasswordApplied[];
  /** the boot took the superadmin role from the admin (SERVICE_ADMIN_FORCE_SUPERADMIN not true): its name, and whether an enabled superadmin is left */
  demoted: { username: string; superadminsLeft: boolean } | null;
}

export async function seedIam(db: Knex, config: SeedConfig, opts: SeedOptions): Promise<SeedResult> {
  const { actor, commands } = opts;
  const passwords = opts.passwords ?? new Passwords({ threads: 0, cost: config.bcryptCost });
  const store = new IamStore(db);
  const secrets = new SecretsStore(db, config.secretKey);
  let changed = false;
  for (const g of DEFAULT_GROUPS) {
    const created = await commands.within(
      (trx) => new IamStore(trx).createGroupIfMissing(g),
      (made) =>
        made
          ? {
              action: 'group.created',
              actor,
              target: { type: 'group', id: g.name, name: g.name },
              details: { permissions: g.permissions ?? [], default_group: true },
            }
          : null,
    );
    if (created) changed = true;
  }

  const passwordChanged: string[] = [];
  const envApplied: EnvPasswordApplied[] = [];
  let demoted: SeedResult['demoted'] = null;
  const bootstrap = [
    {
      username: config.adminUser,
      variable: 'SERVICE_ADMIN_PASSWORD' as const,
      password: config.adminPassword,
      configured: config.adminPasswordConfigured,
      groups: [ADMIN_GROUP],
      roles: config.adminForceSuperadmin ? ['superadmin'] : [],
    },
    {
      username: config.botUser,
      variable: 'SERVICE_BOT_PASSWORD' as const,
      password: config.botPassword,
      configured: config.botPasswordConfigured,
      groups: ['INT_USER'],
      roles: ['bot'],
    },
  ];
  for (const b of bootstrap) {
    const key = entryKey(b.variable, b.username);
    const print = fingerprint(config.secretKey, b.username, b.password);
    const existing = await store.userByUsername(b.username);
    if (!existing) {
      const hashed = await passwords.hash(b.password);
      // a seed command never hands out a role the boot would decide: the superadmin flag is the boot's
      const roles = opts.mode === 'boot' ? b.roles : b.roles.filter((r) => r !== 'superadmin');
      try {
        await commands.within(
          async (trx) => {
            const made = await new IamStore(trx).createUser({ username: b.username, hashedPassword: hashed, passwordTrusted: true, groups: b.groups, roles });
            await new IamStore(trx).linkIdentity(made.id, 'local', b.username);
            return made;
          },
          (made) => ({
            action: 'user.created',
            actor,
            target: { type: 'user', id: made.id, name: made.username },
            details: { groups: b.groups, roles, bootstrap: true },
          }),
        );
      } catch (err) {
        // another instance seeded it first
        if (!(await store.userByUsername(b.username))) throw err;
      }
      if (b.configured && config.secretKeyKept) await secrets.set(ENV_PASSWORD_NAMESPACE, key, print);
      changed = true;
      continue;
    }
    const patch: { hashedPassword?: string; passwordTrusted?: boolean; roles?: string[] } = {};
    let why: EnvPasswordApplied['why'] | null = null;
    if (b.configured) {
      // unreadable (written under another master key) counts as unknown
      const last = await secrets.get(ENV_PASSWORD_NAMESPACE, key);
      if (last !== print) {
        if (!(await passwords.verify(b.password, existing.hashedPassword))) {
          patch.hashedPassword = await passwords.hash(b.password);
          patch.passwordTrusted = true;
          why = last === null ? 'first' : 'changed';
        }
        // under a key nobody keeps (a CLI before the first start), nothing is worth recording
        if (config.secretKeyKept) await secrets.set(ENV_PASSWORD_NAMESPACE, key, print);
      }
    }
    let promotion: 'granted' | 'removed' | null = null;
    if (b.username === config.adminUser && opts.mode === 'boot' && existing.roles.includes('superadmin') !== config.adminForceSuperadmin) {
      promotion = config.adminForceSuperadmin ? 'granted' : 'removed';
      patch.roles = config.adminForceSuperadmin ? [...existing.roles, 'superadmin'] : existing.roles.filter((r) => r !== 'superadmin');
      // whoever held this name until now may have set its password or made its keys (a plain
      // administrator may take over the admin account while it is no superadmin): none of that
      // becomes trusted; its keys and sessions end, and the environment's password (the
      // development one where none is set) replaces any other that no trusted actor set
      const replaced = b.configured ? !(await passwords.verify(b.password, existing.hashedPassword)) : !existing.passwordTrusted;
      if (promotion === 'granted' && !patch.hashedPassword && replaced) {
        patch.hashedPassword = await passwords.hash(b.password);
        patch.passwordTrusted = true;
        why = 'promoted';
      }
    }
    if (Object.keys(patch).length === 0) continue;
    await commands.within(
      async (trx) => {
        const store = new IamStore(trx);
        await store.updateUser(existing.id, patch);
        if (promotion !== 'granted') return null;
        // nothing anyone set on the account before becomes trusted: its second factors (a passkey
        // alone signs in) and recovery codes go with its keys and sessions, and so do the
        // directory and single sign-on accounts linked to it (each signs in as it); it enrols again
        const ended = await opts.endEveryCredential(existing.id, trx);
        const identitiesUnlinked = await trx('user_identities').where({ user_id: existing.id }).whereNot({ provider: 'local' }).delete();
        return { ...ended, identities_unlinked: identitiesUnlinked };
      },
      (afresh) => {
        const target = { type: 'user', id: existing.id, name: existing.username };
        const events: AuditInput[] = [];
        if (promotion) {
          events.push({
            action: 'user.updated',
            actor,
            target,
            details: {
              [promotion === 'granted' ? 'roles_added' : 'roles_removed']: ['superadmin'],
              because: 'SERVICE_ADMIN_FORCE_SUPERADMIN',
              ...(afresh
                ? { credentials_revoked: afresh.credentials_revoked, factors_removed: afresh.factors_removed, identities_unlinked: afresh.identities_unlinked }
                : {}),
            },
          });
        }
        if (why) events.push({ action: 'user.password_changed', actor, target, details: { from: b.variable, why } });
        return events;
      },
    );
    if (why) envApplied.push({ username: b.username, variable: b.variable, why });
    if (promotion === 'removed') demoted = { username: b.username, superadminsLeft: await anySuperadmin(db) };
    if (patch.hashedPassword || promotion === 'granted') passwordChanged.push(existing.id);
    changed = true;
  }
  return { passwordChanged, changed, envApplied, demoted };
}

/** Whether an enabled account holds the superadmin role. */
async function anySuperadmin(db: Knex): Promise<boolean> {
  const rows: Array<{ roles: string | string[] }> = await db('users').where({ disabled: false }).select('roles');
  return rows.some((r) => (typeof r.roles === 'string' ? (JSON.parse(r.roles) as string[]) : r.roles).includes('superadmin'));
}

/**
 * Whether the environment sets `username`'s password: its variable, and whether this process's
 * environment has it (`inEnvironment`) or only an earlier start applied it (a process without
 * the service's environment, such as the CLI run by hand, can tell only that). Null: it does not.
 */
export async function envPasswordPin(db: Knex, config: PinConfig, username: string): Promise<{ variable: PasswordVariable; inEnvironment: boolean } | null> {
  const variable = envPasswordVariable(config, username);
  if (variable) return { variable, inEnvironment: true };
  const keys: { key: string }[] = await db('secrets').where({ namespace: ENV_PASSWORD_NAMESPACE }).select('key');
  const entry = keys.map(({ key }) => [key.slice(0, key.indexOf(':')), key.slice(key.indexOf(':') + 1)]).find(([, user]) => user === username);
  return entry ? { variable: entry[0] as PasswordVariable, inEnvironment: false } : null;
}

/** The variable of this environment that sets `username`'s password (when its value changes), or null. */
export function envPasswordVariable(config: PinConfig, username: string): PasswordVariable | null {
  if (username === config.adminUser && config.adminPasswordConfigured) return 'SERVICE_ADMIN_PASSWORD';
  if (username === config.botUser && config.botPasswordConfigured) return 'SERVICE_BOT_PASSWORD';
  return null;
}

/**
 * The bootstrap accounts whose password is still the public development default: the
 * environment sets none for them, and their stored hash still matches it (an account whose
 * password was changed since, or that is gone, is not named).
 */
export async function developmentPasswordsInUse(
  store: IamStore,
  config: Pick<Config, 'adminUser' | 'adminPassword' | 'adminPasswordConfigured' | 'botUser' | 'botPassword' | 'botPasswordConfigured'>,
  passwords: Passwords,
): Promise<string[]> {
  const candidates = [
    { username: config.adminUser, password: config.adminPassword, configured: config.adminPasswordConfigured },
    { username: config.botUser, password: config.botPassword, configured: config.botPasswordConfigured },
  ];
  const inUse: string[] = [];
  for (const c of candidates) {
    if (c.configured) continue;
    const user = await store.userByUsername(c.username);
    if (user?.hashedPassword && (await passwords.verify(c.password, user.hashedPassword))) inUse.push(c.username);
  }
  return inUse;
}
