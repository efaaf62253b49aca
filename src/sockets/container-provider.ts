import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type Docker from 'dockerode';
import type { Logger } from '../log.js';
import { SocketProvider, type ProviderCapabilities, type ProviderOperation } from './base-provider.js';
import { argsFor, NO_ARGS, RESOLVE_MOUNTS_ARGS } from './container-args.js';
import { SocketError } from './errors.js';
import { HostPaths } from './host-paths.js';
import {
  checkPrefix,
  containerIdFromProc,
  daemonFailure,
  hostPathFor,
  JOI_OPTIONS,
  MAX_AGE_MINUTES,
  MOUNT_RW_PERMISSION,
  PREFIX_PATTERN,
  primaryName,
  realpathOrSelf,
  RESULTS,
  HIDE_HOST_PATHS,
  auditedSpawn,
  RUNNER_LABEL,
  SPAWN_PERMISSION,
  CONTAINER_ROUTES,
  type CleanupOptions,
  type CleanupResult,
  type ContainerProviderOptions,
  type RunnerInfo,
  type SpawnRequest,
} from './container-shapes.js';
import { RunnerSpawner } from './container-spawn.js';
import { fieldErrorsOf, fieldErrorsText } from '../errors.js';

export { containerIdFromProc, hostPathFor, JOI_OPTIONS, MOUNT_RW_PERMISSION, PREFIX_PATTERN, RUNNER_LABEL, SPAWN_PERMISSION };
export type { CleanupOptions, CleanupResult, ContainerProviderOptions, RunnerInfo, SpawnRequest };

export class ContainerProvider extends SocketProvider {
  readonly name = 'container';
  readonly socket_path: string;
  readonly capabilities: ProviderCapabilities = {
    can_verify_mounts: true,
    can_repair_permissions: false,
    can_spawn: true,
    can_cleanup: true,
    can_query_mounts: true,
  };
  readonly runnerPrefix: string;
  private dockerClient: Promise<Docker> | null = null;
  private readonly requestTimeoutMs: number;

  private readonly dataDir: string;
  private readonly spawner: RunnerSpawner;
  /** spawns run one at a time: each sees the read-write mounts of the ones before it */
  private spawning: Promise<unknown> = Promise.resolve();
  private readonly availabilityTtlMs: number;
  private availabilityCheckedAt = 0;
  private availabilityInFlight: Promise<boolean> | null = null;
  private selfId: string | null | undefined;

  constructor(options: ContainerProviderOptions = {}, logger?: Logger) {
    super(options as Record<string, unknown>, logger);
    this.socket_path = options.socketPath ?? '/var/run/docker.sock';
    this.runnerPrefix = options.runnerPrefix ?? 'runner-';
    if (!PREFIX_PATTERN.test(this.runnerPrefix)) throw new Error(`runner prefix must match ${PREFIX_PATTERN}`);
    this.dataDir = path.resolve(options.dataDir ?? './data');
    const mountPaths = new HostPaths({ dataDir: this.dataDir, roots: options.mountRoots ?? [HostPaths.managedFolderOf(this.dataDir)] });
    // the daemon as the spawner uses it: the client of this provider, and its handling of failures
    const daemon = {
      docker: () => this.docker(),
      call: <T>(what: string, fn: () => Promise<T>) => this.call(what, fn),
      toSocketError: (err: unknown, what: string) => this.toSocketError(err, what),
    };
    this.spawner = new RunnerSpawner(daemon, mountPaths, this.socket_path, this.log);
    this.availabilityTtlMs = options.availabilityTtlMs ?? 2000;
    this.selfId = options.selfContainerId;
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
  }

  /** The daemon client, made on first use (dockerode is slow to import; a start need not wait for it). */
  private docker(): Promise<Docker> {
    this.dockerClient ??= import('dockerode').then(({ default: Dockerode }) => new Dockerode({ socketPath: this.socket_path, timeout: this.requestTimeoutMs }));
    return this.dockerClient;
  }

  override async isAvailable(): Promise<boolean> {
    if (Date.now() - this.availabilityCheckedAt < this.availabilityTtlMs) return this.lastAvailable;
    if (!this.availabilityInFlight) {
      this.availabilityInFlight = this.probe().finally(() => {
        this.availabilityInFlight = null;
      });
    }
    return this.availabilityInFlight;
  }

