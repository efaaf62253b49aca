import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { unusedPort } from './ports.js';

export interface RedisOptions {
  /** `requirepass`: clients must AUTH with this password (as the `default` user) */
  password?: string;
  /**
   * ACL users, one rule line each as `redis-server --user` takes it
   * (`alice on >pw resetchannels &service-core:bus -@all +publish`); `default off` locks out the
   * user that needs no password
   */
  users?: string[];
  /** TLS only (no plain port), with a CA of the test's own and a certificate for localhost and 127.0.0.1 */
  tls?: boolean;
}

export interface TestRedis {
  /** redis://127.0.0.1:<port>, or rediss://localhost:<port> with TLS; no credentials in it */
  url: string;
  port: number;
  /** with TLS: the CA certificate (PEM file) that signed the server's certificate */
  caFile: string | null;
  /** the URL with `user` and `password` in it (user '' for the default user) */
  urlFor(user: string, password: string): string;
  /** kills the server (SIGKILL: as a crash would) */
  kill(): Promise<void>;
  /** starts it again on the same port, empty */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A redis-server of the test's own on a free port (Debian's redis-server), keeping nothing on
 * disk, so a test can kill and restart it without touching the machine's Redis. Optionally
 * locked with a password, ACL users, or TLS.
 */
export async function startRedis(opts: RedisOptions = {}): Promise<TestRedis> {
  const port = await unusedPort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redis-'));
  const args = ['--bind', '127.0.0.1', '-::1', '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning'];
  if (opts.password) args.push('--requirepass', opts.password);
  for (const rule of opts.users ?? []) args.push('--user', ...rule.split(' '));
  let caFile: string | null = null;
  if (opts.tls) {
    const tls = makeCertificates(dir);
    caFile = tls.ca;
    args.push(
      '--port',
      '0',
      '--tls-port',
      String(port),
      '--tls-cert-file',
      tls.cert,
      '--tls-key-file',
      tls.key,
      '--tls-ca-cert-file',
      tls.ca,
      '--tls-auth-clients',
      'no',
    );
  } else {
    args.push('--port', String(port));
  }
  let child: ChildProcess | null = null;
  const run = async () => {
    child = spawn('redis-server', args, { stdio: 'ignore' });
    child.once('error', () => undefined);
    await waitForPort(port, 10_000);
  };
  const kill = async () => {
    const c = child;
    child = null;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    c.kill('SIGKILL');
    await exited;
  };
  const onExit = () => child?.kill('SIGKILL');
  process.once('exit', onExit);
  try {
    await run();
  } catch (err) {
    // nothing of it stays behind
    process.off('exit', onExit);
    await kill();
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const base = opts.tls ? `rediss://localhost:${port}` : `redis://127.0.0.1:${port}`;
  return {
    url: base,
    port,
    caFile,
    urlFor(user: string, password: string) {
      const u = new URL(base);
      u.username = encodeURIComponent(user);
      u.password = encodeURIComponent(password);
      return u.toString();
    },
    kill,
    restart: run,
    async stop() {
      process.off('exit', onExit);
      await kill();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A CA and a server certificate it signed, for localhost and 127.0.0.1, made with openssl in `dir`. */
function makeCertificates(dir: string): { ca: string; cert: string; key: string } {
  const f = (name: string) => path.join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=service-core test CA', '-keyout', f('ca.key'), '-out', f('ca.crt'));
  openssl('req', '-new', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', f('redis.key'), '-out', f('redis.csr'));
  fs.writeFileSync(f('san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n');
  openssl(
    'x509',
    '-req',
    '-in',
    f('redis.csr'),
    '-CA',
    f('ca.crt'),
    '-CAkey',
    f('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    f('san.ext'),
    '-out',
    f('redis.crt'),
  );
  return { ca: f('ca.crt'), cert: f('redis.crt'), key: f('redis.key') };
}

async function waitForPort(port: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.end();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`redis-server did not listen on ${port} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
