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
import { shippedSite, startNginx, type TestNginx } from '../support/nginx.js';

/**
 * Several instances of the service as real processes (each on a port of its own that it keeps
 * across restarts, so nginx's upstream stays as written) on one throwaway PostgreSQL cluster and
 * one Redis of the test's own, behind Debian's nginx running docs/deploy/nginx.conf's
 * several-instance variant. Used by test/cluster/faults.test.ts and scripts/bench/cluster-faults.ts.
 */

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
    const nginx = await startNginx(shippedSite(nginxPort, ports, 'several'), nginxPort, opts.clients);
    cleanup.push(() => nginx.stop());
    return { pg, redis, nginx, instances, origin, databaseUrl, destroy };
  } catch (err) {
    await destroy();
    throw err;
  }
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
