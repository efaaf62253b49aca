#!/usr/bin/env node
import { runCli } from './program.js';

/** `service-core <command>`: the admin CLI (src/cli/program.ts), against the configured database. */
runCli(process.argv.slice(2), {
  env: process.env,
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  stdin: process.stdin,
}).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`service-core: ${(err as Error)?.message ?? err}\n`);
    process.exitCode = 1;
  },
);
