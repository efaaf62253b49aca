import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
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
 * /readyz's status (0: no answer), on a connection of its own that closes after the answer: one
 * left idle (fetch keeps its connections) would hold the service's stop to STOP_IDLE_MS.
 */
function readyzStatus(port: number): Promise<number> {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/readyz', agent: false, headers: { connection: 'close' }, timeout: 5000 }, (res) => {
      res.resume();
      // an answer cut short ends with 'close' and no 'end'
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('close', () => resolve(res.complete ? (res.statusCode ?? 0) : 0));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(0));
  });
}

/**
 * How long a service started as a process may take to get ready (`/readyz` 200, or its `ready`
 * log line). A cold start under tsx compiles the service first; on a loaded 2-core machine (the
 * suite beside a CI run) that has taken more than 30 s. Generous, but bounded: a service that
 * never gets ready still fails, with its output. Tests that start one allow for it in their timeout.
 */
export const READY_TIMEOUT_MS = 90_000;

/** What the build in dist/ is made from (scripts/build.mjs): an edit to any of them makes it stale. */
const BUILD_SOURCES = [
  'src',
  'migrations',
  'seeds',
  'knexfile.ts',
  'package.json',
  'tsconfig.json',
  'tsconfig.build.json',
  'scripts/build.mjs',
  'scripts/bundle-server.mjs',
];

function newestChange(p: string): number {
  const stat = fs.statSync(p, { throwIfNoEntry: false });
  if (!stat) return 0;
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(stat.mtimeMs, ...fs.readdirSync(p).map((name) => newestChange(path.join(p, name))));
}

let buildIsCurrent: boolean | undefined;

/**
 * The command line of the service (`main`) or of the CLI (`cli`) as a process of its own: the
 * build in dist/ (what `npm start` and the installed command run: the server's bundle,
 * dist/server/main.js, and the CLI's dist/server/cli.js) when it is newer than every source it
 * is made from, else the sources under tsx; a build older than an edit is never what a test runs.
 * `npm ci` builds it; from the build a process starts on half the CPU of tsx, which compiles and
 * loads every module first.
 */
export function serviceCommand(entry: 'main' | 'cli'): string[] {
  const built = path.join(ROOT, entry === 'main' ? 'dist/server/main.js' : 'dist/server/cli.js');
  buildIsCurrent ??= (() => {
    // the bundle is the build's last step: when it is there, so is the rest
    const builtAt = fs.statSync(path.join(ROOT, 'dist/server/main.js'), { throwIfNoEntry: false })?.mtimeMs ?? 0;
    return builtAt > 0 && BUILD_SOURCES.every((source) => newestChange(path.join(ROOT, source)) < builtAt);
  })();
  return buildIsCurrent
    ? [process.execPath, built]
    : [process.execPath, '--import', 'tsx', path.join(ROOT, `src/${entry === 'main' ? 'main' : 'cli/main'}.ts`)];
}

/**
 * The service as its own process (serviceCommand), for what an in-process service cannot
 * show: a SIGKILL, signals, the exit code. Waits for /readyz 200.
 */
export async function spawnService(opts: {
  dataDir: string;
  databaseUrl: string | null;
  env?: Record<string, string>;
  command?: string[];
  pollMs?: number;
}): Promise<ServiceProcess> {
  const port = await unusedPort();
  const env = { ...process.env, ...testEnv(opts.dataDir, opts.databaseUrl, { SERVICE_LOG_LEVEL: 'info', ...opts.env }), SERVICE_PORT: String(port) };
  const command = opts.command ?? serviceCommand('main');
  const child = spawn(command[0], command.slice(1), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d) => (out += d.toString()));
  child.stderr!.on('data', (d) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const onExit = () => child.kill('SIGKILL');
  process.once('exit', onExit);
  exited.then(() => process.off('exit', onExit));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the service process exited (${child.exitCode}):\n${out.slice(-2000)}`);
    const ready = (await readyzStatus(port)) === 200;
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
