/**
 * Starts a throwaway Kea DHCPv4 server (Debian's kea-dhcp4-server) for tests that need a real
 * one: its configuration, control socket, memfile lease database, log, pid and lock files all
 * in a temp dir, no interface to listen on (it binds nothing, needs no privilege), the lease_cmds
 * hook loaded, subnet 192.0.2.0/24 (id 1, a pool of .100-.200) and 198.51.100.0/24 (id 2).
 * `stop()` stops it and removes the dir; `halt()`/`start()` stop and start the same server
 * (its configuration file as config-write left it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants as fsConstants } from 'node:fs';
import { access, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const KEA = '/usr/sbin/kea-dhcp4';
const LEASE_CMDS = '/usr/lib/x86_64-linux-gnu/kea/hooks/libdhcp_lease_cmds.so';
const READY_TIMEOUT_MS = 10_000;

export interface TestKea {
  dir: string;
  socketPath: string;
  configPath: string;
  /** a command over the control socket, Kea's answer as it is */
  command(command: string, args?: Record<string, unknown>): Promise<{ result: number; text?: string; arguments?: any }>;
  /** the configuration file as it is on disk now */
  configOnDisk(): Promise<any>;
  /** stops the server with `signal` (SIGTERM: it removes its socket; SIGKILL: the socket file stays); keeps the dir */
  halt(signal?: NodeJS.Signals): Promise<void>;
  /** pauses (SIGSTOP) or resumes (SIGCONT) the server: its socket accepts but nothing answers */
  pause(): void;
  resume(): void;
  /** starts the server again from its configuration file */
  start(): Promise<void>;
  /** stops it and removes its dir; safe to call twice */
  stop(): Promise<void>;
}

function config(dir: string) {
  return {
    Dhcp4: {
      'interfaces-config': { interfaces: [] },
      'control-socket': { 'socket-type': 'unix', 'socket-name': path.join(dir, 'kea.sock') },
      'lease-database': { type: 'memfile', name: path.join(dir, 'leases4.csv'), 'lfc-interval': 0 },
      'hooks-libraries': [{ library: LEASE_CMDS }],
      'valid-lifetime': 3600,
      subnet4: [
        { id: 1, subnet: '192.0.2.0/24', pools: [{ pool: '192.0.2.100 - 192.0.2.200' }] },
        { id: 2, subnet: '198.51.100.0/24', pools: [{ pool: '198.51.100.100 - 198.51.100.200' }] },
      ],
      loggers: [{ name: 'kea-dhcp4', output_options: [{ output: path.join(dir, 'kea.log') }], severity: 'INFO' }],
    },
  };
}

/** One command over a Kea control socket (a connection per command; Kea answers, then closes). */
export function keaCommand(socketPath: string, command: string, args?: Record<string, unknown>, ms = 5000): Promise<any> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`Kea did not answer ${command} within ${ms} ms`));
    }, ms);
    socket.once('connect', () => socket.end(JSON.stringify(args ? { command, arguments: args } : { command })));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.once('close', () => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch (err) {
        reject(err);
      }
    });
  });
}

async function stopProcess(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGCONT');
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
  await exited;
  clearTimeout(timer);
}

export async function startKea(): Promise<TestKea> {
  for (const file of [KEA, LEASE_CMDS]) {
    try {
      await access(file, fsConstants.R_OK);
    } catch {
      throw new Error(`DHCP tests need a real Kea DHCPv4 server: ${file} is missing. Install Debian's kea-dhcp4-server package.`);
    }
  }
  // a short path: a UNIX socket's path is at most 107 bytes
  const dir = await mkdtemp(path.join(os.tmpdir().length <= 40 ? os.tmpdir() : '/tmp', 'kea-test-'));
  const socketPath = path.join(dir, 'kea.sock');
  const configPath = path.join(dir, 'kea-dhcp4.json');
  await writeFile(configPath, JSON.stringify(config(dir), null, 2));
  let child: ChildProcess | null = null;
  const killOnExit = () => child?.kill('SIGKILL');
  process.on('exit', killOnExit);

  const launch = async () => {
    const proc = spawn(KEA, ['-c', configPath], {
      stdio: ['ignore', 'pipe', 'pipe'],
      // its pid and lock files in the dir, nothing under /run or /var
      env: { ...process.env, KEA_PIDFILE_DIR: dir, KEA_LOCKFILE_DIR: dir, KEA_LOGGER_DESTINATION: path.join(dir, 'kea.log') },
    });
    let output = '';
    proc.stdout!.on('data', (d: Buffer) => (output = (output + d.toString()).slice(-4000)));
    proc.stderr!.on('data', (d: Buffer) => (output = (output + d.toString()).slice(-4000)));
    child = proc;
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        const log = await readFile(path.join(dir, 'kea.log'), 'utf8').catch(() => '');
        throw new Error(`kea-dhcp4 exited before it answered (${proc.exitCode ?? proc.signalCode}): ${output.trim()}\n${log.slice(-2000)}`);
      }
      const answer = await keaCommand(socketPath, 'version-get', undefined, 1000).catch(() => null);
      if (answer?.result === 0) return;
      if (Date.now() > deadline) {
        await stopProcess(proc, 'SIGKILL');
        throw new Error(`kea-dhcp4 did not answer on ${socketPath} within ${READY_TIMEOUT_MS} ms: ${output.trim()}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  try {
    await launch();
  } catch (err) {
    process.off('exit', killOnExit);
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  let stopped: Promise<void> | undefined;
  return {
    dir,
    socketPath,
    configPath,
    command: (command, args) => keaCommand(socketPath, command, args),
    configOnDisk: async () => JSON.parse(await readFile(configPath, 'utf8')),
    halt: async (signal = 'SIGTERM') => {
      if (child) await stopProcess(child, signal);
    },
    pause: () => void child?.kill('SIGSTOP'),
    resume: () => void child?.kill('SIGCONT'),
    start: () => launch(),
    stop() {
      stopped ??= (async () => {
        process.off('exit', killOnExit);
        if (child) await stopProcess(child);
        await rm(dir, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
}
