import path from 'node:path';
import type { Knex } from 'knex';
import type { Config } from '../config.js';
import { DomainError } from '../errors.js';
import { safeEqual } from '../digest.js';
import { checkValueOf, SecretsStore } from './secrets.js';
import { ENV_PASSWORD_NAMESPACE, entryKey, fingerprint } from './seed.js';
import type { CommandPath } from './commands.js';
import type { Actor } from './policy.js';

/**
 * The master key's check value, kept in `secret_key_check` (one row): the first boot that finds
 * none records it, every boot and CLI command after compares, and an instance or a command with
 * another SERVICE_SECRET_KEY is refused instead of reading the stored secrets as missing and
 * signing what the others cannot verify. `service-core rotate-secret-key` changes the key:
 * re-encrypts the settings store and the sealed TOTP secrets and replaces the check value, in
 * one transaction (docs/deploy.md, "Changing the master key").
 */

/** The refusal of a master key that is not the database's (boot fails with it; the CLI exits 1). */
export class SecretKeyMismatch extends DomainError {
  constructor(message: string) {
    super('conflict', message);
    this.name = 'SecretKeyMismatch';
  }
}

type KeyConfig = Pick<
  Config,
  | 'secretKey'
  | 'secretKeyKept'
  | 'fromEnv'
  | 'dataDir'
  | 'adminUser'
  | 'adminPassword'
  | 'adminPasswordConfigured'
  | 'botUser'
  | 'botPassword'
  | 'botPasswordConfigured'
>;

/** Where the configured key comes from, as an operator finds it. */
export function keySource(config: Pick<Config, 'fromEnv' | 'dataDir' | 'secretKeyKept'>): string {
  if (config.fromEnv.has('SERVICE_SECRET_KEY')) return 'SERVICE_SECRET_KEY';
  const file = path.join(config.dataDir, 'secret.key');
  return config.secretKeyKept ? file : `none: no SERVICE_SECRET_KEY and no ${file}`;
}

const FIX =
  'every instance and the CLI need the database\'s key. Start with that key, or, to change it, stop every instance and run `service-core rotate-secret-key` with the old one (docs/deploy.md, "Changing the master key")';

/** The secrets stored under the master key: the settings store's rows and the sealed TOTP secrets. */
interface Stored {
  settings: { namespace: string; key: string; ciphertext: string }[];
  totp: { id: string; user_id: string; secret: string }[];
}

async function storedSecrets(db: Knex): Promise<Stored> {
  const settings = await db('secrets').select('namespace', 'key', 'ciphertext').orderBy(['namespace', 'key']);
  const totp = await db('mfa_factors').whereNotNull('secret').select('id', 'user_id', 'secret').orderBy('id');
  return { settings, totp };
}

/** What of `stored` does not open under `store`'s key: settings secrets by `namespace/key`, authenticator apps by user id. */
function unopened(stored: Stored, store: SecretsStore): { settings: string[]; totpUserIds: string[] } {
  return {
    settings: stored.settings.filter((s) => store.unseal(s.ciphertext) === null).map((s) => `${s.namespace}/${s.key}`),
    totpUserIds: stored.totp.filter((t) => store.unseal(t.secret) === null).map((t) => t.user_id),
  };
}

/** What a rotation did (its audit event's details; never a value). */
export interface KeyRotation {
  /** settings secrets re-encrypted under the new key */
  settings: number;
  /** authenticator apps (TOTP secrets) re-encrypted */
  totp: number;
  /** settings secrets that did not open under the old key, deleted (`namespace/key`) */
  dropped: string[];
  /** users whose authenticator app did not open under the old key: left as it was, unusable */
  totpUnreadable: string[];
  /** bootstrap password variables whose record could not be carried (the command's environment has another value, or none) */
  bootstrapNotCarried: string[];
  /** the old key was lost: the configured key became the database's */
  oldKeyLost: boolean;
}

export interface RotateOptions {
  /** the new key; with `oldKeyLost`, the configured key (it becomes the database's) */
  to: string;
  oldKeyLost?: boolean;
  /** settings secrets that do not open under the old key are deleted instead of refusing the rotation */
  dropUnreadable?: boolean;
}

