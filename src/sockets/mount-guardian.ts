import { constants as fsc, promises as fsp, type Dirent, type Stats } from 'node:fs';
import path from 'node:path';
import Joi from 'joi';
import type { Logger } from '../log.js';
import { SocketError } from './errors.js';
import { HostPaths, inodeKey, resolvePath, type ResolvedRules } from './host-paths.js';
import { isInside } from './paths.js';
import { fieldErrorsOf, fieldErrorsText } from '../errors.js';

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
  /** also change files that nobody but their owner may read today (default: leave them alone) */
  include_private_files?: boolean;
}

export interface RepairResult {
  status: 'repaired';
  /** the resolved (symlink-free) directory that was repaired */
  target_dir: string;
  /** entries whose mode or owner actually changed */
  changed: number;
  /** entries that could not be changed or changed under our feet */
  failed: number;
  /** entries left alone on purpose: private files, files with several hard links, the data dir */
  skipped: number;
}

const MAX_ID = 4_294_967_294;

/** how many paths one mounts:check takes, and how long each may be */
export const CHECK_PATHS_MAX = 64;
export const CHECK_PATH_MAX_LENGTH = 4096;

export const checkPathsSchema = Joi.array().items(Joi.string().min(1).max(CHECK_PATH_MAX_LENGTH)).min(1).max(CHECK_PATHS_MAX);

/** The args of mounts:repair (the body of POST /api/socket/repair), validated: the defaults applied. */
export interface RepairArgs {
  target_dir: string;
  mode: string;
  owner_uid?: number;
  owner_gid?: number;
  include_private_files: boolean;
}

export const repairSchema = Joi.object<RepairArgs, true>({
  target_dir: Joi.string().min(1).max(4096).required(),
  mode: Joi.string()
    .pattern(/^[0-7]{3,4}$/, 'octal mode')
    .default('0755'),
  owner_uid: Joi.number().integer().min(0).max(MAX_ID),
  owner_gid: Joi.number().integer().min(0).max(MAX_ID),
  include_private_files: Joi.boolean().default(false),
});

const NOT_INSPECTED = { exists: null, writable: null, is_mount_point: null, owner_uid: null, mode: null } as const;

/**
 * Verifies directories and repairs their permissions, only ever inside the managed dirs
 * (SERVICE_MANAGED_DIRS) and never in the data dir outside its managed folder (HostPaths).
 * check() is read-only; repair() is the only method that changes anything.
 */
export class MountGuardian {
  readonly managedDirs: string[];
  readonly paths: HostPaths;

  constructor(private readonly opts: { managedDirs: string[]; dataDir: string; logger?: Logger }) {
    if (!Array.isArray(opts.managedDirs) || opts.managedDirs.length === 0) throw new Error('MountGuardian needs at least one managed dir');
    this.paths = new HostPaths({ dataDir: opts.dataDir, roots: opts.managedDirs });
    this.managedDirs = this.paths.roots;
  }

  async check(paths: string[]): Promise<MountCheckResult> {
    const { error } = checkPathsSchema.validate(paths, { convert: false });
    if (error) throw new SocketError('invalid_args', `required_dirs: ${error.message}`, [{ field: 'required_dirs', message: error.message }]);
    const rules = await this.paths.resolveRules();
    const mountPoints = await readMountPoints();
    const mounts: Record<string, MountStatus> = {};
    for (const p of paths) mounts[p] = await this.inspect(p, rules, mountPoints);
    const healthy = Object.values(mounts).every((m) => m.error === null);
    return { healthy, mounts };
  }

  async repair(target: string, options: RepairOptions = {}): Promise<RepairResult> {
    const { value: args, error } = repairSchema.validate({ target_dir: target, ...options }, { convert: false, abortEarly: false });
    if (error) {
      const problems = fieldErrorsOf(error);
      throw new SocketError('invalid_args', fieldErrorsText(problems), problems);
    }
    const resolved = await this.paths.check(args.target_dir, 'target_dir');
    if (!resolved.exists) throw new SocketError('not_found', 'target_dir does not exist');
    const st = await fsp.lstat(resolved.real);
    if (!st.isDirectory()) throw new SocketError('invalid_args', 'target_dir is not a directory', [{ field: 'target_dir', message: 'is not a directory' }]);

    const rules = await this.paths.resolveRules();
    const { dataDir, above, inside } = rules.inodes;
    const plan: RepairPlan = {
      root: resolved.real,
      rules,
      dataInodes: new Set([...(dataDir ? [dataDir] : []), ...above, ...inside]),
      mode: parseInt(args.mode, 8),
      owner: args.owner_uid === undefined && args.owner_gid === undefined ? null : { uid: args.owner_uid ?? -1, gid: args.owner_gid ?? -1 },
      includePrivate: args.include_private_files,
    };
    const counts = { changed: 0, failed: 0, skipped: 0 };
    await walk(plan, counts);
    this.opts.logger?.info(
      { target_dir: resolved.real, mode: args.mode, owner_uid: args.owner_uid, owner_gid: args.owner_gid, ...counts },
      'directory permissions repaired',
    );
    return { status: 'repaired', target_dir: resolved.real, ...counts };
  }

