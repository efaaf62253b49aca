import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';

export interface ForegroundServer {
  /** what it wrote to stderr so far */
  stderr(): string;
  /** sends `signal` unless it has exited, waits for the exit, removes its dir */
  stop(signal: NodeJS.Signals): Promise<void>;
}

/**
 * A server a test runs in the foreground (nginx, Caddy) with its files in `dir`: started, and
 * handed over once `readyUrl` answers 200 (else stopped with SIGKILL and the start refused,
 * with what it said on stderr). Killed with the test process if the test never stops it.
 */
export async function startForeground(opts: {
  name: string;
  command: string;
  args: string[];
  dir: string;
  readyUrl: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
}): Promise<ForegroundServer> {
  const child: ChildProcess = spawn(opts.command, opts.args, { env: opts.env ?? process.env, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d) => (err += d.toString()));
  const exited = new Promise((r) => child.once('exit', r));
  const onExit = () => child.kill('SIGKILL');
  process.once('exit', onExit);
  const server: ForegroundServer = {
    stderr: () => err,
    async stop(signal) {
      process.off('exit', onExit);
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
      fs.rmSync(opts.dir, { recursive: true, force: true });
    },
  };
  const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
  for (;;) {
    if (child.exitCode !== null) {
      await server.stop('SIGKILL');
      throw new Error(`${opts.name} exited: ${err}`);
    }
    const status = await fetch(opts.readyUrl).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200) return server;
    if (Date.now() > deadline) {
      await server.stop('SIGKILL');
      throw new Error(`${opts.name} did not answer ${opts.readyUrl} within ${(opts.timeoutMs ?? 10_000) / 1000} s: ${err}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
