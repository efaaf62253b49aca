import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { SocketError } from './errors.js';
import { isInside } from './paths.js';

/** The one folder of the data dir that may be managed (mounted into runners, repaired). */
export const MANAGED_FOLDER = 'managed';

export interface HostPathRules {
  /** SERVICE_DATA_DIR: holds secret.key and the SQLite file */
  dataDir: string;
  /** SERVICE_MANAGED_DIRS: the only roots a host path may lie in */
  roots: string[];
}

/** Real paths of the rules, resolved at the moment of a check (a root may be re-pointed after boot). */
export interface ResolvedRules {
  dataDir: string;
  managedFolder: string;
  roots: string[];
  /** the same places by device and inode, which a bind mount or a hard link cannot rename */
  inodes: DataDirInodes;
}

/**
 * The data dir by device and inode ("dev:ino" keys): itself, its managed folder, the
 * directories above it, and what lies in it outside the managed folder. A bind mount of the
 * data dir (or of a folder in it) shows its inode under another name; a hard link of
 * secret.key is that file's inode under another name.
 */
export interface DataDirInodes {
  dataDir: string | null;
  managedFolder: string | null;
  above: Set<string>;
  inside: Set<string>;
}

/** At most this many entries of the data dir outside its managed folder are indexed; more and nothing is exposed. */
export const MAX_DATA_DIR_ENTRIES = 10_000;

/** "dev:ino" of a stat result. */
export function inodeKey(st: { dev: number; ino: number }): string {
  return `${st.dev}:${st.ino}`;
}

export interface ResolvedPath {
  /** symlink-free absolute path */
  real: string;
  exists: boolean;
}

/**
 * Decides which host paths the socket providers may expose (bind-mount into a runner) or
 * change (repair). A path must lie inside a managed root, and is never the data dir, a
 * directory that contains it, or anything in it outside `<data>/managed`, whatever the roots
 * say: those hold the master key and the database. Every decision is made on real paths, and
 * again by device and inode (refusalOf), which a bind mount or a hard link does not change.
 */
export class HostPaths {
  readonly dataDir: string;
  readonly roots: string[];

  constructor(rules: HostPathRules) {
    if (!Array.isArray(rules.roots) || rules.roots.length === 0) throw new Error('HostPaths needs at least one managed root');
    this.dataDir = path.resolve(rules.dataDir);
    this.roots = rules.roots.map((r) => path.resolve(r));
  }

  /** The default managed root of a data dir. */
  static managedFolderOf(dataDir: string): string {
    return path.join(path.resolve(dataDir), MANAGED_FOLDER);
  }

  async resolveRules(): Promise<ResolvedRules> {
    const real = (p: string) => fsp.realpath(p).catch(() => p);
    const dataDir = await real(this.dataDir);
    const managedFolder = await real(path.join(dataDir, MANAGED_FOLDER));
    return { dataDir, managedFolder, roots: await Promise.all(this.roots.map(real)), inodes: await dataDirInodes(dataDir, managedFolder) };
  }

  /** Why the real path `real` may not be exposed, judged on its path alone, or null when it may. */
  static refusal(real: string, rules: ResolvedRules): string | null {
    if (isInside(rules.dataDir, real)) return REFUSALS.dataDir;
    if (isInside(real, rules.dataDir) && !isInside(real, rules.managedFolder)) return REFUSALS.inData;
    if (!rules.roots.some((r) => isInside(real, r))) return 'is outside the managed directories';
    return null;
  }

  /**
   * Why the real path `real` may not be exposed, on its path and then by inode, or null when
   * it may. By inode: `real` (or what it resolves through when missing) must not be the data
   * dir or a directory above it, and neither it nor a directory above it, up to the first
   * that is the managed folder, may be the data dir or lie in it: so a bind mount of the data
   * dir inside a managed dir, or a hard link of secret.key, is refused as the data dir itself is.
   */
  static async refusalOf(real: string, rules: ResolvedRules): Promise<string | null> {
    const byPath = HostPaths.refusal(real, rules);
    if (byPath) return byPath;
    if (rules.inodes.inside.size > MAX_DATA_DIR_ENTRIES)
      return `cannot be told apart from the data directory (it holds over ${MAX_DATA_DIR_ENTRIES} entries outside its ${MANAGED_FOLDER} folder)`;
    const chain = await inodeChain(real);
    const { dataDir, managedFolder, above, inside } = rules.inodes;
    for (const [i, key] of chain.entries()) {
      if (key === null) continue;
      if (i === 0 && (key === dataDir || above.has(key))) return REFUSALS.dataDir;
      if (key === managedFolder) return null;
      if (key === dataDir || inside.has(key)) return REFUSALS.inData;
    }
    return null;
  }

