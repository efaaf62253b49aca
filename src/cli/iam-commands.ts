import type { Command } from 'commander';
import type Joi from 'joi';
import { DomainError } from '../errors.js';
import { parseDuration } from '../config.js';
import { publicKey } from '../auth/api-keys.js';
import { passwordClearedWarning } from '../iam/afresh.js';
import { createKeySchema, createUserSchema, groupNameRule, PASSWORD, publicUsers, userFieldsOf, usernameRule, uuidParam } from '../iam/schemas.js';
import type { User } from '../iam/store.js';
import type { UserChange } from '../iam/users.js';
import { envPasswordPin } from '../iam/seed.js';
import { CLI_ACTOR } from './context.js';
import { readSecret } from './input.js';
import { table, UsageError, type CommandEnv } from './output.js';
import { fieldErrorsOf, fieldRoot } from '../errors.js';

/**
 * `value` checked by `schema`; a failure is a usage error naming the argument: `argument`, or
 * for an object the option that gave the field at fault (`options`: field -> option).
 */
export function check<T>(argument: string, schema: Joi.Schema, value: unknown, options: Record<string, string> = {}): T {
  const { error, value: ok } = schema.validate(value, { convert: true });
  if (error) {
    const [first] = fieldErrorsOf(error);
    throw new UsageError(`${options[fieldRoot(first!.field)] ?? argument}: ${first!.message}`);
  }
  return ok as T;
}

const username = (v: string, argument = 'username') => check<string>(argument, usernameRule, v);
const groupName = (v: string) => check<string>('group', groupNameRule, v);
const collect = (v: string, all: string[] = []) => [...all, v];

function status(u: User): string {
  return u.disabled ? 'disabled' : 'active';
}

