import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { unusedPort } from '../auth/helpers.js';
import { testEnv } from './service.js';

export interface ServiceProcess {
  url: string;
  port: number;
  child: ChildProcess;
  /** what the process wrote (JSON log lines and anything else) */
  output(): string;
  /** resolves with the exit code (or the signal) once the process is gone */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * How long a service started as a process may take to get ready (`/readyz` 200, or its `ready`
 * log line). A cold start under tsx compiles the service first; on a loaded 2-core machine (the
 * suite beside a CI run) that has taken more than 30 s. Generous, but bounded: a service that
 * never gets ready still fails, with its output. Tests that start one allow for it in their timeout.
 */
export const READY_TIMEOUT_MS = 90_000;

/**
 * The service as its own process (`node --import tsx src/main.ts`), for what an in-process
 * service cannot show: a SIGKILL, signals, the exit code. Waits for /readyz 200.
 */
export async function spawnService(opts: { dataDir: string; databaseUrl: string | null; env?: Record<string, string>; command?: string[]; pollMs?: number }): Promise<ServiceProcess> {
  const port = await unusedPort();
  const env = { ...process.env, ...testEnv(opts.dataDir, opts.databaseUrl, { SERVICE_LOG_LEVEL: 'info', ...opts.env }), SERVICE_PORT: String(port) };
  const command = opts.command ?? [process.execPath, '--import', 'tsx', 'src/main.ts'];
  const child = spawn(command[0], command.slice(1), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d.toString()));
  child.stderr!.on('data', (d) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const onExit = () => child.kill('SIGKILL');
  process.once('exit', onExit);
  exited.then(() => process.off('exit', onExit));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the service process exited (${child.exitCode}):\n${out.slice(-2000)}`);
    const ready = await fetch(`${url}/readyz`).then((r) => r.status === 200, () => false);
    if (ready) break;
    if (Date.now() > deadline) {
      // gone before the caller removes its data dir
      child.kill('SIGKILL');
      await exited;
      throw new Error(`the service process was not ready within ${READY_TIMEOUT_MS / 1000} s:\n${out.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, opts.pollMs ?? 100));
  }
  return {
    url,
    port,
    child,
    output: () => out,
    exited,
    async kill(signal: NodeJS.Signals = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}