  private async probe(): Promise<boolean> {
    let reason: string | null = `${this.socket_path} is not a socket`;
    try {
      const st = await fsp.stat(this.socket_path);
      if (st.isSocket()) {
        // dockerode 5 takes an abortSignal here; its typings lag behind
        const docker = await this.docker();
        await (docker.ping as unknown as (o: { abortSignal: AbortSignal }) => Promise<unknown>).call(docker, {
          abortSignal: AbortSignal.timeout(2000),
        });
        reason = null;
      }
    } catch (err) {
      const e = err as NodeJS.ErrnoException | undefined;
      reason =
        e?.code === 'ENOENT' ? `no socket at ${this.socket_path}` : `the daemon at ${this.socket_path} did not answer (${e?.code ?? e?.name ?? 'timeout'})`;
    }
    this.lastAvailable = reason === null;
    this.lastUnavailableReason = reason;
    this.availabilityCheckedAt = Date.now();
    return this.lastAvailable;
  }

  /** Remembers the daemon as down (a request to it failed), until the next availability check. */
  private markDown(): void {
    this.lastAvailable = false;
    this.lastUnavailableReason = `a request to the daemon at ${this.socket_path} failed`;
    this.availabilityCheckedAt = Date.now();
  }

  /** The daemon's last answers to the reads open to anyone, by operation: shared while asked, then kept as long as its availability. */
  private readonly answers = new Map<string, { answer: Promise<unknown>; until: number }>();

  /**
   * A read open to anyone (over HTTP too: health, mounts): each answer costs the daemon calls, so
   * it is asked at most once per availabilityTtlMs (2 s) and callers meanwhile share that one
   * call; anonymous requests cannot make the daemon work per request. The operations themselves
   * (health_check(), get_mounts()) always ask.
   */
  private async shared<T>(name: string, ask: () => Promise<T>): Promise<T> {
    let entry = this.answers.get(name);
    if (!entry || Date.now() >= entry.until) {
      const fresh = { answer: ask() as Promise<unknown>, until: Infinity };
      const keep = () => void (fresh.until = Date.now() + this.availabilityTtlMs);
      fresh.answer.then(keep, keep);
      this.answers.set(name, fresh);
      entry = fresh;
    }
    // a copy each: no caller can change what the next one is told
    return structuredClone(await entry.answer) as T;
  }

  override async health_check(): Promise<Record<string, unknown>> {
    try {
      const docker = await this.docker();
      const [version, info] = await Promise.all([docker.version(), docker.info()]);
      this.lastAvailable = true;
      this.availabilityCheckedAt = Date.now();
      return {
        healthy: true,
        daemon: { version: version.Version ?? null, api_version: version.ApiVersion ?? null },
        containers_running: info.ContainersRunning ?? 0,
        containers_total: info.Containers ?? 0,
        images: info.Images ?? 0,
      };
    } catch (err) {
      const e = this.toSocketError(err, 'health check');
      return {
        healthy: false,
        daemon: { version: null, api_version: null },
        containers_running: null,
        containers_total: null,
        images: null,
        error: e.message,
      };
    }
  }

  override async cleanup_stale(prefix: string, max_age_minutes: number, opts: CleanupOptions = {}): Promise<CleanupResult> {
    checkPrefix(prefix);
    if (typeof max_age_minutes !== 'number' || !Number.isFinite(max_age_minutes) || max_age_minutes < 0 || max_age_minutes > MAX_AGE_MINUTES) {
      throw new SocketError('invalid_args', `max_age_minutes must be a number from 0 to ${MAX_AGE_MINUTES}`);
    }
    const dryRun = opts.dry_run === true;
    const cutoffMs = Date.now() - max_age_minutes * 60_000;
    const all = await this.ownContainers();
    const stale = all
      .map((c) => ({ id: c.Id, name: primaryName(c.Names), createdMs: c.Created * 1000 }))
      // plain startsWith on the name: the prefix never becomes a pattern
      .filter((c) => c.name !== null && c.name.startsWith(prefix) && c.createdMs <= cutoffMs)
      .map((c) => ({ id: c.id, name: c.name as string }));

    const result: CleanupResult = { dry_run: dryRun, removed: [], errors: [] };
    if (dryRun) {
      result.removed = stale;
      return result;
    }
    for (const c of stale) {
      try {
        // force: running (or paused) runners go too; v: their anonymous volumes with them
        await (await this.docker()).getContainer(c.id).remove({ force: true, v: true });
        result.removed.push(c);
      } catch (err) {
        result.errors.push({ ...c, error: this.toSocketError(err, 'remove').message });
      }
    }
    this.log?.info({ prefix, max_age_minutes, removed: result.removed.length, errors: result.errors.length }, 'stale containers cleaned up');
    return result;
  }

