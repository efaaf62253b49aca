/**
 * A throwaway systemd user manager (`systemd --user`) on a private D-Bus bus, for tests of the
 * `init` provider against the real thing.
 *
 * It runs under `unshare --mount --pid --fork --kill-child --mount-proc`: a new mount namespace
 * with a tmpfs on /run (where /run/systemd/system is made, so systemd believes it was booted by
 * systemd, and where XDG_RUNTIME_DIR lives), and a new PID namespace whose first process is a
 * small shell script, so that killing it takes every process of the manager with it (its
 * services too, which systemd puts in sessions of their own). The units are read from
 * `<dir>/config/systemd/user` (XDG_CONFIG_HOME), where a `dbus.socket` of our own puts the bus
 * at `<dir>/bus`: outside the namespace's /run, so the test process can reach it.
 *
 * systemd's user manager joins a bus only once its own `dbus.service` runs (it watches that unit
 * to know when the bus is up), so the bus daemon is started through the manager (the script runs
 * `systemctl --user start dbus.service` over the manager's private socket) rather than beside it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const READY_TIMEOUT_MS = 15_000;

const SCRIPT = `#!/bin/sh
# runs as the first process of a new PID and mount namespace
# a cgroup of its own where systemd tracks processes: two managers (two test runs side by side)
# would otherwise share /app.slice/<unit>, and one stopping a unit removed the cgroup the
# other was starting the same unit into
# (a host where that cannot be done, cgroupfs read-only, runs without: said, not fatal)
v2=/sys/fs/cgroup/unified; [ -f /sys/fs/cgroup/cgroup.controllers ] && v2=/sys/fs/cgroup
while IFS=: read -r id ctl cg; do
  case "$ctl" in name=systemd) h=/sys/fs/cgroup/systemd ;; pids) h=/sys/fs/cgroup/pids ;; "") h=$v2 ;; *) continue ;; esac
  [ -f "$h$cg/cgroup.procs" ] || continue
  { mkdir -p "$h$cg/$CGROUP_NAME" && echo 0 > "$h$cg/$CGROUP_NAME/cgroup.procs"; } 2>/dev/null || echo "no cgroup of its own in $h$cg" >&2
done < /proc/self/cgroup
mount -t tmpfs -o mode=755 tmpfs /run || exit 1
mkdir -p /run/systemd/system "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR" || exit 1
rm -f "$BUS_SOCKET"
systemd --user --unit=default.target &
i=0
while [ ! -S "$XDG_RUNTIME_DIR/systemd/private" ]; do
  sleep 0.05; i=$((i+1))
  [ $i -gt 200 ] && { echo "systemd --user made no private socket" >&2; exit 1; }
done
systemctl --user start dbus.service >&2 || exit 1
echo "$DBUS_SESSION_BUS_ADDRESS"
wait
`;

const DBUS_SOCKET = (bus: string) => `[Unit]
Description=D-Bus User Message Bus Socket (test)

[Socket]
ListenStream=${bus}
`;

export interface SystemdUser {
  /** the D-Bus address the manager is on (`unix:path=<dir>/bus`) */
  address: string;
  dir: string;
  /** where unit files go (XDG_CONFIG_HOME/systemd/user) */
  unitDir: string;
  /** writes a unit file (before start, or followed by a daemon-reload) */
  writeUnit(name: string, text: string): void;
  /** kills the manager with everything it started (the bus too); the dir stays */
  stop(): Promise<void>;
  /** starts a new manager on the same dir and address (after stop) */
  start(): Promise<void>;
  /** stops it and removes the dir */
  destroy(): Promise<void>;
}

/** The PID namespace of a process (`pid:[n]`), or null once it is gone. */
function pidNamespaceOf(pid: number): string | null {
  try {
    return fs.readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return null;
  }
}

