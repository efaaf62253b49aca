import fs from 'node:fs';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import type { Command } from 'commander';
import Joi from 'joi';
import { DomainError, fieldErrorsOf } from '../errors.js';
import { VERSION } from '../version.js';
import { migrateLatest } from '../db/migrate.js';
import { dialectOf, sqliteFile } from '../db/knex.js';
import { AUTH_NS, FIELDS, MASK } from '../auth/settings.js';
import { changeAuthSettings } from '../auth/settings-change.js';
import { SYSTEM_KEY_NAME, SYSTEM_KEY_NS } from '../auth/system-key.js';
import type { LockableSecret } from '../http/secret-routes.js';
import type { Actor } from '../iam/policy.js';
import { apiSetting } from '../settings-table.js';
import type { AuthSettingView } from '../client/api-types.js';
import { forgeSecretKey, SCM_PROVIDERS, WEBHOOK_SECRET_KEY, WEBHOOK_SECRET_NAMESPACE } from '../notifications/webhook-secrets.js';
import { NotifyError } from '../notifications/types.js';
import { readSecret } from './input.js';
import { CLI_ACTOR, envAppliedText } from './context.js';
import { table, UsageError, type CommandEnv } from './output.js';

/**
 * Secrets kept encrypted in the settings store beside the auth settings: like them, set in the
 * environment means locked. Their variable and rule are rows of src/settings-table.ts.
 */
const stored = (name: string, namespace: string, key: string) => {
  const row = apiSetting(name)!;
  return { env: row.env, label: row.label!, namespace, key, schema: row.rule! };
};
const SECRET_SETTINGS: Record<string, { env: string; label: string; namespace: string; key: string; schema: Joi.Schema }> = {
  system_api_key: stored('system_api_key', SYSTEM_KEY_NS, SYSTEM_KEY_NAME),
  scm_webhook_secret: stored('scm_webhook_secret', WEBHOOK_SECRET_NAMESPACE, WEBHOOK_SECRET_KEY),
  // a forge's own secret (scm_webhook_secret_github, ...)
  ...Object.fromEntries(SCM_PROVIDERS.map((forge) => [forgeSecretKey(forge), stored(forgeSecretKey(forge), WEBHOOK_SECRET_NAMESPACE, forgeSecretKey(forge))])),
};

const SETTING_NAMES = [...Object.keys(FIELDS), ...Object.keys(SECRET_SETTINGS)];

function settingName(name: string): string {
  if (!SETTING_NAMES.includes(name)) throw new UsageError(`name: unknown setting ${name} (one of ${SETTING_NAMES.join(', ')})`);
  return name;
}

/** The secret a refused change would have to enter again (the settings' "must be entered again"), if that was why. */
function reEntered(details: unknown): string | null {
  const problems = Array.isArray(details) ? (details as Array<{ field?: string; message?: string }>) : [];
  return problems.find((p) => p.message?.startsWith('must be entered again'))?.field ?? null;
}

/** A value given on the command line, as the settings API would take it in JSON. */
function parseValue(name: string, text: string): unknown {
  const kind = FIELDS[name]!.kind;
  if (kind === 'mapping') {
    try {
      return JSON.parse(text);
    } catch {
      throw new UsageError(`value: ${name} must be a JSON object mapping a name to a list of groups`);
    }
  }
  return text;
}

