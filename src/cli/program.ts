import { Command, CommanderError } from 'commander';
import { ConfigError } from '../config.js';
import { DomainError } from '../errors.js';
import { isDbUnavailable } from '../db/knex.js';
import { VERSION } from '../version.js';
import { CliContext, type CliIo } from './context.js';
import { EXIT, Output, UsageError, type CommandEnv } from './output.js';
import { userCommands, groupCommands, keyCommands } from './iam-commands.js';
import { operationCommands } from './operation-commands.js';

function describe(err: unknown): { code: string; message: string; exit: number } {
  if (err instanceof UsageError) return { code: 'usage', message: err.message, exit: EXIT.usage };
  if (err instanceof ConfigError) return { code: 'configuration', message: `configuration error: ${err.message}`, exit: EXIT.usage };
  if (err instanceof DomainError) return { code: err.code, message: err.message, exit: err.code === 'validation_failed' ? EXIT.usage : EXIT.failed };
  // the message only, never a stack: a connection string may carry a password, and a stack helps no script
  const message = String((err as Error)?.message ?? err).split('\n')[0]!.slice(0, 300);
  if (isDbUnavailable(err)) return { code: 'unavailable', message: `database unreachable: ${message}`, exit: EXIT.failed };
  return { code: 'failed', message, exit: EXIT.failed };
}

/**
 * Runs one command line (`argv` without the node and script paths) and returns its exit code:
 * 0 done, 1 it could not be done (not found, refused, database away), 2 bad arguments or
 * configuration. Errors are one line on stderr (JSON with --json), never a stack trace.
 */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const ctx = new CliContext(io);
  const program = new Command('service-core')
    .description('Administer service-core: users, groups, API keys, settings, notifications and the database schema')
    .option('--json', 'print results (and errors) as JSON')
    .version(VERSION, '-V, --version', 'print the version')
    .configureOutput({ writeOut: io.stdout, writeErr: io.stderr })
    .exitOverride();
  const env: CommandEnv = { ctx, out: (cmd) => new Output(io, Boolean(cmd.optsWithGlobals().json)) };
  userCommands(program, env);
  groupCommands(program, env);
  keyCommands(program, env);
  operationCommands(program, env);
  // every subcommand answers like the program: usage errors are thrown to us, not exit()ed
  const overrideAll = (cmd: Command) => cmd.commands.forEach((c) => overrideAll(c.exitOverride().configureOutput({ writeOut: io.stdout, writeErr: io.stderr })));
  overrideAll(program);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      // commander has printed its line (unknown option, missing argument, help)
      return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    const d = describe(err);
    if (argv.includes('--json')) io.stderr(JSON.stringify({ error: { code: d.code, message: d.message } }) + '\n');
    else io.stderr(`service-core: ${d.message}\n`);
    return d.exit;
  } finally {
    await ctx.close().catch(() => undefined);
  }
}