  private async inspect(p: string, rules: ResolvedRules, mountPoints: Set<string>): Promise<MountStatus> {
    if (typeof p !== 'string' || !path.isAbsolute(p) || p.includes('\0')) return { ...NOT_INSPECTED, error: 'invalid_path' };
    let resolved: Awaited<ReturnType<typeof resolvePath>>;
    try {
      resolved = await resolvePath(p);
    } catch {
      return { ...NOT_INSPECTED, error: 'inaccessible' };
    }
    // outside (or escaping) the managed dirs, or the data dir: nothing beyond the resolution is looked at
    if (!resolved || (await HostPaths.refusalOf(resolved.real, rules)) !== null) return { ...NOT_INSPECTED, error: 'not_managed' };
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

/** Linux O_PATH: a descriptor that names an inode without opening it (no read permission needed, never blocks). */
const O_PATH = 0o10000000;
const OPEN_FLAGS = O_PATH | fsc.O_NOFOLLOW;

interface RepairPlan {
  root: string;
  rules: ResolvedRules;
  /** the data dir, the directories above it and what lies in it outside its managed folder, by inode: a bind mount or hard link of one inside the tree is not touched */
  dataInodes: Set<string>;
  mode: number;
  owner: { uid: number; gid: number } | null;
  includePrivate: boolean;
}

type Counts = { changed: number; failed: number; skipped: number };

/**
 * Recursive chmod/chown below the plan's root that never follows a symlink: every entry is
 * opened with O_PATH | O_NOFOLLOW, its real location checked through /proc/self/fd, and
 * changed through that descriptor's /proc link (the very inode that was checked, whatever is
 * swapped in at its path meanwhile). Directories get `mode`; regular files get its permission
 * bits without setuid/setgid/sticky, and execute bits only when the file already had one (like
 * chmod's X). Files with several hard links (their other names may lie anywhere) and private
 * files (no group or other read bit) are left alone; other types are never touched.
 */
async function walk(plan: RepairPlan, counts: Counts) {
  const stack: string[] = [plan.root];
  while (stack.length) {
    const dir = stack.pop() as string;
    const fd = await applyTo(dir, 'dir', plan, counts);
    if (fd === null) continue;
    let entries: Dirent[];
    try {
      // listed through the checked descriptor, not the path
      entries = await fsp.readdir(`/proc/self/fd/${fd.fd}`, { withFileTypes: true });
    } catch {
      counts.failed++;
      entries = [];
    }
    for (const e of entries) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) stack.push(p);
      // a file's descriptor is closed by applyTo itself (only directories are handed back)
      else if (e.isFile()) await applyTo(p, 'file', plan, counts);
    }
    await fd.close().catch(() => undefined);
  }
}

/** Changes one entry; returns its open descriptor when it may be walked further (a directory), else null. */
async function applyTo(p: string, kind: 'dir' | 'file', plan: RepairPlan, counts: Counts): Promise<fsp.FileHandle | null> {
  let fh: fsp.FileHandle;
  try {
    fh = await fsp.open(p, OPEN_FLAGS | (kind === 'dir' ? fsc.O_DIRECTORY : 0));
  } catch {
    counts.failed++;
    return null;
  }
  const self = `/proc/self/fd/${fh.fd}`;
  let keep = false;
  try {
    const actual = await fsp.readlink(self).catch(() => null);
    // a parent swapped for a symlink while we walked: the descriptor points elsewhere
    if (actual === null || !isInside(actual, plan.root)) {
      counts.failed++;
      return null;
    }
    const st = await fh.stat();
    if (kind === 'dir' ? !st.isDirectory() : !st.isFile()) {
      counts.failed++;
      return null;
    }
    if (plan.dataInodes.has(inodeKey(st)) || HostPaths.refusal(actual, plan.rules) !== null) {
      counts.skipped++;
      return null;
    }
    if (kind === 'file' && (st.nlink > 1 || (!plan.includePrivate && (st.mode & 0o044) === 0))) {
      counts.skipped++;
      return null;
    }
    let changed = false;
    // chown first: it may clear setuid/setgid, which the chmod then sets as asked
    if (plan.owner && ((plan.owner.uid !== -1 && st.uid !== plan.owner.uid) || (plan.owner.gid !== -1 && st.gid !== plan.owner.gid))) {
      await fsp.chown(self, plan.owner.uid, plan.owner.gid);
      changed = true;
    }
    const want = targetMode(kind, plan.mode, st.mode);
    const now = changed ? (await fh.stat()).mode & 0o7777 : st.mode & 0o7777;
    if (now !== want) {
      await fsp.chmod(self, want);
      changed = true;
    }
    if (changed) counts.changed++;
    keep = kind === 'dir';
    return keep ? fh : null;
  } catch {
    counts.failed++;
    return null;
  } finally {
    if (!keep) await fh.close().catch(() => undefined);
  }
}

function targetMode(kind: 'dir' | 'file', mode: number, current: number): number {
  if (kind === 'dir') return mode;
  const bits = mode & 0o777;
  return current & 0o111 ? bits : bits & ~0o111;
}
