import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { unusedPort } from '../auth/helpers.js';

const run = promisify(execFile);

export interface TestPostgres {
  /** postgres://postgres@127.0.0.1:<port>/postgres */
  url: string;
  port: number;
  start(): Promise<void>;
  /** a fast shutdown: connections are cut, as in an outage */
  stop(): Promise<void>;
  destroy(): Promise<void>;
}

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  if (!versions.length) throw new Error('PostgreSQL server binaries are missing (install the postgresql package)');
  return path.join(root, versions[0], 'bin');
}

/**
 * A throwaway PostgreSQL cluster (initdb into a temp dir, run as the postgres user, on a free
 * port), so a test can stop and start the server without touching the machine's own.
 */
export async function startPostgres(): Promise<TestPostgres> {
  if (process.getuid?.() !== 0) throw new Error('startPostgres runs the server as the postgres user: the tests need root');
  const bin = binDir();
  const port = await unusedPort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pg-'));
  const data = path.join(dir, 'data');
  const as = (cmd: string, args: string[]) => run('runuser', ['-u', 'postgres', '--', path.join(bin, cmd), ...args], { cwd: dir });
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off`;
  const start = async () => {
    await as('pg_ctl', ['-D', data, '-o', opts, '-l', path.join(dir, 'server.log'), '-w', '-t', '30', 'start']);
  };
  const stop = async () => {
    await as('pg_ctl', ['-D', data, '-m', 'fast', '-w', '-t', '30', 'stop']).catch(() => undefined);
  };
  try {
    fs.chownSync(dir, uidOf('postgres'), gidOf('postgres'));
    await as('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
    await start();
  } catch (err) {
    // a cluster that did not start leaves nothing behind
    await as('pg_ctl', ['-D', data, '-m', 'immediate', 'stop']).catch(() => undefined);
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const onExit = () => {
    try {
      execFileSync('runuser', ['-u', 'postgres', '--', path.join(bin, 'pg_ctl'), '-D', data, '-m', 'immediate', 'stop']);
    } catch {
      /* already down */
    }
  };
  process.once('exit', onExit);
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start,
    stop,
    async destroy() {
      process.off('exit', onExit);
      await stop();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

function uidOf(user: string): number {
  const line = fs
    .readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${user}:`));
  if (!line) throw new Error(`no user ${user}`);
  return Number(line.split(':')[2]);
}

function gidOf(user: string): number {
  const line = fs
    .readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`${user}:`));
  return Number(line!.split(':')[3]);
}
