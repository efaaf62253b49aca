import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { promises as fsp, openSync, closeSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** where Debian's containerd development package keeps containerd's API protos and their imports */
export const GOCODE = '/usr/share/gocode/src';
export const CONTAINERD_API = `${GOCODE}/github.com/containerd/containerd/api/services`;

/**
 * Plugins left out of a private containerd: the CRI server (it wants /var/lib, CNI and the
 * kernel's networking), the snapshotters that need a kernel module or a filesystem of their own,
 * and the opt plugin (it writes /opt/containerd).
 */
const DISABLED_PLUGINS = [
  'io.containerd.grpc.v1.cri',
  'io.containerd.snapshotter.v1.aufs',
  'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.internal.v1.opt',
];

export interface TestContainerd {
  /** the gRPC socket of this private daemon */
  socketPath: string;
  /** temp dir holding its config, root, state, sockets and log */
  dir: string;
  /** what `containerd --version` says: version and revision */
  version: { version: string; revision: string };
  /** runs containerd's own client against this daemon (`ctr --address <socket> ...`) */
  ctr(...args: string[]): Promise<string>;
  /** stops the daemon, keeping its dir (start() brings it back with the same data) */
  halt(): Promise<void>;
  /** starts it again after halt() */
  start(): Promise<void>;
  /** freezes the daemon (SIGSTOP, resolved once the kernel says it is stopped): its socket still takes connections, nothing answers */
  pause(): Promise<void>;
  /** lets a paused daemon run again (SIGCONT) */
  resume(): void;
  /** stops the daemon and removes its dir */
  stop(): Promise<void>;
}

/**
 * Starts a private containerd as root: its own config, root, state and sockets under a short temp
 * dir (nothing under /run/containerd or /var/lib/containerd), no metrics, and waits for its gRPC
 * socket to accept connections.
 */
export async function startContainerd(): Promise<TestContainerd> {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) throw new Error('startContainerd: a private containerd needs root');
  // a UNIX socket path holds at most 107 bytes: keep the dir short
  const base = os.tmpdir().length <= 40 ? os.tmpdir() : '/tmp';
  const dir = await fsp.mkdtemp(path.join(base, 'ctd-'));
  const socketPath = path.join(dir, 'containerd.sock');
  const config = path.join(dir, 'config.toml');
  await fsp.writeFile(
    config,
    [
      'version = 2',
      `root = ${JSON.stringify(path.join(dir, 'root'))}`,
      `state = ${JSON.stringify(path.join(dir, 'state'))}`,
      `disabled_plugins = ${JSON.stringify(DISABLED_PLUGINS)}`,
      '[grpc]',
      `  address = ${JSON.stringify(socketPath)}`,
      '[ttrpc]',
      `  address = ${JSON.stringify(`${socketPath}.ttrpc`)}`,
      '[debug]',
      `  address = ${JSON.stringify(path.join(dir, 'debug.sock'))}`,
      '[metrics]',
      '  address = ""',
      '',
    ].join('\n'),
  );
  const [, , version = '', revision = ''] = (await run('containerd', ['--version'])).stdout.trim().split(/\s+/);
  const logPath = path.join(dir, 'containerd.log');

  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();
  const killOnExit = () => void child?.kill('SIGKILL');

  const halt = async () => {
    const c = child;
    if (!c) return;
    child = null;
    process.off('exit', killOnExit);
    if (c.exitCode === null && c.signalCode === null) {
      c.kill('SIGTERM');
      if (!(await within(exited, 10_000))) {
        c.kill('SIGKILL');
        await within(exited, 5_000);
      }
    }
  };

  const start = async () => {
    if (child) return;
    const logFd = openSync(logPath, 'a');
    let c: ChildProcess;
    try {
      c = spawn('containerd', ['--config', config], { stdio: ['ignore', logFd, logFd] });
    } finally {
      closeSync(logFd);
    }
    child = c;
    exited = new Promise<void>((resolve) => {
      c.once('exit', () => resolve());
      c.once('error', () => resolve());
    });
    process.once('exit', killOnExit);
    const deadline = Date.now() + 20_000;
    while (!(await connects(socketPath))) {
      if (c.exitCode !== null || c.signalCode !== null || Date.now() > deadline) {
        const tail = await logTail(logPath);
        await halt();
        throw new Error(`containerd did not start; log tail:\n${tail}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  const handle: TestContainerd = {
    socketPath,
    dir,
    version: { version, revision },
    ctr: async (...args) => (await run('ctr', ['--address', socketPath, ...args], { timeout: 10_000 })).stdout,
    halt,
    start,
    pause: async () => {
      const c = child;
      if (!c?.pid) throw new Error('containerd is not running');
      c.kill('SIGSTOP');
      // the signal is sent, not yet taken: wait for the state the kernel reports (T, stopped)
      const deadline = Date.now() + 5000;
      while (!/^\d+ \(.*\) T /.test(await fsp.readFile(`/proc/${c.pid}/stat`, 'utf8'))) {
        if (Date.now() > deadline) throw new Error('containerd did not stop on SIGSTOP');
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    resume: () => void child?.kill('SIGCONT'),
    stop: async () => {
      child?.kill('SIGCONT');
      await halt();
      await fsp.rm(dir, { recursive: true, force: true, maxRetries: 3 });
    },
  };
  try {
    await start();
  } catch (err) {
    await fsp.rm(dir, { recursive: true, force: true });
    throw err;
  }
  return handle;
}

/** Does the socket accept a connection? */
function connects(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(socketPath);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const done = await Promise.race([p.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms)))]);
  if (timer) clearTimeout(timer);
  return done;
}

async function logTail(logPath: string): Promise<string> {
  const text = await fsp.readFile(logPath, 'utf8').catch(() => '(no log)');
  return text.split('\n').slice(-30).join('\n');
}
