#!/usr/bin/env node
import type { CliIo } from './context.js';

/** `service-core <command>`: the admin CLI (src/cli/program.ts), against the configured database. */
const io: CliIo = {
  env: process.env,
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  stdin: process.stdin,
};
const argv = process.argv.slice(2);
// a reader that stopped reading (`audit export | head`) ends the command quietly, as it ends a
// Unix tool: nothing is left to say to it
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code !== 'EPIPE') throw err;
  process.exit(0);
});

/**
 * The version is answered without loading the commands (commander, the core, the database
 * drivers): the same output as the `version` command and `--version`, in a tenth of the time.
 */
async function version(): Promise<boolean> {
  const words = argv.filter((a) => a !== '--json');
  const json = words.length < argv.length;
  const command = words.length === 1 && words[0] === 'version';
  const flag = !json && argv.length === 1 && (argv[0] === '--version' || argv[0] === '-V');
  if (!command && !flag) return false;
  const { VERSION } = await import('../version.js');
  io.stdout(command && json ? JSON.stringify({ version: VERSION }, null, 2) + '\n' : VERSION + '\n');
  return true;
}

version()
  .then(async (answered) => (answered ? 0 : (await import('./program.js')).runCli(argv, io)))
  .then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      process.stderr.write(`service-core: ${(err as Error)?.message ?? err}\n`);
      process.exitCode = 1;
    },
  );
