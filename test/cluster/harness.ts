import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startPostgres, type TestPostgres } from '../support/postgres.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { serviceCommand, READY_TIMEOUT_MS } from '../support/process.js';
import { unusedPort } from '../support/ports.js';
import knex from 'knex';
import { testEnv } from '../support/service.js';

/**
 * Several instances of the service as real processes (each on a port of its own that it keeps
 * across restarts, so nginx's upstream stays as written) on one throwaway PostgreSQL cluster and
 * one Redis of the test's own, behind Debian's nginx running docs/deploy/nginx.conf's
 * several-instance variant. Used by test/cluster/faults.test.ts and scripts/bench/cluster-faults.ts.
 */

const SHIPPED = path.resolve(import.meta.dirname, '../../docs/deploy/nginx.conf');

/** A commented-out line of the file, as it reads once uncommented. */
const uncommented = (line: string) => line.replace(/^#( |$)/, '');

/**
 * docs/deploy/nginx.conf with the commented several-instance upstream in place of the single
 * one, the test's instances as its server lines, a plain listener on `listenPort` instead of
 * 443 with TLS; every other line as shipped.
 */
export function severalInstancesSite(listenPort: number, upstreams: number[]): string {
  const out: string[] = [];
  let block: 'active' | 'variant' | null = null;
  let serversDone = false;
  for (const raw of fs.readFileSync(SHIPPED, 'utf8').split('\n')) {
    if (/^upstream service_core \{/.test(raw)) block = 'active';
    else if (/^#\s*upstream service_core \{/.test(raw)) block = 'variant';
    if (block) {
      const line = block === 'variant' ? uncommented(raw) : raw;
      const keep = block === 'variant';
      if (/^\}/.test(line)) block = null;
      if (!keep) continue;
      const server = /^(\s*server )\S+?(;| .*)$/.exec(line);
      if (!server) out.push(line);
      else if (!serversDone) {
        // the file's address, its parameters kept (max_fails=…)
        out.push(...upstreams.map((p) => `${server[1]}127.0.0.1:${p}${server[2]}`));
        serversDone = true;
      }
    } else if (/^\s*listen 443 ssl/.test(raw)) out.push(`    listen 127.0.0.1:${listenPort};`);
    else if (!/^\s*ssl_/.test(raw)) out.push(raw);
  }
  if (!serversDone) throw new Error('docs/deploy/nginx.conf has no several-instance upstream variant');
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
export async function startNginx(site: string, port: number, connections: number): Promise<TestNginx> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nginx-faults-'));
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
  const child: ChildProcess = spawn('nginx', ['-c', conf, '-p', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d) => (err += d.toString()));
  const exited = new Promise((r) => child.once('exit', r));
  const onExit = () => child.kill('SIGKILL');
  process.once('exit', onExit);
  const stop = async (signal: NodeJS.Signals) => {
    process.off('exit', onExit);
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await exited;
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const origin = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop('SIGKILL');
      throw new Error(`nginx exited: ${err}`);
    }
    const up = await fetch(`${origin}/healthz`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline) {
      await stop('SIGKILL');
      throw new Error(`nginx did not answer within 10 s: ${err}`);
    }
    await sleep(100);
  }
  return { origin, site, errors: () => fs.readFileSync(path.join(dir, 'logs', 'error.log'), 'utf8'), stop: () => stop('SIGQUIT') };
}

export type Exit = { code: number | null; signal: NodeJS.Signals | null };

/** One instance: a port it keeps, a process it can lose and get again. */
export class Instance {
  private child: ChildProcess | null = null;
  private exitedP: Promise<Exit> = Promise.resolve({ code: 0, signal: null });
  private out = '';
  /** what each process of this instance wrote (JSON log lines), the last ones */
  get output(): string {
    return this.out.slice(-20_000);
  }
  constructor(
    readonly name: string,
    readonly port: number,
    private readonly env: Record<string, string>,
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Starts a process on the instance's port and waits for /readyz 200. */
  async start(): Promise<void> {
    if (this.running) throw new Error(`${this.name} is running`);
    const command = serviceCommand('main');
    const child = spawn(command[0]!, command.slice(1), { cwd: path.resolve(import.meta.dirname, '../..'), env: this.env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    child.stdout!.on('data', (d) => (this.out += d.toString()));
    child.stderr!.on('data', (d) => (this.out += d.toString()));
    this.exitedP = new Promise<Exit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
    const onExit = () => child.kill('SIGKILL');
    process.once('exit', onExit);
    void this.exitedP.then(() => process.off('exit', onExit));
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`${this.name} exited (${child.exitCode}):\n${this.output.slice(-2000)}`);
      const ready = await fetch(`${this.url}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ready) return;
      if (Date.now() > deadline) {
        await this.kill('SIGKILL');
        throw new Error(`${this.name} was not ready within ${READY_TIMEOUT_MS / 1000} s:\n${this.output.slice(-2000)}`);
      }
      await sleep(100);
    }
  }

  /** Sends `signal` and resolves once the process is gone, with how it ended. */
  async kill(signal: NodeJS.Signals): Promise<Exit> {
    if (this.running) this.child!.kill(signal);
    return this.exitedP;
  }
}

export interface ClusterOptions {
  instances: number;
  /** ws connections the test will open (per-user cap, nginx's connections) */
  clients: number;
  env?: Record<string, string>;
}

export interface Cluster {
  pg: TestPostgres;
  redis: TestRedis;
  nginx: TestNginx;
  instances: Instance[];
  origin: string;
  databaseUrl: string;
  destroy(): Promise<void>;
}

/** PostgreSQL and Redis, the instances, then nginx in front of them. */
export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const cleanup: Array<() => Promise<unknown>> = [];
  const destroy = async () => {
    for (const step of cleanup.reverse()) await step().catch(() => undefined);
  };
  try {
    // side by side: initdb is the slow part
    const [pgStarted, redisStarted] = await Promise.allSettled([startPostgres(), startRedis()]);
    if (pgStarted.status === 'fulfilled') cleanup.push(() => pgStarted.value.destroy());
    if (redisStarted.status === 'fulfilled') cleanup.push(() => redisStarted.value.stop());
    if (pgStarted.status === 'rejected') throw pgStarted.reason;
    if (redisStarted.status === 'rejected') throw redisStarted.reason;
    const pg = pgStarted.value;
    const redis = redisStarted.value;
    // the database goes with the throwaway cluster
    const admin = knex({ client: 'pg', connection: pg.url, pool: { min: 0, max: 1 } });
    await admin.raw('CREATE DATABASE service').finally(() => admin.destroy());
    const databaseUrl = pg.url.replace(/\/postgres$/, '/service');
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-cluster-'));
    cleanup.push(async () => fs.rmSync(dataDir, { recursive: true, force: true }));
    const nginxPort = await unusedPort();
    const origin = `http://127.0.0.1:${nginxPort}`;
    const ports: number[] = [];
    while (ports.length < opts.instances) {
      const p = await unusedPort();
      if (p !== nginxPort && !ports.includes(p)) ports.push(p);
    }
    const instances = ports.map((port, i) => {
      const env = {
        ...process.env,
        ...testEnv(dataDir, databaseUrl, {
          SERVICE_LOG_LEVEL: 'warn',
          SERVICE_REDIS_URL: redis.url,
          SERVICE_TRUST_PROXY: 'true',
          SERVICE_PUBLIC_URL: origin,
          SERVICE_WS_MAX_CONNECTIONS_PER_USER: String(opts.clients + 100),
          ...opts.env,
        }),
        SERVICE_PORT: String(port),
      } as Record<string, string>;
      return new Instance(`instance ${String.fromCharCode(97 + i)}`, port, env);
    });
    cleanup.push(() => Promise.all(instances.map((i) => i.kill('SIGKILL'))));
    // the first alone: it migrates the empty database. Three at once can fail: one that waits
    // for another's migrations more than 10 s gives up ("Migration table is already locked") and
    // its boot fails for good
    await instances[0]!.start();
    await Promise.all(instances.slice(1).map((i) => i.start()));
    const nginx = await startNginx(severalInstancesSite(nginxPort, ports), nginxPort, opts.clients);
    cleanup.push(() => nginx.stop());
    return { pg, redis, nginx, instances, origin, databaseUrl, destroy };
  } catch (err) {
    await destroy();
    throw err;
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