export function userCommands(program: Command, { ctx, out }: CommandEnv): void {
  const user = program.command('user').description('create, list and change users');

  user
    .command('create <username>')
    .description('create a user (without --password-stdin the user signs in through single sign-on only)')
    .option('--email <email>', 'e-mail address')
    .option('--display-name <name>', 'name shown in the UI')
    .option('--group <group>', 'a group to join (repeat for several)', collect)
    .option('--password-stdin', 'read the password from stdin (prompted for on a terminal)')
    .action(async (name: string, opts, cmd: Command) => {
      const input = check<{ username: string; email?: string; display_name?: string; groups?: string[] }>(
        'user',
        createUserSchema,
        {
          username: username(name),
          email: opts.email,
          display_name: opts.displayName,
          groups: (opts.group as string[] | undefined)?.map(groupName),
        },
        { email: '--email', display_name: '--display-name', groups: '--group' },
      );
      const password = opts.passwordStdin ? check<string>('password', PASSWORD, await readSecret(ctx.io, 'Password')) : undefined;
      const { iam, auth } = await ctx.core('write');
      const created = await iam.users.create(CLI_ACTOR, { ...userFieldsOf(input), password });
      const warning = password ? null : await auth.noPasswordWarning(created);
      if (warning) ctx.warn(`${warning} (--password-stdin, or service-core user set-password ${created.username})`);
      out(cmd).result(
        (await publicUsers(iam.store, [created]))[0],
        `created user ${created.username} (${created.id})${password ? '' : warning ? ', without a password' : ', single sign-on only until a password is set'}`,
      );
    });

  user
    .command('list')
    .description('list users')
    .action(async (_opts, cmd: Command) => {
      const { store } = (await ctx.core('read')).iam;
      const all = await store.listUsers();
      out(cmd).result(
        { users: await publicUsers(store, all) },
        table(
          ['USERNAME', 'STATUS', 'GROUPS', 'ROLES', 'ID'],
          all.map((u) => [u.username, status(u), u.groups.join(',') || '-', u.roles.join(',') || '-', u.id]),
        ),
      );
    });

  /** `done` says what the command did, from the user after and before it (a change to what they hold already is no change) */
  const change = (verb: string, describe: string, patch: (u: User, args: string[]) => UserChange, done: (u: User, before: User) => string) =>
    user
      .command(verb)
      .description(describe)
      .action(async (...args: unknown[]) => {
        const cmd = args[args.length - 1] as Command;
        const positional = cmd.args;
        const { users, store } = (await ctx.core('write')).iam;
        const target = await users.find({ username: username(positional[0]!) });
        await ctx.announceChanges();
        const updated = await users.update(CLI_ACTOR, target, patch(target, positional.slice(1)));
        const cleared = passwordClearedWarning(target, updated);
        if (cleared) ctx.warn(cleared);
        out(cmd).result((await publicUsers(store, [updated]))[0], done(updated, target));
      });

  change(
    'disable <username>',
    'disable a user: every sign-in, key and live connection of theirs stops',
    () => ({ disabled: true }),
    (u, was) => (was.disabled ? `${u.username} was disabled already: nothing changed` : `disabled ${u.username}`),
  );
  change(
    'enable <username>',
    'enable a disabled user',
    () => ({ disabled: false }),
    (u, was) => (was.disabled ? `enabled ${u.username}` : `${u.username} was enabled already: nothing changed`),
  );
  // the way to a first superadmin besides SERVICE_ADMIN_FORCE_SUPERADMIN: whoever runs the CLI can read the database and the master key already
  change(
    'promote <username>',
    'make a user a superadmin: they may grant permissions that reach the host (docs/sockets.md)',
    (u) => ({ roles: [...new Set([...u.roles, 'superadmin'])] }),
    (u, was) => `${u.username} ${was.roles.includes('superadmin') ? 'was a superadmin already: nothing changed' : 'is a superadmin'}`,
  );
  change(
    'demote <username>',
    'take the superadmin role from a user (never from the last one)',
    (u) => ({ roles: u.roles.filter((r) => r !== 'superadmin') }),
    (u, was) =>
      was.roles.includes('superadmin')
        ? `${u.username} is ${u.roles.includes('superadmin') ? 'still' : 'no longer'} a superadmin`
        : `${u.username} was not a superadmin: nothing changed`,
  );
  change(
    'add-group <username> <group>',
    'add a user to a group',
    (u, [g]) => ({ groups: [...new Set([...u.groups, groupName(g!)])] }),
    (u, was) =>
      u.groups.length === was.groups.length ? `${u.username} was in that group already: nothing changed` : `${u.username} is in ${u.groups.join(', ')}`,
  );
  change(
    'remove-group <username> <group>',
    'remove a user from a group',
    (u, [g]) => {
      const name = groupName(g!);
      if (!u.groups.includes(name)) throw new DomainError('not_found', `${u.username} is not in ${name}`);
      return { groups: u.groups.filter((x) => x !== name) };
    },
    (u) => `${u.username} is in ${u.groups.join(', ') || 'no group'}`,
  );

  user
    .command('set-password <username>')
    .description("set a password, read from stdin (prompted for on a terminal); the user's web sessions end")
    .action(async (name: string, _opts, cmd: Command) => {
      const who = username(name);
      const password = check<string>('password', PASSWORD, await readSecret(ctx.io, 'New password'));
      const { users } = (await ctx.core('write')).iam;
      const target = await users.find({ username: who });
      await ctx.announceChanges();
      await users.setPassword(CLI_ACTOR, target, password);
      out(cmd).result({ username: target.username, password_set: true }, `password of ${target.username} set; their web sessions ended`);
      // a bootstrap account: the environment sets its password again when the variable changes
      const pin = await envPasswordPin(await ctx.prepared(), ctx.config, target.username);
      if (pin?.inEnvironment)
        out(cmd).warn(`${pin.variable} is set: the service applies it to ${target.username} again at a start where its value has changed`);
      else if (pin)
        out(cmd).warn(
          `an earlier start set ${target.username}'s password from ${pin.variable}: if the service's environment still has it, a changed value there replaces this password at its next start`,
        );
    });

  user
    .command('mfa-reset <username>')
    .description('remove every second factor and recovery code of a user (a lost device, a locked-out operator); their web sessions end')
    .action(async (name: string, _opts, cmd: Command) => {
      const who = username(name);
      const { iam, auth } = await ctx.core('write');
      const target = await iam.users.find({ username: who });
      await ctx.announceChanges();
      const removed = await auth.mfa.reset(CLI_ACTOR, target);
      out(cmd).result(
        { username: target.username, mfa_reset: removed },
        removed
          ? `second factors of ${target.username} removed; their web sessions ended`
          : `${target.username} had no second factor: nothing removed; their web sessions ended`,
      );
    });
}