/** What stands at `file`, not following a symbolic link: null when nothing does. */
function standing(file: string): 'a file' | 'a symbolic link' | null {
  try {
    return fs.lstatSync(file).isSymbolicLink() ? 'a symbolic link' : 'a file';
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Copies the file at `from` (a private path) into the open descriptor `to`, a MiB at a time; answers the bytes copied. */
function copyInto(from: string, to: number): number {
  const input = fs.openSync(from, 'r');
  try {
    const buffer = Buffer.allocUnsafe(1 << 20);
    let total = 0;
    for (let n; (n = fs.readSync(input, buffer, 0, buffer.length, null)) > 0; total += n) {
      for (let off = 0; off < n;) off += fs.writeSync(to, buffer, off, n - off);
    }
    return total;
  } finally {
    fs.closeSync(input);
  }
}

/**
 * The online backup of `source` as the new file `target`, mode 0600 from the start; returns its
 * size. The CLI may run as root in a folder others can write to, so no path there is ever opened
 * twice or followed: SQLite writes the copy into a directory made for it (0700) inside the data
 * dir, which only the service's user can enter; `target` is then created once (O_CREAT | O_EXCL
 * | O_NOFOLLOW, 0600: anything there, a dangling symbolic link included, is refused) and the copy
 * is written through that one descriptor.
 */
async function backupInto(source: string, dataDir: string, target: string): Promise<number> {
  const refuse = (what: string | null) =>
    new DomainError('conflict', `${target} exists: choose a new file${what === 'a symbolic link' ? ' (it is a symbolic link, never followed)' : ''}`);
  const there = standing(target);
  if (there) throw refuse(there);
  const privateDir = fs.mkdtempSync(path.join(dataDir, '.backup-'));
  try {
    const copy = path.join(privateDir, 'copy.sqlite');
    const db = new BetterSqlite3(source, { readonly: true, fileMustExist: true });
    try {
      await db.backup(copy);
    } finally {
      db.close();
    }
    const { O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW } = fs.constants;
    let out: number;
    try {
      out = fs.openSync(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EEXIST' || code === 'ELOOP') throw refuse(standing(target));
      throw new DomainError('conflict', `cannot write ${target}: ${(err as Error).message}`);
    }
    try {
      const size = copyInto(copy, out);
      fs.fsyncSync(out);
      return size;
    } catch (err) {
      // a partial copy goes, if the name still is the file this descriptor wrote
      const ours = fs.fstatSync(out).ino;
      if (fs.lstatSync(target, { throwIfNoEntry: false })?.ino === ours) fs.rmSync(target, { force: true });
      throw err;
    } finally {
      fs.closeSync(out);
    }
  } finally {
    fs.rmSync(privateDir, { recursive: true, force: true });
  }
}

export function operationCommands(program: Command, { ctx, out }: CommandEnv): void {
  program
    .command('version')
    .description('print the version')
    .action((_opts, cmd: Command) => out(cmd).result({ version: VERSION }, VERSION));

  program
    .command('migrate')
    .description('apply the pending database migrations (boot does the same)')
    .option(
      '--create-database',
      "create the PostgreSQL database first when it does not exist (through the server's postgres database; the role needs CREATEDB)",
    )
    .action(async (opts: { createDatabase?: boolean }, cmd: Command) => {
      const applied = await migrateLatest(await ctx.db({ create: opts.createDatabase === true }));
      const created = ctx.createdDatabase;
      const text = applied.length ? `applied ${applied.join(', ')}` : 'the database is up to date';
      out(cmd).result(created ? { applied, created_database: created } : { applied }, created ? `created database ${created}; ${text}` : text);
    });

  program
    .command('seed')
    .description(
      'migrate, then create the default groups and the admin and bot accounts when missing (boot does the same; roles of existing accounts are left as they are)',
    )
    .action(async (_opts, cmd: Command) => {
      ctx.bootstrapPasswordsHold();
      const applied = await migrateLatest(await ctx.db());
      const { iam } = await ctx.core('write');
      // a password the environment sets ends the account's sessions on the running instances too
      await ctx.announceChanges();
      const { changed, envApplied } = await iam.seed('command', CLI_ACTOR);
      out(cmd).result({ applied, changed }, changed ? 'seeded the default groups and accounts' : 'nothing to seed: the default groups and accounts exist');
      for (const a of envApplied) out(cmd).warn(envAppliedText(a));
    });

  program
    .command('backup <file>')
    .description(
      'copy the SQLite database into a new <file> (mode 0600), consistent even while the service writes (SQLite online backup); PostgreSQL: use pg_dump',
    )
    .action(async (file: string, _opts, cmd: Command) => {
      const config = ctx.config;
      if (dialectOf(config) !== 'sqlite') throw new DomainError('conflict', 'the database is PostgreSQL: back it up with pg_dump (docs/deploy.md)');
      const source = sqliteFile(config);
      if (!fs.existsSync(source)) throw new DomainError('not_found', `no database at ${source}`);
      const target = path.resolve(file);
      const bytes = await backupInto(source, config.dataDir, target);
      const keyNote = config.fromEnv.has('SERVICE_SECRET_KEY') ? 'SERVICE_SECRET_KEY' : path.join(config.dataDir, 'secret.key');
      out(cmd).result(
        { file: target, bytes, secret_key: keyNote },
        `backed up to ${target} (${bytes} bytes); keep it together with ${keyNote}: the stored secrets cannot be read without it`,
      );
    });

  const settings = program.command('settings').description('read and change the settings the environment can lock');

  settings
    .command('get [name]')
    .description('show the settings (or one), where each comes from and whether the environment locks it; secrets are never shown')
    .action(async (name: string | undefined, _opts, cmd: Command) => {
      if (name !== undefined) settingName(name);
      const { iam, auth } = await ctx.core('read');
      const secrets = iam.secrets;
      const all: Record<string, AuthSettingView> = { ...auth.authSettings.view() };
      for (const [key, s] of Object.entries(SECRET_SETTINGS)) {
        const locked = ctx.config.fromEnv.has(s.env);
        const stored = locked ? null : await secrets.get(s.namespace, s.key);
        all[key] = {
          label: s.label,
          kind: 'secret',
          value: locked || stored ? MASK : null,
          source: locked ? 'env' : stored ? 'store' : 'default',
          locked,
          secret: true,
          configured: Boolean(locked || stored),
        };
      }
      const shown = name ? { [name]: all[name]! } : all;
      // a value written under another master key reads as unset: said, not hidden (one the environment sets is not read anyway)
      const unreadable = new Set(await secrets.unreadable());
      for (const [n, view] of Object.entries(shown)) {
        const s = SECRET_SETTINGS[n];
        if (!view.locked && unreadable.has(s ? `${s.namespace}/${s.key}` : `${AUTH_NS}/${n}`))
          ctx.warn(`${n} is stored but does not open under the current master key (written under another one): it reads as unset until set again`);
      }
      const text = (v: unknown) => (v === null || v === undefined ? '-' : typeof v === 'string' ? v : JSON.stringify(v));
      out(cmd).result(
        { settings: shown },
        table(
          ['NAME', 'VALUE', 'SOURCE', 'LOCKED'],
          Object.entries(shown).map(([n, f]) => [n, text(f.value), f.source, f.locked ? `yes (${FIELDS[n]?.env ?? SECRET_SETTINGS[n]!.env})` : 'no']),
        ),
      );
    });

  /** `withSecret`: a secret set in the same change (a bind password entered again with its new server). */
  const change = async (name: string, value: unknown, cmd: Command, withSecret: Record<string, unknown> = {}) => {
    const core = await ctx.core('write', { storesSecret: true });
    await ctx.announceChanges();
    const secret = SECRET_SETTINGS[name];
    // what the change took with it (unsetting ldap_url unsets the stored bind password)
    let along: string[] = [];
    if (secret) {
      // the same writers as the settings API: the system key's rule, one event naming the setting
      const forge = SCM_PROVIDERS.find((f) => forgeSecretKey(f) === name) ?? null;
      const writer: LockableSecret<Actor> = name === 'system_api_key' ? core.auth.systemKey : core.notifications.webhookSecrets.setting(forge);
      if (writer.lockedByEnv) throw new DomainError('conflict', `set in the environment and locked: ${name} (${secret.env})`);
      if (value === null) await writer.clear(CLI_ACTOR);
      else await writer.set(CLI_ACTOR, value as string);
    } else {
      const schemas = Object.fromEntries([name, ...Object.keys(withSecret)].map((n) => [n, FIELDS[n]!.schema.allow(null)]));
      const { error, value: checked } = Joi.object(schemas).validate({ [name]: value, ...withSecret });
      if (error) throw new UsageError(`value: ${fieldErrorsOf(error)[0]!.message}`);
      // the same checks as the settings API: groups that exist, a login chain that builds
      const { iam, auth } = core;
      const changes = await changeAuthSettings(
        { settings: auth.authSettings, store: iam.store, local: auth.local, log: ctx.log, commands: iam.commands },
        CLI_ACTOR,
        checked,
      );
      along = Object.keys(changes).filter((n) => n !== name && !(n in withSecret));
      ctx.bus.emit('auth:settings_changed', {});
    }
    const said = value === null ? `${name} reset to its default` : [name, ...Object.keys(withSecret)].join(' and ') + ' set';
    out(cmd).result({ name, changed: true, ...(along.length ? { also_reset: along } : {}) }, along.length ? `${said}, and with it ${along.join(', ')}` : said);
  };

  settings
    .command('set <name> [value]')
    .description('store a setting; a secret is read from stdin (prompted for on a terminal), never from the command line')
    .option('--with-secret <secret>', 'set this secret in the same change, read from stdin (a bind password entered again with its new server)')
    .action(async (name: string, value: string | undefined, opts: { withSecret?: string }, cmd: Command) => {
      settingName(name);
      const isSecret = name in SECRET_SETTINGS || FIELDS[name]?.kind === 'secret';
      if (isSecret && value !== undefined) throw new UsageError(`value: ${name} is a secret: give it on stdin, not on the command line`);
      if (!isSecret && value === undefined) throw new UsageError(`value: missing for ${name}`);
      if (opts.withSecret !== undefined) {
        if (isSecret || FIELDS[settingName(opts.withSecret)]?.kind !== 'secret')
          throw new UsageError(`--with-secret: ${opts.withSecret} is not a login provider's secret that ${name} could move`);
        const secret = await readSecret(ctx.io, opts.withSecret);
        return change(name, parseValue(name, value!), cmd, { [opts.withSecret]: secret });
      }
      let parsed: unknown;
      if (isSecret) {
        parsed = await readSecret(ctx.io, name);
        const schema = SECRET_SETTINGS[name]?.schema;
        if (schema) {
          const { error, value: ok } = schema.validate(parsed);
          if (error) throw new UsageError(`value: ${fieldErrorsOf(error)[0]!.message}`);
          parsed = ok;
        }
      } else parsed = parseValue(name, value!);
      await change(name, parsed, cmd).catch((err: unknown) => {
        // the secret this change moves must come with it: say how, on this command line
        const again = err instanceof DomainError && err.code === 'validation_failed' ? reEntered(err.details) : null;
        if (!again) throw err;
        const { code, message, details } = err as DomainError;
        throw new DomainError(code, `${message} (give it in the same change: --with-secret ${again}, read from stdin)`, details);
      });
    });

  settings
    .command('unset <name>')
    .description('remove a stored setting: its default applies again')
    .action(async (name: string, _opts, cmd: Command) => change(settingName(name), null, cmd));

  program
    .command('notify')
    .description('send a notification to a user (--user) or to everyone (--broadcast)')
    .requiredOption('--title <title>', 'the title')
    .requiredOption('--message <text>', 'the text')
    .option('--user <user>', 'the recipient: a username or a user id')
    .option('--broadcast', 'send to everyone')
    .option('--level <level>', 'info, success, warning or error', 'info')
    .option('--link <url>', 'an http(s) URL or a path of this service')
    .option('--id <id>', 'a notification id of your own (sending it again updates it)')
    .action(async (opts, cmd: Command) => {
      if (Boolean(opts.user) === Boolean(opts.broadcast)) throw new UsageError('--user/--broadcast: give exactly one of them');
      const { service } = (await ctx.core('write')).notifications;
      await ctx.announceChanges();
      // no boot here: the schema is current (core('write') migrated it)
      service.setReady();
      const payload = {
        title: opts.title,
        message: opts.message,
        level: opts.level,
        source: 'cli',
        ...(opts.user ? { user: opts.user } : {}),
        ...(opts.link ? { link: opts.link } : {}),
        ...(opts.id ? { id: opts.id } : {}),
      };
      try {
        const sent = await service.notify(opts.user ? 'user' : 'broadcast', payload);
        out(cmd).result(
          sent,
          `${sent.action} notification ${sent.id}${sent.seq ? ` (seq ${sent.seq})` : ''}${opts.user ? ` for ${opts.user}` : ' for everyone'}`,
        );
      } catch (err) {
        if (!(err instanceof NotifyError)) throw err;
        const p = err.problems[0];
        if (err.reason === 'invalid_args' && p) throw new UsageError(`--${p.field === 'payload' ? 'message' : p.field}: ${p.message}`);
        throw new DomainError(err.reason === 'unknown_user' ? 'not_found' : 'conflict', err.message);
      }
    });
}
