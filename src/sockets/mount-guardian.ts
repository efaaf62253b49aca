import { constants as fsc, promises as fsp, type Stats } from 'node:fs';
import path from 'node:path';
import Joi from 'joi';
import type { Logger } from '../log.js';
import { SocketError } from './errors.js';
import { isInside } from './paths.js';

export interface MountStatus {
  /** null when the path was not inspected (not managed, invalid) */
  exists: boolean | null;
  writable: boolean | null;
  is_mount_point: boolean | null;
  owner_uid: number | null;
  /** four octal digits, e.g. "0755" */
  mode: string | null;
  /** null when healthy; else not_managed | not_found | not_a_directory | not_writable | invalid_path | inaccessible */
  error: string | null;
}

export interface MountCheckResult {
  healthy: boolean;
  mounts: Record<string, MountStatus>;
}

export interface RepairOptions {
  /** octal digits as a string ("0755", "750"); never a number, so 755 cannot turn into 0o1363 */
  mode?: string;
  owner_uid?: number;
  owner_gid?: number;
}

export interface RepairResult {
  status: 'repaired';
  /** the resolved (symlink-free) directory that was repaired */
  target_dir: string;
  /** entries whose mode or owner actually changed */
  changed: number;
  /** entries skipped because they could not be changed or changed under our feet */
  failed: number;
}

const MAX_ID = 4_294_967_294;

export const checkPathsSchema = Joi.array().items(Joi.string().min(1).max(4096)).min(1).max(64);

export const repairSchema = Joi.object({
  target_dir: Joi.string().min(1).max(4096).required(),
  mode: Joi.string().pattern(/^[0-7]{3,4}$/, 'octal mode').default('0755'),
  owner_uid: Joi.number().integer().min(0).max(MAX_ID),
  owner_gid: Joi.number().integer().min(0).max(MAX_ID),
});

const NOT_INSPECTED = { exists: null, writable: null, is_mount_point: null, owner_uid: null, mode: null } as const;

/**
 * Verifies directories and repairs their permissions, only ever inside the managed dirs
 * (SERVICE_MANAGED_DIRS). check() is read-only; repair() is the only method that changes anything.
 */
export class MountGuardian {
  readonly managedDirs: string[];

  constructor(private readonly opts: { managedDirs: string[]; logger?: Logger }) {
    if (!Array.isArray(opts.managedDirs) || opts.managedDirs.length === 0) throw new Error('MountGuardian needs at least one managed dir');
    this.managedDirs = opts.managedDirs.map((d) => path.resolve(d));
  }

  async check(paths: string[]): Promise<MountCheckResult> {
    const { error } = checkPathsSchema.validate(paths, { convert: false });
    if (error) throw new SocketError('invalid_args', `paths: ${error.message}`);
    const roots = await this.managedRoots();
    const mountPoints = await readMountPoints();
    const mounts: Record<string, MountStatus> = {};
    for (const p of paths) mounts[p] = await this.inspect(p, roots, mountPoints);
    const healthy = Object.values(mounts).every((m) => m.error === null);
    return { healthy, mounts };
  }