  override async get_mounts(): Promise<{ mounts: Record<string, Record<string, string>> }> {
    const running = await this.call('list containers', async () => (await this.docker()).listContainers({ filters: { status: ['running'] } }));
    const mounts: Record<string, Record<string, string>> = {};
    for (const c of running) {
      const byDest: Record<string, string> = {};
      for (const m of c.Mounts ?? []) if (m.Destination) byDest[m.Destination] = m.Source ?? '';
      mounts[c.Id] = byDest;
    }
    return { mounts };
  }

  /** Host path of each target path as seen inside the service's container (null: not in a container or not on a mount). */
  async resolve_mounts(targets: string[]): Promise<{ in_container: boolean; container_id: string | null; resolved: Record<string, string | null> }> {
    const self = await this.ownMounts();
    const resolved: Record<string, string | null> = {};
    for (const target of targets) {
      if (!self) {
        resolved[target] = null;
        continue;
      }
      resolved[target] = hostPathFor(await realpathOrSelf(target), self.mounts);
    }
    return { in_container: self !== null, container_id: self?.id ?? null, resolved };
  }

  override async detect_storage_root(): Promise<string | null> {
    const self = await this.ownMounts();
    if (!self) return null;
    return hostPathFor(await realpathOrSelf(this.dataDir), self.mounts);
  }

  async runners(prefix: string = this.runnerPrefix): Promise<RunnerInfo[]> {
    checkPrefix(prefix);
    const all = await this.ownContainers();
    return all
      .map((c) => ({ c, name: primaryName(c.Names) }))
      .filter(({ name }) => name !== null && name.startsWith(prefix))
      .map(({ c, name }) => ({
        id: c.Id,
        name: name as string,
        state: c.State,
        created_at: new Date(c.Created * 1000).toISOString(),
        image: c.Image,
      }));
  }

  /**
   * Creates and starts a runner; no network unless one is asked for, no restart, removed when
   * it exits. Each bind source is resolved once, checked (HostPaths, the daemon socket, the
   * mounts of existing containers) and handed to the daemon as that real path, so nothing can
   * be swapped in between the check and the mount.
   */
  async spawn(request: SpawnRequest): Promise<{ id: string; name: string }> {
    const { value, error } = argsFor(this.runnerPrefix).spawn.validate(request, JOI_OPTIONS);
    if (error) {
      const problems = fieldErrorsOf(error);
      throw new SocketError('invalid_args', fieldErrorsText(problems), problems);
    }
    const req = value as Required<Omit<SpawnRequest, 'network'>> & { network?: string };
    const run = this.spawning.then(() => this.spawner.createRunner(req));
    this.spawning = run.catch(() => undefined);
    return run;
  }

  /** The containers this service created (its runner label), whatever their name. */
  private ownContainers() {
    return this.call('list containers', async () => (await this.docker()).listContainers({ all: true, filters: { label: [`${RUNNER_LABEL}=true`] } }));
  }

