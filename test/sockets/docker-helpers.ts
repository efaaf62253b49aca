import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type Docker from 'dockerode';
import { ContainerProvider, RUNNER_LABEL } from '../../src/sockets/container-provider.js';
import { startDockerd, unmountUnder, type TestDockerd } from '../support/dockerd.js';
import { capturingLogger } from './helpers.js';

/**
 * A private dockerd and a container provider on it (prefix runner-, a work dir with managed/),
 * for one suite; every container is removed after each test.
 */
export function containerSuite() {
  const suite = {
    dockerd: undefined as unknown as TestDockerd,
    provider: undefined as unknown as ContainerProvider,
    workDir: '',
    logs: capturingLogger('info'),
  };
  before(async () => {
    suite.dockerd = await startDockerd();
    suite.workDir = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'cp-')));
    await fsp.mkdir(path.join(suite.workDir, 'managed'));
    suite.provider = new ContainerProvider({ socketPath: suite.dockerd.socketPath, runnerPrefix: 'runner-', dataDir: suite.workDir }, suite.logs.logger);
  });
  after(async () => {
    await suite.dockerd?.stop();
    if (!suite.workDir) return;
    // a bind mount a test left behind must not lead the removal out of the work dir
    await unmountUnder(suite.workDir);
    await fsp.rm(suite.workDir, { recursive: true, force: true });
  });
  afterEach(async () => {
    for (const c of await suite.dockerd.docker.listContainers({ all: true })) await suite.dockerd.docker.getContainer(c.Id).remove({ force: true });
  });
  return suite;
}

/**
 * Creates (and by default starts) a container that just sleeps. `ours`: it carries the runner
 * label, as if this service had spawned it; otherwise it is someone else's container.
 */
export async function sleeper(docker: Docker, image: string, name: string, start = true, ours = true): Promise<Docker.Container> {
  const Labels: Record<string, string> = ours ? { [RUNNER_LABEL]: 'true' } : {};
  const c = await docker.createContainer({ name, Image: image, Labels, Cmd: ['sleep', '600'], HostConfig: { NetworkMode: 'none' } });
  if (start) await c.start();
  return c;
}

export async function names(docker: Docker): Promise<string[]> {
  return (await docker.listContainers({ all: true })).map((c) => c.Names[0].slice(1)).sort();
}

/** Output of a command run to completion in a fresh container (tty: no stream multiplexing). */
export async function output(docker: Docker, image: string, cmd: string[], hostConfig: Docker.HostConfig = {}): Promise<{ id: string; out: string }> {
  const c = await docker.createContainer({ Image: image, Cmd: cmd, Tty: true, HostConfig: { NetworkMode: 'none', ...hostConfig } });
  await c.start();
  await c.wait();
  const out = (await c.logs({ stdout: true, stderr: true })).toString('utf8');
  await c.remove({ force: true });
  return { id: c.id, out };
}

/** Waits until no container of the daemon has this name (a runner removes itself when it exits). */
export async function gone(docker: Docker, name: string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while ((await names(docker)).includes(name)) {
    if (Date.now() > deadline) throw new Error(`${name} still exists after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