export class MasterKey {
  constructor(
    private readonly deps: {
      db: Knex;
      config: KeyConfig;
      commands: CommandPath;
    },
  ) {}

  /**
   * Compares the configured key with the database's check value, recording it (`record`, a kept
   * key) when there is none yet. A database without one (made before the check, or never
   * started) takes the key only when it opens more than half of the secrets already stored (or
   * none are), so two keys cannot both be taken; two first boots insert the same row and the
   * later one compares. Refuses with SecretKeyMismatch naming the problem and the fix.
   */
  async verify(opts: { record: boolean }): Promise<'matched' | 'recorded' | 'unrecorded'> {
    const { db, config } = this.deps;
    const mine = checkValueOf(config.secretKey);
    let row = await db('secret_key_check').where({ id: 1 }).first('check_value');
    if (!row) {
      const { opened, total } = this.tally(await storedSecrets(db), config.secretKey);
      const takes = total === 0 || opened * 2 > total;
      if (takes && opts.record && config.secretKeyKept)
        await db('secret_key_check').insert({ id: 1, check_value: mine, created_at: Date.now() }).onConflict('id').ignore();
      // another boot may have recorded its key meanwhile (before this one, or while it counted): the row that stands is compared
      row = await db('secret_key_check').where({ id: 1 }).first('check_value');
      if (!row && !takes) {
        throw new SecretKeyMismatch(
          `the master key (${keySource(config)}) opens ${opened} of the ${total} secrets stored in this database: it was set up with another key. ${FIX}; if that key is lost, \`service-core rotate-secret-key --old-key-lost\` makes this one the database's key`,
        );
      }
      if (!row) return 'unrecorded';
      if (safeEqual(row.check_value, mine)) return 'recorded';
    }
    if (!safeEqual(row.check_value, mine)) {
      throw new SecretKeyMismatch(`the master key (${keySource(config)}) is not the one this database was set up with: ${FIX}`);
    }
    return 'matched';
  }

  /**
   * The stored secrets that do not open under the configured key, written under another one (an
   * instance left running through a rotation): reads take them as unset. Settings secrets by
   * `namespace/key`, authenticator apps by their owner's username.
   */
  async unreadable(): Promise<{ settings: string[]; apps: string[] }> {
    const { db, config } = this.deps;
    const found = unopened(await storedSecrets(db), new SecretsStore(db, config.secretKey));
    const owners: { username: string }[] = found.totpUserIds.length
      ? await db('users').whereIn('id', found.totpUserIds).select('username').orderBy('username')
      : [];
    return { settings: found.settings, apps: owners.map((u) => u.username) };
  }

  /** How many of `stored` open under `key`. */
  private tally(stored: Stored, key: string): { opened: number; total: number } {
    const store = new SecretsStore(this.deps.db, key);
    const all = [...stored.settings.map((s) => s.ciphertext), ...stored.totp.map((t) => t.secret)];
    return { opened: all.filter((c) => store.unseal(c) !== null).length, total: all.length };
  }