  override operations(): Record<string, ProviderOperation> {
    const { runners, cleanup, spawn } = argsFor(this.runnerPrefix);
    return {
      health: {
        schema: NO_ARGS,
        permission: null,
        requires_available: false,
        run: () => this.shared('health', () => this.health_check()),
        result: RESULTS.health,
        http: CONTAINER_ROUTES.health,
      },
      mounts: {
        schema: NO_ARGS,
        permission: null,
        run: () => this.shared('mounts', () => this.get_mounts()),
        shownTo: HIDE_HOST_PATHS.mounts,
        result: RESULTS.mounts,
        http: CONTAINER_ROUTES.mounts,
      },
      storage_root: {
        schema: NO_ARGS,
        permission: null,
        run: async () => ({ storage_root: await this.detect_storage_root() }),
        shownTo: HIDE_HOST_PATHS.storage_root,
        result: RESULTS.storage_root,
        http: CONTAINER_ROUTES.storage_root,
      },
      resolve_mounts: {
        schema: RESOLVE_MOUNTS_ARGS,
        permission: null,
        run: (a: { targets: string[] }) => this.resolve_mounts(a.targets),
        shownTo: HIDE_HOST_PATHS.resolve_mounts,
        result: RESULTS.resolve_mounts,
        http: CONTAINER_ROUTES.resolve_mounts,
      },
      runners: {
        schema: runners,
        permission: null,
        run: async (a: { prefix: string }) => ({ runners: await this.runners(a.prefix) }),
        result: RESULTS.runners,
        http: CONTAINER_ROUTES.runners,
      },
      cleanup: {
        schema: cleanup,
        permission: 'socket:container:cleanup',
        run: (a: { prefix: string; max_age_minutes: number; dry_run: boolean }) => this.cleanup_stale(a.prefix, a.max_age_minutes, { dry_run: a.dry_run }),
        // a prefix, an age and a flag: nothing secret
        audited: (a: object) => ({ ...a }),
        result: RESULTS.cleanup,
        http: CONTAINER_ROUTES.cleanup,
      },
      spawn: {
        schema: spawn,
        permission: SPAWN_PERMISSION,
        permissionsFor: (a: SpawnRequest) => (a.mounts?.some((m) => m.read_only === false) ? [MOUNT_RW_PERMISSION] : []),
        run: (a: SpawnRequest) => this.spawn(a),
        audited: auditedSpawn,
        result: RESULTS.spawn,
        http: CONTAINER_ROUTES.spawn,
      },
    };
  }

  override async close(): Promise<void> {
    // dockerode keeps no persistent connection; nothing to release
  }

  /** Id and mounts of the container this service runs in, or null when it runs on the host. */
  private async ownMounts(): Promise<{ id: string; mounts: Array<{ source: string; destination: string }> } | null> {
    const id = await this.ownContainerId();
    if (!id) return null;
    let info: Docker.ContainerInspectInfo;
    try {
      info = await (await this.docker()).getContainer(id).inspect();
    } catch (err) {
      // our container is not one of this daemon's (e.g. the socket leads to another daemon)
      if ((err as { statusCode?: number }).statusCode === 404) return null;
      throw this.toSocketError(err, 'inspect own container');
    }
    return {
      id: info.Id,
      mounts: (info.Mounts ?? []).map((m) => ({ source: m.Source, destination: m.Destination })),
    };
  }

  private async ownContainerId(): Promise<string | null> {
    if (this.selfId !== undefined) return this.selfId;
    const read = (p: string) => fsp.readFile(p, 'utf8').catch(() => '');
    const id = containerIdFromProc(await read('/proc/self/cgroup'), await read('/proc/self/mountinfo'));
    if (id) return (this.selfId = id);
    // default container hostname: first 12 hex digits of the id; the daemon must confirm it
    const host = os.hostname();
    if (!/^[0-9a-f]{12}$/.test(host)) return (this.selfId = null);
    try {
      const info = await (await this.docker()).getContainer(host).inspect();
      return (this.selfId = info.Id.startsWith(host) ? info.Id : null);
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return (this.selfId = null);
      // daemon unreachable: no definite answer, ask again next time
      throw this.toSocketError(err, 'inspect own container');
    }
  }

  /** Runs a daemon call; connection failures become `unavailable`, daemon refusals `failed` (its 409 `conflict`, its 404 `not_found`). */
  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw this.toSocketError(err, what);
    }
  }

  private toSocketError(err: unknown, what: string): SocketError {
    const { down, error } = daemonFailure(err, what);
    if (down) this.markDown();
    return error;
  }
}
