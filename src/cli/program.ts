import { Command, CommanderError } from 'commander';
import { ConfigError } from '../config.js';
import { DomainError } from '../errors.js';
import { isDbUnavailable } from '../db/knex.js';
import { VERSION } from '../version.js';
import { CliContext, type CliIo } from './context.js';
import { EXIT, Output, UsageError, type CommandEnv } from './output.js';
import { userCommands, groupCommands, keyCommands } from './iam-commands.js';
import { operationCommands } from './operation-commands.js';
import { auditCommands } from './audit-commands.js';
import { secretKeyCommands } from './key-commands.js';
import { readEnvFile } from './input.js';

function describe(err: unknown): { code: string; message: string; exit: number } {
  if (err instanceof UsageError) return { code: 'usage', message: err.message, exit: EXIT.usage };
  // every problem of the configuration, in one line
  if (err instanceof ConfigError) return { code: 'configuration', message: `configuration error: ${err.message}`, exit: EXIT.usage };
  if (err instanceof DomainError) return { code: err.code, message: err.message, exit: err.code === 'validation_failed' ? EXIT.usage : EXIT.failed };
  // the message only, never a stack: a connection string may carry a password, and a stack helps no script
  const message = String((err as Error)?.message ?? err)
    .split('\n')[0]!
    .slice(0, 300);
  if (isDbUnavailable(err)) return { code: 'unavailable', message: `database unreachable: ${message}`, exit: EXIT.failed };
  return { code: 'failed', message, exit: EXIT.failed };
}

/** What commander says of a usage error, as our one line: its text without the `error: ` it starts with. */
function commanderMessage(err: CommanderError): string {
  // a command with subcommands but none given: commander shows the help instead of a message
  if (err.code === 'commander.help') return 'a command is missing: service-core --help lists them';
  return err.message.replace(/^error: /, '');
}

/**
 * Runs one command line (`argv` without the node and script paths) and returns its exit code:
 * 0 done, 1 it could not be done (not found, refused, database away), 2 bad arguments or
 * configuration. Errors are one line on stderr (JSON with --json, commander's own usage errors
 * included), never a stack trace; warnings too.
 */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const json = argv.includes('--json');
  const ctx = new CliContext(io, { json });
  // with --json, commander's text (an unknown command, a missing argument, the help it shows
  // for a missing subcommand) is not written: the catch below writes it as JSON
  const output = json
    ? { writeOut: io.stdout, writeErr: () => undefined, outputError: () => undefined }
    : // commander's own refusals in the form of every other (`service-core: ...`, not `error: ...`)
      {
        writeOut: io.stdout,
        writeErr: io.stderr,
        outputError: (text: string, write: (s: string) => void) => write(`service-core: ${text.replace(/^error: /, '')}`),
      };
  const program = new Command('service-core')
    .description('Administer service-core: users, groups, API keys, settings, notifications and the database schema')
    .option('--json', 'print results (and errors) as JSON')
    .option(
      '--env-file <path>',
      "read the service's environment file first (systemd EnvironmentFile format, e.g. /etc/service-core/env); its variables win over the shell's",
    )
    .version(VERSION, '-V, --version', 'print the version')
    .configureOutput(output)
    .exitOverride()
    .hook('preAction', (_program, action) => {
      const file = action.optsWithGlobals().envFile as string | undefined;
      if (file) ctx.useEnv(readEnvFile(file));
    });
  const env: CommandEnv = { ctx, out: (cmd) => new Output(io, Boolean(cmd.optsWithGlobals().json)) };
  userCommands(program, env);
  groupCommands(program, env);
  keyCommands(program, env);
  operationCommands(program, env);
  auditCommands(program, env);
  secretKeyCommands(program, env);
  // every subcommand answers like the program: usage errors are thrown to us, not exit()ed
  const overrideAll = (cmd: Command) => cmd.commands.forEach((c) => overrideAll(c.exitOverride().configureOutput(output)));
  overrideAll(program);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.exitCode === 0) return EXIT.ok; // --help, --version
      // without --json commander has printed its line (unknown option, missing argument, help)
      if (json) io.stderr(JSON.stringify({ error: { code: 'usage', message: commanderMessage(err) } }) + '\n');
      return EXIT.usage;
    }
    const d = describe(err);
    if (json) io.stderr(JSON.stringify({ error: { code: d.code, message: d.message } }) + '\n');
    else io.stderr(`service-core: ${d.message}\n`);
    return d.exit;
  } finally {
    await ctx.close().catch(() => undefined);
  }
}