  /**
   * Resolves `p` and checks it: the real path, or a SocketError (`forbidden` when the rules
   * refuse it, `invalid_args` when it cannot be resolved). A missing path resolves through its
   * deepest existing ancestor.
   */
  async check(p: string, field: string): Promise<ResolvedPath> {
    if (typeof p !== 'string' || !path.isAbsolute(p) || p.includes('\0'))
      throw new SocketError('invalid_args', `${field} must be an absolute path`, [{ field, message: 'must be an absolute path' }]);
    let resolved: ResolvedPath | null;
    try {
      resolved = await resolvePath(p);
    } catch (err) {
      // ENAMETOOLONG, ELOOP, EACCES…: the caller's path cannot be resolved, which is not our failure
      const code = (err as NodeJS.ErrnoException).code ?? 'error';
      throw new SocketError('invalid_args', `${field} cannot be resolved (${code})`, [{ field, message: `cannot be resolved (${code})` }]);
    }
    if (!resolved)
      throw new SocketError('forbidden', `${field} is outside the managed directories`, [{ field, message: 'is outside the managed directories' }]);
    const why = await HostPaths.refusalOf(resolved.real, await this.resolveRules());
    if (why) throw new SocketError('forbidden', `${field} ${why}`, [{ field, message: why }]);
    return resolved;
  }
}

const REFUSALS = {
  dataDir: 'is the data directory or contains it',
  inData: `lies in the data directory outside its ${MANAGED_FOLDER} folder`,
};

/**
 * "dev:ino" of the absolute path `real` and of each directory above it up to "/", nearest
 * first, by path (so through the names this process sees); null for one that does not exist.
 */
export async function inodeChain(real: string): Promise<Array<string | null>> {
  const keys: Array<string | null> = [];
  for (let p = real; ; p = path.dirname(p)) {
    const st = await fsp.stat(p).catch(() => null);
    keys.push(st ? inodeKey(st) : null);
    if (p === path.dirname(p)) return keys;
  }
}

/**
 * The data dir's inodes (DataDirInodes). What lies in it outside the managed folder is listed
 * without following symlinks, up to one entry past MAX_DATA_DIR_ENTRIES.
 */
export async function dataDirInodes(dataDir: string, managedFolder: string): Promise<DataDirInodes> {
  const self = await fsp.stat(dataDir).catch(() => null);
  const managed = await fsp.stat(managedFolder).catch(() => null);
  const above = new Set<string>();
  if (self && dataDir !== '/') for (const key of await inodeChain(path.dirname(dataDir))) if (key) above.add(key);
  const inside = new Set<string>();
  const managedKey = managed ? inodeKey(managed) : null;
  const stack = self?.isDirectory() ? [dataDir] : [];
  while (stack.length && inside.size <= MAX_DATA_DIR_ENTRIES) {
    const dir = stack.pop() as string;
    const names = await fsp.readdir(dir).catch(() => [] as string[]);
    for (const name of names) {
      const p = path.join(dir, name);
      const st = await fsp.lstat(p).catch(() => null);
      if (!st || st.isSymbolicLink()) continue;
      const key = inodeKey(st);
      // the managed folder is not walked (wherever a bind mount shows it), nor anything twice
      if (key === managedKey || (dir === dataDir && name === MANAGED_FOLDER) || inside.has(key)) continue;
      inside.add(key);
      if (st.isDirectory()) stack.push(p);
      if (inside.size > MAX_DATA_DIR_ENTRIES) break;
    }
  }
  return { dataDir: self ? inodeKey(self) : null, managedFolder: managedKey, above, inside };
}

/**
 * The real path of `p` (kernel semantics: symlinks first, then ".."). For a missing path: the
 * real path of its deepest existing ancestor plus the missing names, or null when the missing
 * part holds "." or ".." (it could point anywhere once created).
 */
export async function resolvePath(p: string): Promise<ResolvedPath | null> {
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
