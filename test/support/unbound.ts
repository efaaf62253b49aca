/**
 * Starts a throwaway Unbound (Debian's `unbound` package, /usr/sbin/unbound) for tests of the
 * dns provider: DNS on a free UDP/TCP port of 127.0.0.1, remote control on a private UNIX
 * socket without certificates, everything (config, pidfile, socket) in a mkdtemp dir. Not
 * daemonized, no chroot, no user change, no syslog; only the iterator module (nothing is
 * asked upstream by the tests: the zones are local). `stop()` and `start()` restart it on the
 * same socket and port (what it held through remote control is then gone, as in production);
 * `destroy()` stops it and removes the dir.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants as fsConstants } from 'node:fs';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { unusedPort } from './ports.js';

const UNBOUND = '/usr/sbin/unbound';
const READY_TIMEOUT_MS = 10_000;

export interface TestUnbound {
  /** the remote-control socket (SERVICE_DNS_CONTROL_SOCKET) */
  controlSocket: string;
  /** the DNS port on 127.0.0.1 */
  port: number;
  dir: string;
  /** is the process running? */
  running(): boolean;
  /** sends one control command and answers Unbound's text (for assertions) */
  control(command: string): Promise<string>;
  /** freezes the process (SIGSTOP): its sockets accept connections and nothing answers; resume() (SIGCONT) thaws it */
  pause(): void;
  resume(): void;
  /** stops the process (SIGTERM), keeping the dir: start() runs it again on the same socket and port */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** stops it and removes the dir; safe to call twice */
  destroy(): Promise<void>;
}

export interface StartUnboundOptions {
  /** local zones declared in its config (static); default home.arpa. and 77.168.192.in-addr.arpa. */
  zones?: string[];
}

function config(dir: string, port: number, zones: string[]): string {
  return [
    'server:',
    '  interface: 127.0.0.1',
    `  port: ${port}`,
    '  do-ip6: no',
    '  do-daemonize: no',
    '  chroot: ""',
    '  username: ""',
    `  directory: "${dir}"`,
    `  pidfile: "${path.join(dir, 'unbound.pid')}"`,
    '  use-syslog: no',
    '  logfile: ""',
    '  verbosity: 0',
    '  num-threads: 1',
    '  module-config: "iterator"',
    ...zones.map((z) => `  local-zone: "${z}" static`),
    'remote-control:',
    '  control-enable: yes',
    `  control-interface: ${path.join(dir, 'control.sock')}`,
    '  control-use-cert: no',
    '',
  ].join('\n');
}

/** One remote-control command, as unbound-control sends it. */
export function controlCommand(socketPath: string, command: string, timeoutMs = 2000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(socketPath);
    let out = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer to ${command} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once('connect', () => socket.write(`UBCT1 ${command}\n`));
    socket.on('data', (d: Buffer) => (out += d.toString()));
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // a paused one (pause()) must run to handle SIGTERM
  child.kill('SIGCONT');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
  await exited;
  clearTimeout(timer);
}

/** Runs unbound with `conf` and resolves once its control socket answers `status`; rejects when it exits first. */
async function launch(conf: string, socketPath: string): Promise<ChildProcess> {
  const child = spawn(UNBOUND, ['-d', '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  let exitInfo: string | null = null;
  child.once('exit', (code, signal) => (exitInfo = `code ${code}, signal ${signal}`));
  child.once('error', (err) => (exitInfo = err.message));
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (exitInfo) throw new Error(`unbound exited before it answered (${exitInfo}): ${stderr.trim()}`);
    const answer = await controlCommand(socketPath, 'status', 500).catch(() => '');
    if (/is running/.test(answer)) return child;
    await new Promise((r) => setTimeout(r, 50));
  }
  await stopProcess(child);
  throw new Error(`unbound did not answer on ${socketPath} within ${READY_TIMEOUT_MS} ms: ${stderr.trim()}`);
}

export async function startUnbound(options: StartUnboundOptions = {}): Promise<TestUnbound> {
  try {
    await access(UNBOUND, fsConstants.X_OK);
  } catch {
    throw new Error(`dns tests need a real Unbound: ${UNBOUND} is missing. Install Debian's unbound package (apt-get install -y unbound).`);
  }
  // a UNIX socket path is at most 107 bytes: a short temp dir
  const dir = await mkdtemp(path.join(os.tmpdir().length <= 40 ? os.tmpdir() : '/tmp', 'unbound-test-'));
  const controlSocket = path.join(dir, 'control.sock');
  const conf = path.join(dir, 'unbound.conf');
  const zones = options.zones ?? ['home.arpa.', '77.168.192.in-addr.arpa.'];
  let child: ChildProcess | undefined;
  let port = 0;
  try {
    // the port is probed free (TCP) then handed to unbound, which also needs it for UDP: retry when taken
    let lastError: unknown;
    for (let attempt = 0; attempt < 4 && !child; attempt++) {
      port = await unusedPort();
      await writeFile(conf, config(dir, port, zones));
      try {
        child = await launch(conf, controlSocket);
      } catch (err) {
        lastError = err;
      }
    }
    if (!child) throw lastError;
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  let current: ChildProcess = child;
  const killOnExit = () => current.kill('SIGKILL');
  process.on('exit', killOnExit);
  let destroyed: Promise<void> | undefined;
  return {
    controlSocket,
    port,
    dir,
    running: () => current.exitCode === null && current.signalCode === null,
    control: (command) => controlCommand(controlSocket, command),
    pause: () => void current.kill('SIGSTOP'),
    resume: () => void current.kill('SIGCONT'),
    stop: () => stopProcess(current),
    async start() {
      if (current.exitCode === null && current.signalCode === null) return;
      current = await launch(conf, controlSocket);
    },
    destroy() {
      destroyed ??= (async () => {
        await stopProcess(current);
        process.off('exit', killOnExit);
        await rm(dir, { recursive: true, force: true });
      })();
      return destroyed;
    },
  };
}
