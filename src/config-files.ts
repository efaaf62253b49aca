/**
 * The files of the configuration (src/config.ts): the data dir made private to the service's
 * user, and the master key generated once into it.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ConfigError } from './config-error.js';

/**
 * Makes `dir` private to the service's user when it is missing: mode 0700 (its parents, if
 * missing too, as usual). With `tighten`, an existing `dir` that group or others may enter is
 * set to 0700; the answer is then what to log (once: the next look finds it private), else null.
 */
export function privateDir(dir: string, opts: { tighten: boolean }): string | null {
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
    return null;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const st = fs.statSync(dir);
  const mode = st.mode & 0o7777;
  if (!opts.tighten || !st.isDirectory() || (mode & 0o077) === 0) return null;
  const was = mode.toString(8).padStart(4, '0');
  try {
    fs.chmodSync(dir, 0o700);
    return `${dir} was mode ${was}, open to other users: set to 0700`;
  } catch (err) {
    return `${dir} is mode ${was}, open to other users, and could not be set to 0700: ${(err as Error).message}`;
  }
}

/** The master key: from the environment, else generated once into the data dir (0600). */
export function resolveSecretKey(dataDir: string, fromEnv: string | undefined, writeFiles: boolean): { key: string; generated: boolean; kept: boolean } {
  if (fromEnv) return { key: fromEnv, generated: false, kept: true };
  const file = path.join(dataDir, 'secret.key');
  try {
    const existing = fs.readFileSync(file, 'utf8').trim();
    if (existing.length >= 32) return { key: existing, generated: true, kept: true };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw new ConfigError('SERVICE_DATA_DIR', `cannot read ${file}: ${(err as Error).message}`);
  }
  const key = crypto.randomBytes(32).toString('base64url');
  if (writeFiles) {
    try {
      // an existing data dir is tightened (with a warning) when the service starts
      privateDir(dataDir, { tighten: false });
      fs.writeFileSync(file, key + '\n', { mode: 0o600, flag: 'wx' });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return resolveSecretKey(dataDir, undefined, false);
      throw new ConfigError('SERVICE_DATA_DIR', `cannot write ${file}: ${(err as Error).message}`);
    }
  }
  return { key, generated: true, kept: writeFiles };
}
