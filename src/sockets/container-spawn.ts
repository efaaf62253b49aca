/**
 * The container provider's runners (container-provider.ts): a runner created and started, with
 * each bind source resolved once and checked against the daemon socket and the bind mounts of
 * every container of the daemon.
 */
import { promises as fsp } from 'node:fs';
import type Docker from 'dockerode';
import type { Logger } from '../log.js';
import { realOrResolved, RUNNER_LABEL, type SpawnRequest } from './container-shapes.js';
import { SocketError } from './errors.js';
import { inodeChain, type HostPaths } from './host-paths.js';
import { isInside } from './paths.js';

/** What the spawner uses of its provider: the daemon client, and the provider's handling of daemon failures. */
export interface SpawnDaemon {
  docker(): Promise<Docker>;
  /** runs a daemon call; connection failures become `unavailable`, daemon refusals `failed` */
  call<T>(what: string, fn: () => Promise<T>): Promise<T>;
  toSocketError(err: unknown, what: string): SocketError;
}

/** Creates the runners of one provider (its spawn() runs them one at a time). */
export class RunnerSpawner {
  constructor(
    private readonly daemon: SpawnDaemon,
    private readonly mountPaths: HostPaths,
    private readonly socketPath: string,
    private readonly log?: Logger,
  ) {}

  /** Creates and starts one runner (the provider's spawn() has checked the request and runs one at a time). */
  async createRunner(req: Required<Omit<SpawnRequest, 'network'>> & { network?: string }): Promise<{ id: string; name: string }> {
    const mounts = await this.resolveMounts(req.mounts as Array<{ source: string; target: string; read_only: boolean }>);
    const created = await this.daemon.call('create container', async () =>
      (await this.daemon.docker()).createContainer({
        name: req.name,
        Image: req.image,
        Cmd: req.command.length ? req.command : undefined,
        Env: Object.entries(req.env).map(([k, v]) => `${k}=${v}`),
        Labels: { ...req.labels, [RUNNER_LABEL]: 'true' },
        HostConfig: {
          NetworkMode: req.network ?? 'none',
          Privileged: false,
          // a runner runs once: its mounts are checked for this start only, and a later start
          // would mount its sources again by path, whatever they have been turned into meanwhile
          RestartPolicy: { Name: 'no' },
          AutoRemove: true,
          Mounts: mounts.map((m) => ({ Type: 'bind' as const, Source: m.source, Target: m.target, ReadOnly: m.read_only })),
        },
      }),
    );
    try {
      await created.start();
    } catch (err) {
      await created.remove({ force: true }).catch(() => undefined);
      throw this.daemon.toSocketError(err, 'start container');
    }
    // env values are deliberately absent from this line
    this.log?.info(
      {
        id: created.id,
        name: req.name,
        image: req.image,
        mounts: mounts.map((m) => ({ source: m.source, target: m.target, read_only: m.read_only })),
        network: req.network ?? 'none',
      },
      'runner spawned',
    );
    return { id: created.id, name: req.name };
  }

  /**
   * Real, allowed bind sources: never the daemon socket, never overlapping a mount that another
   * container may write, and read-write only where no other container's mount lies below and no
   * other runner's mount lies above.
   */
  private async resolveMounts(mounts: Array<{ source: string; target: string; read_only: boolean }>) {
    if (mounts.length === 0) return [];
    const socketPath = realOrResolved(this.socketPath);
    const existing = await this.bindMounts();
    const out: Array<{ source: string; target: string; read_only: boolean }> = [];
    for (const [i, m] of mounts.entries()) {
      const field = `mounts[${i}].source`;
      const refuse = (why: string): never => {
        throw new SocketError('forbidden', `${field} ${why}`, [{ field, message: why }]);
      };
      const resolved = await this.mountPaths.check(m.source, field);
      if (!resolved.exists) throw new SocketError('invalid_args', `${field} must exist`, [{ field, message: 'must exist' }]);
      const real = resolved.real;
      // mounting the daemon socket (or a directory holding it) would hand the runner the daemon
      if (socketPath === real || isInside(socketPath, real)) refuse('must not expose the container daemon socket');
      const chain = await inodeChain(real);
      for (const other of existing) {
        // by path, and by inode: a bind mount shows a directory under a second name
        const below = other.paths.some((p) => isInside(real, p)) || (other.inode !== null && chain.includes(other.inode));
        const holds = other.paths.some((p) => isInside(p, real)) || (chain[0] !== null && other.chain.includes(chain[0]));
        if (!below && !holds) continue;
        if (other.rw) refuse(`${below ? 'lies below' : 'holds'} ${other.source}, which a container may write (it could re-point what lies below)`);
        if (m.read_only) continue;
        if (holds) refuse(`is read-write and holds ${other.source}, which a container mounts (the runner could re-point what that container mounts)`);
        if (other.runner) refuse(`is read-write and lies below ${other.source}, which a runner mounts (the runner could swap what that runner sees)`);
      }
      out.push({ source: real, target: m.target, read_only: m.read_only });
    }
    return out;
  }

  /**
   * Every bind mount of every container of the daemon, in any state (a stopped container may
   * start again; only runners are removed when they stop): its source as the daemon has it,
   * that source's real path, and the inodes of that path and the directories above it.
   */
  private async bindMounts(): Promise<
    Array<{ source: string; paths: string[]; inode: string | null; chain: Array<string | null>; rw: boolean; runner: boolean }>
  > {
    const all = await this.daemon.call('list containers', async () => (await this.daemon.docker()).listContainers({ all: true }));
    const found = new Map<string, { source: string; rw: boolean; runner: boolean }>();
    for (const c of all) {
      const runner = c.Labels?.[RUNNER_LABEL] === 'true';
      for (const m of c.Mounts ?? []) {
        if (m.Type !== 'bind' || !m.Source) continue;
        const key = JSON.stringify([m.Source, m.RW, runner]);
        if (!found.has(key)) found.set(key, { source: m.Source, rw: m.RW === true, runner });
      }
    }
    return Promise.all(
      [...found.values()].map(async (m) => {
        const real = await fsp.realpath(m.source).catch(() => m.source);
        const chain = await inodeChain(real);
        return { ...m, paths: [...new Set([m.source, real])], inode: chain[0], chain };
      }),
    );
  }
}