  async repair(target: string, options: RepairOptions = {}): Promise<RepairResult> {
    const { value, error } = repairSchema.validate({ target_dir: target, ...options }, { convert: false, abortEarly: false });
    if (error) {
      throw new SocketError('invalid_args', error.message, error.details.map((d) => ({ field: d.path.join('.'), message: d.message })));
    }
    const args = value as { target_dir: string; mode: string; owner_uid?: number; owner_gid?: number };
    if (!path.isAbsolute(args.target_dir) || args.target_dir.includes('\0')) {
      throw new SocketError('invalid_args', 'target_dir must be an absolute path');
    }
    const roots = await this.managedRoots();
    let resolved: Awaited<ReturnType<typeof resolvePath>>;
    try {
      resolved = await resolvePath(args.target_dir);
    } catch (err) {
      // ENAMETOOLONG, ELOOP, EACCES…: the caller's path cannot be resolved, which is not our failure
      throw new SocketError('invalid_args', `target_dir cannot be resolved (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    if (!resolved || !roots.some((r) => isInside(resolved!.real, r))) {
      throw new SocketError('forbidden', 'target_dir is outside the managed directories');
    }
    if (!resolved.exists) throw new SocketError('not_found', 'target_dir does not exist');
    const st = await fsp.lstat(resolved.real);
    if (!st.isDirectory()) throw new SocketError('invalid_args', 'target_dir is not a directory');

    const mode = parseInt(args.mode, 8);
    const owner = args.owner_uid === undefined && args.owner_gid === undefined ? null : { uid: args.owner_uid ?? -1, gid: args.owner_gid ?? -1 };
    const counts = { changed: 0, failed: 0 };
    await walk(resolved.real, mode, owner, counts);
    this.opts.logger?.info({ target_dir: resolved.real, mode: args.mode, owner_uid: args.owner_uid, owner_gid: args.owner_gid, ...counts }, 'directory permissions repaired');
    return { status: 'repaired', target_dir: resolved.real, changed: counts.changed, failed: counts.failed };
  }

  private async inspect(p: string, roots: string[], mountPoints: Set<string>): Promise<MountStatus> {
    if (typeof p !== 'string' || !path.isAbsolute(p) || p.includes('\0')) return { ...NOT_INSPECTED, error: 'invalid_path' };
    let resolved: Awaited<ReturnType<typeof resolvePath>>;
    try {
      resolved = await resolvePath(p);
    } catch {
      return { ...NOT_INSPECTED, error: 'inaccessible' };
    }
    // outside (or escaping) the managed dirs: nothing beyond the resolution is looked at
    if (!resolved || !roots.some((r) => isInside(resolved.real, r))) return { ...NOT_INSPECTED, error: 'not_managed' };
    if (!resolved.exists) return { exists: false, writable: false, is_mount_point: false, owner_uid: null, mode: null, error: 'not_found' };
    let st: Stats;
    try {
      st = await fsp.stat(resolved.real);
    } catch {
      return { ...NOT_INSPECTED, exists: true, error: 'inaccessible' };
    }
    const writable = await fsp.access(resolved.real, fsc.W_OK).then(
      () => true,
      () => false,
    );
    const status: MountStatus = {
      exists: true,
      writable,
      is_mount_point: await isMountPoint(resolved.real, st, mountPoints),
      owner_uid: st.uid,
      mode: (st.mode & 0o7777).toString(8).padStart(4, '0'),
      error: null,
    };
    if (!st.isDirectory()) status.error = 'not_a_directory';
    else if (!writable) status.error = 'not_writable';
    return status;
  }

  private async managedRoots(): Promise<string[]> {
    // resolved per call: a managed dir may be created or re-pointed after boot
    return Promise.all(this.managedDirs.map((d) => fsp.realpath(d).catch(() => d)));
  }
}


/**
 * The real path of `p` (kernel semantics: symlinks first, then ".."). For a missing path: the
 * real path of its deepest existing ancestor plus the missing names, or null when the missing
 * part holds "." or ".." (it could point anywhere once created).
 */
async function resolvePath(p: string): Promise<{ real: string; exists: boolean } | null> {
  try {
    return { real: await fsp.realpath(p), exists: true };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err;
  }
  const segments = p.split('/').filter(Boolean);
  for (let i = segments.length - 1; i >= 0; i--) {
    const ancestor = `/${segments.slice(0, i).join('/')}`;
    let real: string;
    try {
      real = await fsp.realpath(ancestor);
    } catch {
      continue;
    }
    const rest = segments.slice(i);
    if (rest.some((s) => s === '.' || s === '..')) return null;
    return { real: path.join(real, ...rest), exists: false };
  }
  return null;
}

async function readMountPoints(): Promise<Set<string>> {
  const text = await fsp.readFile('/proc/self/mountinfo', 'utf8').catch(() => '');
  const points = new Set<string>();
  for (const line of text.split('\n')) {
    const field = line.split(' ')[4];
    // mountinfo escapes space, tab, newline and backslash as octal
    if (field) points.add(field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))));
  }
  return points;
}

async function isMountPoint(real: string, st: Stats, mountPoints: Set<string>): Promise<boolean> {
  if (real === '/' || mountPoints.has(real)) return true;
  try {
    const parent = await fsp.stat(path.dirname(real));
    return parent.dev !== st.dev;
  } catch {
    return false;
  }
}

const OPEN_FLAGS = fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK;

/**
 * Recursive chmod/chown below `root` that never follows a symlink: every entry is opened with
 * O_NOFOLLOW, its real location checked through /proc/self/fd, and changed through the descriptor.
 * Directories get `mode`; regular files get its permission bits without setuid/setgid/sticky,
 * and execute bits only when the file already had one (like chmod's X). Other types are left alone.
 */
async function walk(root: string, mode: number, owner: { uid: number; gid: number } | null, counts: { changed: number; failed: number }) {
  const stack: string[] = [root];
  while (stack.length) {
    const dir = stack.pop() as string;
    if (!(await applyTo(dir, 'dir', root, mode, owner, counts))) continue;
    let entries;
    try {
      entries = await fsp.readdir(dir, { withFileTypes: true });
    } catch {
      counts.failed++;
      continue;
    }
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isSymbolicLink()) continue;
      if (e.isDirectory()) stack.push(p);
      else if (e.isFile()) await applyTo(p, 'file', root, mode, owner, counts);
    }
  }
}

async function applyTo(
  p: string,
  kind: 'dir' | 'file',
  root: string,
  mode: number,
  owner: { uid: number; gid: number } | null,
  counts: { changed: number; failed: number },
): Promise<boolean> {
  let fh: fsp.FileHandle | null = null;
  try {
    fh = await fsp.open(p, OPEN_FLAGS | (kind === 'dir' ? fsc.O_DIRECTORY : 0));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EACCES') return applyByPath(p, kind, mode, owner, counts);
    counts.failed++;
    return false;
  }
  try {
    const actual = await fsp.readlink(`/proc/self/fd/${fh.fd}`).catch(() => null);
    // a parent swapped for a symlink while we walked: the descriptor points elsewhere
    if (actual === null || !isInside(actual, root)) {
      counts.failed++;
      return false;
    }
    const st = await fh.stat();
    if (kind === 'dir' ? !st.isDirectory() : !st.isFile()) {
      counts.failed++;
      return false;
    }
    let changed = false;
    // chown first: it may clear setuid/setgid, which the chmod then sets as asked
    if (owner && ((owner.uid !== -1 && st.uid !== owner.uid) || (owner.gid !== -1 && st.gid !== owner.gid))) {
      await fh.chown(owner.uid, owner.gid);
      changed = true;
    }
    const want = targetMode(kind, mode, st.mode);
    const now = changed ? (await fh.stat()).mode & 0o7777 : st.mode & 0o7777;
    if (now !== want) {
      await fh.chmod(want);
      changed = true;
    }
    if (changed) counts.changed++;
    return true;
  } catch {
    counts.failed++;
    return false;
  } finally {
    await fh.close().catch(() => undefined);
  }
}

/** Fallback for entries we may not open (e.g. a directory of mode 000 that we own). */
async function applyByPath(
  p: string,
  kind: 'dir' | 'file',
  mode: number,
  owner: { uid: number; gid: number } | null,
  counts: { changed: number; failed: number },
): Promise<boolean> {
  try {
    const st = await fsp.lstat(p);
    if (st.isSymbolicLink() || (kind === 'dir' ? !st.isDirectory() : !st.isFile())) {
      counts.failed++;
      return false;
    }
    let changed = false;
    if (owner && ((owner.uid !== -1 && st.uid !== owner.uid) || (owner.gid !== -1 && st.gid !== owner.gid))) {
      await fsp.lchown(p, owner.uid, owner.gid);
      changed = true;
    }
    const want = targetMode(kind, mode, st.mode);
    if ((st.mode & 0o7777) !== want || changed) {
      await fsp.chmod(p, want);
      changed = true;
    }
    if (changed) counts.changed++;
    return true;
  } catch {
    counts.failed++;
    return false;
  }
}

function targetMode(kind: 'dir' | 'file', mode: number, current: number): number {
  if (kind === 'dir') return mode;
  const bits = mode & 0o777;
  return current & 0o111 ? bits : bits & ~0o111;
}
