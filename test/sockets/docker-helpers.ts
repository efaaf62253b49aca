import type Docker from 'dockerode';
import { RUNNER_LABEL } from '../../src/sockets/container-provider.js';

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
