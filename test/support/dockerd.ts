import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { promises as fsp, openSync, closeSync, existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import Docker from 'dockerode';

const run = promisify(execFile);
const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
export const TEST_IMAGE = 'busybox-local:latest';

export interface TestDockerd {
  /** unix socket of this private daemon */
  socketPath: string;
  docker: Docker;
  image: typeof TEST_IMAGE;
  /** temp dir holding data root, exec root, socket and log */
  dir: string;
  /** true once stop() ran */
  readonly stopped: boolean;
  stop(): Promise<void>;
}

/**
 * Starts a private dockerd (own data root, exec root and socket under a short temp dir, no
 * bridge, no iptables), waits for it to answer and imports a busybox image from the host's
 * static busybox. Needs root, dockerd (Debian docker.io) and /bin/busybox (busybox-static).
 */
export async function startDockerd(): Promise<TestDockerd> {
  if (typeof process.getuid === 'function' && process.getuid() !== 0) {
    throw new Error('startDockerd: a private dockerd needs root (run the tests as root)');
  }
  // unix socket paths are limited to ~107 bytes: keep the dir short
  const base = os.tmpdir().length <= 40 ? os.tmpdir() : '/tmp';
  const dir = await fsp.mkdtemp(path.join(base, 'dk-'));
  const socketPath = path.join(dir, 'docker.sock');
  const logPath = path.join(dir, 'dockerd.log');
  const logFd = openSync(logPath, 'a');
  let child: ChildProcess;
  try {
    child = spawn(
      'dockerd',
      [
        `--data-root=${dir}/root`,
        `--exec-root=${dir}/exec`,
        `--pidfile=${dir}/pid`,
        `-H`,
        `unix://${socketPath}`,
        '--bridge=none',
        '--iptables=false',
        '--ip6tables=false',
        '--shutdown-timeout=1',
      ],
      { stdio: ['ignore', logFd, logFd], env: { ...process.env, PATH: `${process.env.PATH ?? ''}:${SYSTEM_PATH}` } },
    );
  } finally {
    closeSync(logFd);
  }

  let exited = false;
  let spawnError: Error | null = null;
  const exitedPromise = new Promise<void>((resolve) => {
    child.once('exit', () => {
      exited = true;
      resolve();
    });
    child.once('error', (err) => {
      spawnError = err;
      exited = true;
      resolve();
    });
  });
  // a test run that dies without after() must not leave a daemon behind
  const killOnExit = () => {
    if (!exited) child.kill('SIGKILL');
  };
  process.once('exit', killOnExit);

  const docker = new Docker({ socketPath });
  let stopped = false;
  const handle: TestDockerd = {
    socketPath,
    docker,
    image: TEST_IMAGE,
    dir,
    get stopped() {
      return stopped;
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      process.off('exit', killOnExit);
      if (!exited) {
        // containers first, so shutdown does not wait for them
        try {
          const all = await docker.listContainers({ all: true });
          await Promise.all(
            all.map((c) =>
              docker
                .getContainer(c.Id)
                .remove({ force: true })
                .catch(() => undefined),
            ),
          );
        } catch {
          /* daemon already unreachable */
        }
        child.kill('SIGTERM');
        if (!(await within(exitedPromise, 20_000))) {
          child.kill('SIGKILL');
          await within(exitedPromise, 5_000);
        }
      }
      await killPidFile(path.join(dir, 'exec', 'containerd', 'containerd.pid'));
      await unmountUnder(dir);
      await removeDir(dir);
    },
  };

  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited) {
      const tail = await logTail(logPath);
      await handle.stop();
      throw new Error(`dockerd did not start${spawnError ? ` (${(spawnError as Error).message})` : ''}; log tail:\n${tail}`);
    }
    if (existsSync(socketPath)) {
      try {
        await docker.ping();
        break;
      } catch {
        /* not ready yet */
      }
    }
    if (Date.now() > deadline) {
      const tail = await logTail(logPath);
      await handle.stop();
      throw new Error(`dockerd did not answer within 30 s; log tail:\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }

  try {
    await importBusybox(docker, dir);
  } catch (err) {
    await handle.stop();
    throw err;
  }
  return handle;
}

/** Image from a root filesystem holding only the host's static busybox and a few applet links. */
async function importBusybox(docker: Docker, dir: string): Promise<void> {
  const busybox = ['/bin/busybox', '/usr/bin/busybox'].find((p) => existsSync(p));
  if (!busybox) throw new Error('startDockerd: /bin/busybox is missing (install busybox-static)');
  const rootfs = path.join(dir, 'rootfs');
  await fsp.mkdir(path.join(rootfs, 'bin'), { recursive: true });
  await fsp.copyFile(busybox, path.join(rootfs, 'bin', 'busybox'));
  await fsp.chmod(path.join(rootfs, 'bin', 'busybox'), 0o755);
  for (const applet of ['sh', 'sleep', 'true', 'cat', 'ls', 'hostname']) {
    await fsp.symlink('busybox', path.join(rootfs, 'bin', applet));
  }
  const tarPath = path.join(dir, 'rootfs.tar');
  await run('tar', ['-C', rootfs, '-cf', tarPath, '.']);
  const [repo, tag] = TEST_IMAGE.split(':');
  const stream = await docker.importImage(tarPath, { repo, tag });
  await new Promise<void>((resolve, reject) => {
    docker.modem.followProgress(stream, (err: Error | null, out: Array<{ error?: string }>) => {
      const failed = out?.find((o) => o.error);
      if (err || failed) reject(err ?? new Error(`docker import failed: ${failed?.error}`));
      else resolve();
    });
  });
  await docker.getImage(TEST_IMAGE).inspect();
}

async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const done = await Promise.race([p.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), ms)))]);
  if (timer) clearTimeout(timer);
  return done;
}

async function killPidFile(pidFile: string): Promise<void> {
  const pid = Number((await fsp.readFile(pidFile, 'utf8').catch(() => '')).trim());
  if (!Number.isInteger(pid) || pid <= 1) return;
  const alive = () => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  if (!alive()) return;
  process.kill(pid, 'SIGTERM');
  for (let i = 0; i < 50 && alive(); i++) await new Promise((r) => setTimeout(r, 100));
  if (alive()) process.kill(pid, 'SIGKILL');
}

/** Lazily unmounts whatever is still mounted below `dir`, deepest first. */
export async function unmountUnder(dir: string): Promise<void> {
  const text = await fsp.readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  const points = text
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((p): p is string => !!p)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((p) => p.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const p of points) await run('umount', ['-l', p]).catch(() => undefined);
}

async function removeDir(dir: string): Promise<void> {
  try {
    await fsp.rm(dir, { recursive: true, force: true });
  } catch {
    // a test may have left an immutable file behind
    await run('chattr', ['-R', '-i', dir]).catch(() => undefined);
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

async function logTail(logPath: string): Promise<string> {
  const text = await fsp.readFile(logPath, 'utf8').catch(() => '(no log)');
  return text.split('\n').slice(-30).join('\n');
}
