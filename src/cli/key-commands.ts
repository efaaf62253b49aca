import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { DomainError } from '../errors.js';
import { isPlaceholderKey } from '../config-checks.js';
import { keySource } from '../iam/master-key.js';
import { readSecret } from './input.js';
import { CLI_ACTOR } from './context.js';
import { UsageError, type CommandEnv } from './output.js';

/** A new master key as the configuration would take it (src/settings-table.ts: 32 characters or more; production: no placeholder). */
function checkedKey(key: string, production: boolean): string {
  if (/\s/.test(key)) throw new UsageError('stdin: the new key must not contain spaces');
  if (key.length < 32) throw new UsageError('stdin: the new key must be 32 characters or more (`openssl rand -base64 48`)');
  if (production && isPlaceholderKey(key)) throw new UsageError('stdin: the new key is a placeholder: generate one with `openssl rand -base64 48`');
  return key;
}

/**
 * `rotate-secret-key`: the master key changed for the operator who means to, with every instance
 * stopped (docs/deploy.md, "Changing the master key"). The rotation itself (re-encryption and the
 * check value, in one transaction with its event) is the model's: src/iam/master-key.ts.
 */
export function secretKeyCommands(program: Command, { ctx, out }: CommandEnv): void {
  program
    .command('rotate-secret-key')
    .description(
      'change the master key with every instance stopped: the stored secrets and authenticator apps are re-encrypted under the new key, read from stdin (docs/deploy.md)',
    )
    .option('--generate', 'make the new key and write it to secret.key in the data dir (only where the key lives there, not in SERVICE_SECRET_KEY)')
    .option('--drop-unreadable', 'delete stored secrets that do not open under the current key (written under another) instead of refusing')
    .option(
      '--old-key-lost',
      "the database's key is lost: make the configured key its key; the secrets stored under the lost one are lost (settings deleted, authenticator apps unusable)",
    )
    .action(async (opts: { generate?: boolean; dropUnreadable?: boolean; oldKeyLost?: boolean }, cmd: Command) => {
      const oldKeyLost = Boolean(opts.oldKeyLost);
      if (oldKeyLost && opts.generate) throw new UsageError("--generate: not with --old-key-lost (the configured key becomes the database's)");
      const inEnv = ctx.config.fromEnv.has('SERVICE_SECRET_KEY');
      if (opts.generate && inEnv) {
        throw new UsageError(
          "--generate: the key is set in SERVICE_SECRET_KEY: give the new one on stdin (`openssl rand -base64 48 | service-core … rotate-secret-key`), then put it in every instance's environment",
        );
      }
      let to: string | null = null;
      if (!oldKeyLost)
        to = opts.generate
          ? crypto.randomBytes(32).toString('base64url')
          : checkedKey((await readSecret(ctx.io, 'New master key')).trim(), ctx.config.env === 'production');
      // with the old key lost and none configured, the key is made now (as the service would) and kept in secret.key
      const core = await ctx.core('write', { keyCheck: false, storesSecret: oldKeyLost });
      const config = ctx.config;
      // where the key lives in the data dir, the new one goes there: written beside it first, moved over it once the database took it
      const file = path.join(config.dataDir, 'secret.key');
      const staged = !inEnv && to !== null ? `${file}.new` : null;
      if (staged) {
        try {
          fs.writeFileSync(staged, to + '\n', { mode: 0o600, flag: 'wx' });
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'EEXIST')
            throw new DomainError(
              'conflict',
              `${staged} exists: an earlier rotation stopped half-way. If the database refuses ${file}, move ${staged} over it; else remove ${staged}, then try again`,
            );
          throw new DomainError('conflict', `cannot write ${staged}: ${(err as Error).message}`);
        }
      }
      let done;
      try {
        done = await core.iam.masterKey.rotate(CLI_ACTOR, { to: to ?? config.secretKey, oldKeyLost, dropUnreadable: Boolean(opts.dropUnreadable) });
      } catch (err) {
        if (staged) fs.rmSync(staged, { force: true });
        throw err;
      }
      if (staged) {
        try {
          fs.renameSync(staged, file);
        } catch (err) {
          throw new DomainError(
            'conflict',
            `the database has the new key, which is in ${staged}, but it could not be moved over ${file} (${(err as Error).message}): move it there by hand before starting`,
          );
        }
      }
      const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
      const where = `${
        inEnv
          ? "put the new key in SERVICE_SECRET_KEY of every instance's environment (and the CLI's)"
          : `${file} holds it: every instance reading another data dir needs a copy`
      }, then start or restart every instance (one still running reads the stored secrets as unset and refuses to save one)`;
      out(cmd).result(
        {
          key: keySource(config),
          old_key_lost: done.oldKeyLost,
          settings_reencrypted: done.settings,
          totp_reencrypted: done.totp,
          settings_dropped: done.dropped,
          totp_unreadable: done.totpUnreadable,
          bootstrap_not_carried: done.bootstrapNotCarried,
        },
        oldKeyLost
          ? `the database now takes the configured key (${keySource(config)}); ${plural(done.settings, 'stored secret')} and ${plural(done.totp, 'authenticator app')} opened under it`
          : `rotated the master key: ${plural(done.settings, 'stored secret')} and ${plural(done.totp, 'authenticator app')} re-encrypted; ${where}`,
      );
      if (done.dropped.length)
        out(cmd).warn(`deleted ${plural(done.dropped.length, 'stored secret')} that did not open (${done.dropped.join(', ')}): set them again`);
      if (done.totpUnreadable.length)
        out(cmd).warn(
          `the authenticator app of ${done.totpUnreadable.join(', ')} did not open and stays unusable: they sign in with a recovery code or a passkey, or \`service-core user mfa-reset <user>\` clears their second factor`,
        );
      for (const variable of done.bootstrapNotCarried)
        out(cmd).warn(
          `${variable}: this environment does not have the value last applied, so the next start applies the variable if it differs from the account's password`,
        );
    });
}
