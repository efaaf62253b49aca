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
 * say: those hold the master key and the database. Every decision is made on real paths.
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
    return { dataDir, managedFolder: await real(path.join(dataDir, MANAGED_FOLDER)), roots: await Promise.all(this.roots.map(real)) };
  }

  /** Why the real path `real` may not be exposed, or null when it may. */
  static refusal(real: string, rules: ResolvedRules): string | null {
    if (isInside(rules.dataDir, real)) return 'is the data directory or contains it';
    if (isInside(real, rules.dataDir) && !isInside(real, rules.managedFolder)) return `lies in the data directory outside its ${MANAGED_FOLDER} folder`;
    if (!rules.roots.some((r) => isInside(real, r))) return 'is outside the managed directories';
    return null;
  }

  /**
   * Resolves `p` and checks it: the real path, or a SocketError (`forbidden` when the rules
   * refuse it, `invalid_args` when it cannot be resolved). A missing path resolves through its
   * deepest existing ancestor.
   */
  async check(p: string, field: string): Promise<ResolvedPath> {
    if (typeof p !== 'string' || !path.isAbsolute(p) || p.includes('\0')) throw new SocketError('invalid_args', `${field} must be an absolute path`, [{ field, message: 'must be an absolute path' }]);
    let resolved: ResolvedPath | null;
    try {
      resolved = await resolvePath(p);
    } catch (err) {
      // ENAMETOOLONG, ELOOP, EACCES…: the caller's path cannot be resolved, which is not our failure
      const code = (err as NodeJS.ErrnoException).code ?? 'error';
      throw new SocketError('invalid_args', `${field} cannot be resolved (${code})`, [{ field, message: `cannot be resolved (${code})` }]);
    }
    if (!resolved) throw new SocketError('forbidden', `${field} is outside the managed directories`, [{ field, message: 'is outside the managed directories' }]);
    const why = HostPaths.refusal(resolved.real, await this.resolveRules());
    if (why) throw new SocketError('forbidden', `${field} ${why}`, [{ field, message: why }]);
    return resolved;
  }
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