/** Is a process still running (not a zombie waiting for its parent to reap it)? */
function alive(pid: number): boolean {
  try {
    // the state follows the command's closing parenthesis
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** The cgroups a manager named `name` is moved into (SCRIPT), one a hierarchy systemd tracks processes in. */
function cgroupsOf(name: string): string[] {
  // the unified hierarchy: beside the others (hybrid), or the only one (cgroup v2 alone)
  const v2 = fs.existsSync('/sys/fs/cgroup/cgroup.controllers') ? '' : 'unified';
  const hierarchy: Record<string, string> = { 'name=systemd': 'systemd', pids: 'pids', '': v2 };
  return fs
    .readFileSync('/proc/self/cgroup', 'utf8')
    .trim()
    .split('\n')
    .map((line) => line.split(':'))
    .filter(([, ctl]) => ctl! in hierarchy)
    .map(([, ctl, cg]) => path.join('/sys/fs/cgroup', hierarchy[ctl!]!, cg!, name))
    .filter((dir) => fs.existsSync(path.dirname(dir)));
}

/** Removes a cgroup and the ones systemd made in it, the deepest first (each is empty once the manager is gone). */
function removeCgroup(dir: string): void {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) if (e.isDirectory()) removeCgroup(path.join(dir, e.name));
  try {
    fs.rmdirSync(dir);
  } catch {
    // still in use, or gone already
  }
}

let managers = 0;

/** Is any process of this PID namespace still running? */
function namespaceInUse(ns: string): boolean {
  for (const entry of fs.readdirSync('/proc')) {
    if (/^\d+$/.test(entry) && pidNamespaceOf(Number(entry)) === ns && alive(Number(entry))) return true;
  }
  return false;
}

/** The first child of `pid` (unshare's forked child: the namespace's first process). */
function firstChildOf(pid: number): number | null {
  try {
    const children = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    return children.length ? Number(children[0]) : null;
  } catch {
    return null;
  }
}

export async function startSystemdUser(units: Record<string, string> = {}): Promise<SystemdUser> {
  // a UNIX socket path has at most 107 bytes
  const dir = fs.mkdtempSync(path.join(os.tmpdir().length <= 40 ? os.tmpdir() : '/tmp', 'svc-systemd-'));
  const unitDir = path.join(dir, 'config', 'systemd', 'user');
  const busSocket = path.join(dir, 'bus');
  fs.mkdirSync(unitDir, { recursive: true });
  fs.mkdirSync(path.join(dir, 'home'));
  fs.writeFileSync(path.join(dir, 'start.sh'), SCRIPT, { mode: 0o755 });
  fs.writeFileSync(path.join(unitDir, 'dbus.socket'), DBUS_SOCKET(busSocket));
  const writeUnit = (name: string, text: string) => fs.writeFileSync(path.join(unitDir, name), text);
  for (const [name, text] of Object.entries(units)) writeUnit(name, text);
  const address = `unix:path=${busSocket}`;
  const cgroupName = `svc-test-systemd-${process.pid}-${++managers}`;

  let child: ChildProcess | null = null;
  let namespace: string | null = null;

  const stop = async () => {
    const running = child;
    child = null;
    if (running && running.exitCode === null && running.signalCode === null) {
      const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
      // the group: unshare and the namespace's first process (whose end ends the namespace)
      try {
        process.kill(-running.pid!, 'SIGKILL');
      } catch {
        running.kill('SIGKILL');
      }
      await exited;
    }
    // every process of the namespace is gone before this resolves
    const deadline = Date.now() + 5000;
    while (namespace && namespaceInUse(namespace)) {
      if (Date.now() > deadline) throw new Error(`processes of ${namespace} outlived the manager`);
      await new Promise((r) => setTimeout(r, 20));
    }
    namespace = null;
  };

  const start = async () => {
    if (child) throw new Error('the manager is running');
    const proc = spawn(
      'unshare',
      ['--mount', '--propagation', 'private', '--pid', '--fork', '--kill-child', '--mount-proc', 'sh', path.join(dir, 'start.sh')],
      {
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: {
          PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
          LANG: 'C.UTF-8',
          HOME: path.join(dir, 'home'),
          XDG_CONFIG_HOME: path.join(dir, 'config'),
          XDG_RUNTIME_DIR: '/run/user/0',
          DBUS_SESSION_BUS_ADDRESS: address,
          BUS_SOCKET: busSocket,
          CGROUP_NAME: cgroupName,
        },
      },
    );
    child = proc;
    let output = '';
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`systemd --user did not come up within ${READY_TIMEOUT_MS} ms: ${stderr.trim()}`)), READY_TIMEOUT_MS);
        proc.stdout!.on('data', (d: Buffer) => {
          output += d.toString();
          if (output.includes('\n')) {
            clearTimeout(timer);
            resolve();
          }
        });
        proc.once('exit', (code, signal) => {
          clearTimeout(timer);
          reject(new Error(`systemd --user set-up ended (${code ?? signal}): ${stderr.trim()}`));
        });
        proc.once('error', (err) => {
          clearTimeout(timer);
          reject(err);
        });
      });
      const first = firstChildOf(proc.pid!);
      namespace = first === null ? null : pidNamespaceOf(first);
      if (output.trim() !== address) throw new Error(`unexpected bus address ${output.trim()}`);
    } catch (err) {
      await stop();
      throw err;
    }
  };

  await start();
  return {
    address,
    dir,
    unitDir,
    writeUnit,
    stop,
    start,
    destroy: async () => {
      await stop();
      for (const cg of cgroupsOf(cgroupName)) removeCgroup(cg);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
