import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { unusedPort } from '../auth/helpers.js';

export interface TestRedis {
  url: string;
  port: number;
  /** kills the server (SIGKILL: as a crash would) */
  kill(): Promise<void>;
  /** starts it again on the same port, empty */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A redis-server of the test's own on a free port (Debian's redis-server), keeping nothing on
 * disk, so a test can kill and restart it without touching the machine's Redis.
 */
export async function startRedis(): Promise<TestRedis> {
  const port = await unusedPort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redis-'));
  let child: ChildProcess | null = null;
  const run = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--loglevel', 'warning'], { stdio: 'ignore' });
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
  await run();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    kill,
    restart: run,
    async stop() {
      process.off('exit', onExit);
      await kill();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
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
