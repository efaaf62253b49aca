import fs from 'node:fs';
import path from 'node:path';
import { syncBuiltinESMExports } from 'node:module';
import knex from 'knex';
import type { Context, RootHookObject } from 'mocha';

/**
 * A test run leaves nothing behind: mocha root hooks, registered in .mocharc.json.
 *
 * Every temp dir this process makes (`fs.mkdtempSync`, `fs.mkdtemp`, `fs/promises` `mkdtemp`,
 * recorded as they are made) and every database the tests create (`freshDatabase`, or
 * `trackDatabase` for one made by hand) must be gone when the run ends. The last hook of the
 * run fails naming what is still there, then removes it, so the machine stays clean while the
 * test that forgot is fixed. Only what this process made counts: another run on the same
 * machine (the other database's mocha process, a CI run) never makes this one fail.
 */

interface Made {
  dirs: Set<string>;
  /** database names by the URL of the server they were created on */
  databases: Map<string, Set<string>>;
}

// one record per process, whichever way this module was reached (mocha's require, an import)
const KEY = Symbol.for('service-core.test.leftovers');
const made: Made = ((globalThis as Record<symbol, unknown>)[KEY] as Made | undefined) ?? { dirs: new Set(), databases: new Map() };
if (!(globalThis as Record<symbol, unknown>)[KEY]) {
  (globalThis as Record<symbol, unknown>)[KEY] = made;
  record();
}

/** Counts a database created on the server of `base` as this run's (checked and dropped at the end). */
export function trackDatabase(base: string, name: string): void {
  const key = serverUrl(base);
  const names = made.databases.get(key) ?? new Set<string>();
  names.add(name);
  made.databases.set(key, names);
}

/** The URL of the server's `postgres` database (where a database is looked up and dropped). */
function serverUrl(base: string): string {
  const u = new URL(base);
  u.pathname = '/postgres';
  return u.toString();
}

function record(): void {
  const keep = (dir: string) => made.dirs.add(path.resolve(dir));
  const sync = fs.mkdtempSync;
  fs.mkdtempSync = function (this: unknown, ...args: Parameters<typeof sync>) {
    const dir = sync.apply(fs, args);
    keep(String(dir));
    return dir;
  } as typeof sync;
  const promised = fs.promises.mkdtemp;
  fs.promises.mkdtemp = async function (this: unknown, ...args: Parameters<typeof promised>) {
    const dir = await promised.apply(fs.promises, args);
    keep(String(dir));
    return dir;
  } as typeof promised;
  const callback = fs.mkdtemp;
  fs.mkdtemp = function (this: unknown, ...args: unknown[]) {
    const done = args.pop() as (err: NodeJS.ErrnoException | null, dir: string) => void;
    return (callback as (...a: unknown[]) => void).apply(fs, [
      ...args,
      (err: NodeJS.ErrnoException | null, dir: string) => {
        if (!err) keep(dir);
        done(err, dir);
      },
    ]);
  } as typeof callback;
  // named imports (`import { mkdtemp } from 'node:fs/promises'`) see the recording versions too
  syncBuiltinESMExports();
}

/** Mount points below `dir` (a private dockerd's, say): a recursive removal would go through them. */
function mountsUnder(dir: string): string[] {
  let text: string;
  try {
    text = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .map((line) => (line.split(' ')[4] ?? '').replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((point) => point.startsWith(`${dir}/`));
}

/** What this process made that is still there, removed on the way (the report names it). */
async function sweep(): Promise<string[]> {
  const left: string[] = [];
  for (const dir of made.dirs) {
    if (!fs.existsSync(dir)) continue;
    if (mountsUnder(dir).length) {
      left.push(`${dir} (not removed: something is still mounted below it)`);
      continue;
    }
    left.push(dir);
    fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  }
  made.dirs.clear();
  for (const [server, names] of made.databases) {
    const admin = knex({ client: 'pg', connection: server, pool: { min: 0, max: 1 }, acquireConnectionTimeout: 5000 });
    try {
      const rows: { datname: string }[] = (await admin.raw('SELECT datname FROM pg_database WHERE datname = ANY(?)', [[...names]])).rows;
      for (const { datname } of rows) {
        left.push(`database ${datname} on ${new URL(server).host}`);
        await admin.raw('DROP DATABASE IF EXISTS ?? WITH (FORCE)', [datname]);
      }
    } catch (err) {
      // a throwaway cluster the tests stopped and removed holds nothing any more
      if (!/ECONNREFUSED|ENOENT|Timeout acquiring/.test((err as Error).message)) throw err;
    } finally {
      await admin.destroy();
    }
  }
  made.databases.clear();
  return left;
}

export const mochaHooks: RootHookObject = {
  beforeAll(this: Context) {
    // appended to the root suite now, so it runs after every other hook of the run
    this.test!.parent!.afterAll('nothing is left behind (temp dirs, databases)', async function (this: Context) {
      this.timeout(60_000);
      const left = await sweep();
      if (left.length) {
        throw new Error(
          `this run left ${left.length} thing(s) behind (now removed): a test or helper must remove what it makes (after/afterEach, finally):\n  ${left.join('\n  ')}`,
        );
      }
    });
  },
};
