import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startForeground } from './foreground.js';

/**
 * Debian's nginx running the shipped docs/deploy/nginx.conf in front of the test's instances:
 * its site as shipped (one instance) or with its several-instance variant, and nginx as a
 * foreground process with a prefix of its own. Used by test/deploy/nginx.test.ts and the
 * several-instance harness (test/cluster/harness.ts).
 */

export const SHIPPED_NGINX = path.resolve(import.meta.dirname, '../../docs/deploy/nginx.conf');

/** A commented-out line of the file, as it reads once uncommented. */
const uncommented = (line: string) => line.replace(/^#( |$)/, '');

/**
 * docs/deploy/nginx.conf with the test's instances as the server lines of its upstream (the
 * file's server line's parameters kept, max_fails=…): as shipped (`one`), or with the commented
 * several-instance variant in place of that upstream (`several`); a plain listener on
 * `listenPort` instead of 443 with TLS (no certificate here); every other line as shipped.
 */
export function shippedSite(listenPort: number, upstreams: number[], variant: 'one' | 'several'): string {
  const out: string[] = [];
  let block: 'active' | 'variant' | null = null;
  let serversDone = false;
  for (const raw of fs.readFileSync(SHIPPED_NGINX, 'utf8').split('\n')) {
    if (/^upstream service_core \{/.test(raw)) block = 'active';
    else if (/^#\s*upstream service_core \{/.test(raw)) block = 'variant';
    if (block) {
      const line = block === 'variant' ? uncommented(raw) : raw;
      const keep = (block === 'variant') === (variant === 'several');
      if (/^\}/.test(line)) block = null;
      if (!keep) continue;
      const server = /^(\s*server )\S+?(;| .*)$/.exec(line);
      if (!server) out.push(line);
      else if (!serversDone) {
        out.push(...upstreams.map((p) => `${server[1]}127.0.0.1:${p}${server[2]}`));
        serversDone = true;
      }
    } else if (/^\s*listen 443 ssl/.test(raw)) out.push(`    listen 127.0.0.1:${listenPort};`);
    else if (!/^\s*ssl_/.test(raw)) out.push(raw);
  }
  if (!serversDone) throw new Error(`docs/deploy/nginx.conf has no ${variant === 'several' ? 'several-instance upstream variant' : 'upstream'}`);
  return out.join('\n');
}

export interface TestNginx {
  origin: string;
  site: string;
  /** nginx's error log so far */
  errors(): string;
  stop(): Promise<void>;
}

/** nginx in the foreground with a prefix, pid file, temp paths and logs of its own in a temp dir. */
export async function startNginx(site: string, port: number, connections = 256): Promise<TestNginx> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nginx-'));
  for (const d of ['logs', 'tmp']) fs.mkdirSync(path.join(dir, d));
  // the workers (nobody, under a root master) write large request bodies into tmp/
  fs.chmodSync(dir, 0o755);
  fs.chmodSync(path.join(dir, 'tmp'), 0o1777);
  const conf = path.join(dir, 'nginx.conf');
  fs.writeFileSync(
    conf,
    [
      'daemon off;',
      'worker_processes 1;',
      // each client holds two connections (its own and one upstream); short of connections, nginx
      // closes idle keep-alive ones (the broadcaster's) to make room
      `worker_rlimit_nofile ${connections * 4 + 2048};`,
      `pid ${dir}/nginx.pid;`,
      `error_log ${dir}/logs/error.log warn;`,
      `events { worker_connections ${connections * 4 + 1024}; }`,
      'http {',
      `  access_log off;`,
      ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `  ${t}_temp_path ${dir}/tmp/${t};`),
      site,
      '}',
    ].join('\n'),
  );
  const origin = `http://127.0.0.1:${port}`;
  const nginx = await startForeground({ name: 'nginx', command: 'nginx', args: ['-c', conf, '-p', dir], dir, readyUrl: `${origin}/healthz` });
  return { origin, site, errors: () => fs.readFileSync(path.join(dir, 'logs', 'error.log'), 'utf8'), stop: () => nginx.stop('SIGQUIT') };
}