export function groupCommands(program: Command, { ctx, out }: CommandEnv): void {
  const group = program.command('group').description('list groups');
  group
    .command('list')
    .description('list groups with their permissions and members')
    .action(async (_opts, cmd: Command) => {
      const { store } = (await ctx.core('read')).iam;
      const [groups, users] = await Promise.all([store.listGroups(), store.listUsers()]);
      const view = groups.map((g) => ({
        name: g.name,
        description: g.description,
        permissions: g.permissions,
        members: users.filter((u) => u.groups.includes(g.name)).map((u) => u.username),
      }));
      out(cmd).result(
        { groups: view },
        table(
          ['NAME', 'MEMBERS', 'PERMISSIONS'],
          view.map((g) => [g.name, String(g.members.length), g.permissions.join(',') || '-']),
        ),
      );
    });
}

/** `--expires`: a duration from now (30d, 12h) or an ISO date. */
function expiry(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const ms = parseDuration(value);
  if (ms !== null) {
    if (ms <= 0) throw new UsageError('--expires: must be in the future');
    const at = new Date(Date.now() + ms);
    // too far for a date at all: the schema's bound (the year 9999) names the rest
    if (Number.isNaN(at.getTime())) throw new UsageError('--expires: must be before 9999-12-31');
    return at.toISOString();
  }
  if (Number.isNaN(Date.parse(value))) throw new UsageError('--expires: must be a duration like 30d or 12h, or an ISO date');
  return value;
}

export function keyCommands(program: Command, { ctx, out }: CommandEnv): void {
  const key = program.command('key').description('issue, list and revoke API keys');

  key
    .command('issue')
    .description('issue an API key for a user; the token is printed this once')
    .requiredOption('--user <username>', 'the owner')
    .option('--scope <permission>', 'limit the key to this permission (repeat, or separate by commas, for several)', (v: string, all: string[] = []) => [
      ...all,
      ...v.split(',').map((s) => s.trim()),
    ])
    .option('--expires <when>', 'a duration from now (30d, 12h) or an ISO date')
    .option('--label <label>', 'what the key is for', 'issued by the CLI')
    .action(async (opts, cmd: Command) => {
      const owner = username(opts.user, '--user');
      const body = check<{ label: string; scopes?: string[]; expires_at?: Date }>(
        'key',
        createKeySchema,
        { label: opts.label, scopes: opts.scope, expires_at: expiry(opts.expires) },
        { label: '--label', scopes: '--scope', expires_at: '--expires' },
      );
      const { iam, auth } = await ctx.core('write');
      const [users, keys] = [iam.users, auth.keys];
      const target = await users.find({ username: owner });
      const { token, key: row } = await keys.issue(
        CLI_ACTOR,
        target,
        { label: body.label, scopes: body.scopes ?? null, expiresAt: body.expires_at?.getTime() ?? null },
        { scopesField: '--scope' },
      );
      out(cmd).result({ ...publicKey(row), username: target.username, token }, [
        `issued key ${row.id} for ${target.username}; the token is shown this once:`,
        token,
      ]);
    });

  key
    .command('list')
    .description("a user's live API keys and web sessions (never their tokens)")
    .requiredOption('--user <username>', 'the owner')
    .action(async (opts, cmd: Command) => {
      const owner = username(opts.user, '--user');
      const { iam, auth } = await ctx.core('read');
      const [users, apiKeys] = [iam.users, auth.apiKeys];
      const rows = (await apiKeys.listFor((await users.find({ username: owner })).id)).map(publicKey);
      out(cmd).result(
        { keys: rows },
        table(
          ['ID', 'KIND', 'PREFIX', 'LABEL', 'SCOPES', 'EXPIRES'],
          rows.map((k) => [k.id, k.kind, k.prefix, k.label || '-', k.scopes?.join(',') ?? 'all', k.expires_at ?? 'never']),
        ),
      );
    });

  key
    .command('revoke <id>')
    .description('revoke an API key or web session by its id')
    .action(async (id: string, _opts, cmd: Command) => {
      const keyId = check<string>('id', uuidParam, id);
      const { iam, auth } = await ctx.core('write');
      const [apiKeys, users, keys] = [auth.apiKeys, iam.users, auth.keys];
      const row = await apiKeys.get(keyId);
      if (!row || row.revokedAt) throw new DomainError('not_found', `no live key ${keyId}`);
      await ctx.announceChanges();
      await keys.revoke(CLI_ACTOR, await users.find({ id: row.userId }), row.id);
      out(cmd).result({ id: row.id, revoked: true }, `revoked ${row.kind} ${row.id}`);
    });
}
