import { Readable } from 'node:stream';
import { runCli } from '../../src/cli/program.js';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed (for --json runs) */
  json<T = any>(): T;
}

/** Runs one command line of the CLI in this process, with `env` as its environment and `stdin` piped in. */
export async function cli(env: Record<string, string>, args: string[], stdin = ''): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(args, {
    env,
    stdout: (t) => (stdout += t),
    stderr: (t) => (stderr += t),
    stdin: Readable.from(stdin ? [stdin] : []),
  });
  return { code, stdout, stderr, json: () => JSON.parse(stdout) };
}