  /**
   * Re-encrypts every secret of the settings store and every sealed TOTP secret under `to`,
   * carries the bootstrap password records (when this environment has the value they record)
   * and replaces the check value, in one transaction with its `secret_key.rotated` event. The
   * configured key must be the database's, unless `oldKeyLost`: then the configured key is
   * taken, and what does not open under it is lost (settings secrets deleted, authenticator apps
   * left unusable and named). Nothing running may hold the old key: the instances are stopped.
   */
  rotate(actor: Actor, opts: RotateOptions): Promise<KeyRotation> {
    const { db, config, commands } = this.deps;
    const target = { type: 'secret_key', id: null, name: null };
    return commands.run({ action: 'secret_key.rotated', actor, target }, async () => {
      const oldKeyLost = Boolean(opts.oldKeyLost);
      if (oldKeyLost) {
        const lost = await this.verify({ record: false }).then(
          () => false,
          (err) => (err instanceof SecretKeyMismatch ? true : Promise.reject(err)),
        );
        if (!lost)
          throw new DomainError(
            'conflict',
            `the configured master key (${keySource(config)}) is the database's: nothing is lost (to change it, run rotate-secret-key without --old-key-lost)`,
          );
      } else {
        await this.verify({ record: false });
        if (safeEqual(opts.to, config.secretKey)) throw new DomainError('validation_failed', 'the new key is the current one: nothing to rotate');
      }
      const from = new SecretsStore(db, config.secretKey);
      const next = new SecretsStore(db, opts.to);
      return commands.within(
        async (trx) => {
          // the check row first: its write lock holds off a boot or another rotation until this commits
          await trx('secret_key_check')
            .insert({ id: 1, check_value: checkValueOf(opts.to), created_at: Date.now(), rotated_at: Date.now() })
            .onConflict('id')
            .merge(['check_value', 'rotated_at']);
          const stored = await storedSecrets(trx);
          const done: KeyRotation = { settings: 0, totp: 0, dropped: [], totpUnreadable: [], bootstrapNotCarried: [], oldKeyLost };
          const unreadable = unopened(stored, from).settings;
          if (unreadable.length && !oldKeyLost && !opts.dropUnreadable) {
            throw new DomainError(
              'conflict',
              `${unreadable.length} stored secret${unreadable.length === 1 ? '' : 's'} (${unreadable.join(', ')}) did not open under the current key: written under another one. Start an instance with that key and set them again, or rotate with --drop-unreadable to delete them`,
            );
          }
          for (const s of stored.settings) {
            let plain = from.unseal(s.ciphertext);
            if (plain === null) {
              await trx('secrets').where({ namespace: s.namespace, key: s.key }).delete();
              done.dropped.push(`${s.namespace}/${s.key}`);
              continue;
            }
            if (s.namespace === ENV_PASSWORD_NAMESPACE) plain = this.carryBootstrap(s.key, plain, opts.to, done);
            await trx('secrets')
              .where({ namespace: s.namespace, key: s.key })
              .update({ ciphertext: next.seal(plain) });
            done.settings++;
          }
          for (const t of stored.totp) {
            const plain = from.unseal(t.secret);
            if (plain === null) {
              done.totpUnreadable.push(t.user_id);
              continue;
            }
            await trx('mfa_factors')
              .where({ id: t.id })
              .update({ secret: next.seal(plain) });
            done.totp++;
          }
          if (done.totpUnreadable.length) {
            const users: { id: string; username: string }[] = await trx('users').whereIn('id', done.totpUnreadable).select('id', 'username');
            done.totpUnreadable = done.totpUnreadable.map((id) => users.find((u) => u.id === id)?.username ?? id);
          }
          return done;
        },
        (done) => ({
          action: 'secret_key.rotated',
          actor,
          target,
          details: {
            settings_reencrypted: done.settings,
            totp_reencrypted: done.totp,
            old_key_lost: done.oldKeyLost,
            ...(done.dropped.length ? { settings_dropped: done.dropped } : {}),
            ...(done.totpUnreadable.length ? { totp_unreadable: done.totpUnreadable } : {}),
            ...(done.bootstrapNotCarried.length ? { bootstrap_not_carried: done.bootstrapNotCarried } : {}),
          },
        }),
      );
    });
  }

  /**
   * A bootstrap password record (src/iam/seed.ts) is an HMAC under the old key: it is made again
   * under the new one when this environment's variable has the value it records; otherwise it is
   * kept as it is, and the next start applies the variable if it differs from the account's password.
   */
  private carryBootstrap(key: string, recorded: string, to: string, done: KeyRotation): string {
    const { config } = this.deps;
    const variables = [
      { variable: 'SERVICE_ADMIN_PASSWORD' as const, username: config.adminUser, password: config.adminPassword, configured: config.adminPasswordConfigured },
      { variable: 'SERVICE_BOT_PASSWORD' as const, username: config.botUser, password: config.botPassword, configured: config.botPasswordConfigured },
    ];
    const b = variables.find((v) => entryKey(v.variable, v.username) === key);
    if (b?.configured && safeEqual(fingerprint(config.secretKey, b.username, b.password), recorded)) return fingerprint(to, b.username, b.password);
    done.bootstrapNotCarried.push(key.slice(0, key.indexOf(':')));
    return recorded;
  }
}
