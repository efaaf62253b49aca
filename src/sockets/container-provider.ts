import fs from 'node:fs';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type Docker from 'dockerode';
import Joi from 'joi';
import type { Logger } from '../log.js';
import {
  SocketProvider,
  type CleanupOptions,
  type CleanupResult,
  type ProviderCapabilities,
  type ProviderOperation,
} from './base-provider.js';
import { SocketError } from './errors.js';
import { HostPaths } from './host-paths.js';
import { isInside } from './paths.js';

export interface ContainerProviderOptions {
  /** daemon socket; SERVICE_CONTAINER_SOCKET, default /var/run/docker.sock */
  socketPath?: string;
  /** SERVICE_RUNNER_PREFIX: default prefix of cleanup and runners, required prefix of spawned names */
  runnerPrefix?: string;
  /** SERVICE_DATA_DIR: its host path is the storage root when the service runs in a container */
  dataDir?: string;
  /** id of the container the service runs in; undefined = detect, null = not in a container */
  selfContainerId?: string | null;
  /** the roots runners may bind-mount from (SERVICE_MANAGED_DIRS; default `<dataDir>/managed`) */
  mountRoots?: string[];
  /** idle timeout of one daemon request */
  requestTimeoutMs?: number;
  /** how long an availability answer is reused */
  availabilityTtlMs?: number;
}

export interface RunnerInfo {
  id: string;
  name: string;
  state: string;
  created_at: string;
  image: string;
}

export interface SpawnRequest {
  image: string;
  name: string;
  env?: Record<string, string>;
  /** read-only unless `read_only: false` (which needs socket:container:mount_rw) */
  mounts?: Array<{ source: string; target: string; read_only?: boolean }>;
  command?: string[];
  labels?: Record<string, string>;
  network?: string;
}

export const PREFIX_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const CONTAINER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
/** max_age_minutes upper bound: ten years, so the cutoff arithmetic stays exact */
const MAX_AGE_MINUTES = 5_256_000;
const DAEMON_DOWN_CODES = new Set(['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EPIPE', 'EACCES', 'ETIMEDOUT', 'ABORT_ERR']);
/** set on every container this service creates: cleanup and the runner list touch no other */
export const RUNNER_LABEL = 'service-core.runner';
export const SPAWN_PERMISSION = 'socket:container:spawn';
/** a runner that can write a host directory can re-point what lies below it: a separate grant */
export const MOUNT_RW_PERMISSION = 'socket:container:mount_rw';

const absolutePath = Joi.string()
  .max(4096)
  .pattern(/^\//, 'absolute path')
  .custom((value: string, helpers) => {
    if (value.includes('\0') || path.posix.normalize(value) !== value || (value.length > 1 && value.endsWith('/'))) {
      return helpers.message({ custom: '{{#label}} must be a normalized absolute path (no "..", "//" or trailing "/")' });
    }
    return value;
  });

const prefixSchema = Joi.string().max(128).pattern(PREFIX_PATTERN, 'prefix (letters, digits, _ . -; not starting with _ . -)');

export const JOI_OPTIONS: Joi.ValidationOptions = { abortEarly: false, convert: false, allowUnknown: false };

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
  private readonly mountPaths: HostPaths;
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
    this.mountPaths = new HostPaths({ dataDir: this.dataDir, roots: options.mountRoots ?? [HostPaths.managedFolderOf(this.dataDir)] });
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
      reason = e?.code === 'ENOENT' ? `no socket at ${this.socket_path}` : `the daemon at ${this.socket_path} did not answer (${e?.code ?? e?.name ?? 'timeout'})`;
    }
    this.lastAvailable = reason === null;
    this.lastUnavailableReason = reason;
    this.availabilityCheckedAt = Date.now();
    return this.lastAvailable;
  }

  /** Forget the cached availability (after a request failed on the connection). */
  private markDown(): void {
    this.lastAvailable = false;
    this.lastUnavailableReason = `a request to the daemon at ${this.socket_path} failed`;
    this.availabilityCheckedAt = Date.now();
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
   * Creates and starts a runner; no network unless one is asked for. Each bind source is
   * resolved once, checked (HostPaths, the daemon socket, the read-write mounts of existing
   * containers) and handed to the daemon as that real path, so nothing can be swapped in
   * between the check and the mount.
   */
  async spawn(request: SpawnRequest): Promise<{ id: string; name: string }> {
    const { value, error } = this.spawnSchema().validate(request, JOI_OPTIONS);
    if (error) throw new SocketError('invalid_args', error.message, error.details.map((d) => ({ field: d.path.join('.'), message: d.message.replace(/^"[^"]*"\s*/, '') })));
    const req = value as Required<Omit<SpawnRequest, 'network'>> & { network?: string };
    const run = this.spawning.then(() => this.createRunner(req));
    this.spawning = run.catch(() => undefined);
    return run;
  }

  private async createRunner(req: Required<Omit<SpawnRequest, 'network'>> & { network?: string }): Promise<{ id: string; name: string }> {
    const mounts = await this.resolveMounts(req.mounts as Array<{ source: string; target: string; read_only: boolean }>);
    const created = await this.call('create container', async () =>
      (await this.docker()).createContainer({
        name: req.name,
        Image: req.image,
        Cmd: req.command.length ? req.command : undefined,
        Env: Object.entries(req.env).map(([k, v]) => `${k}=${v}`),
        Labels: { ...req.labels, [RUNNER_LABEL]: 'true' },
        HostConfig: {
          NetworkMode: req.network ?? 'none',
          Privileged: false,
          Mounts: mounts.map((m) => ({ Type: 'bind' as const, Source: m.source, Target: m.target, ReadOnly: m.read_only })),
        },
      }),
    );
    try {
      await created.start();
    } catch (err) {
      await created.remove({ force: true }).catch(() => undefined);
      throw this.toSocketError(err, 'start container');
    }
    // env values are deliberately absent from this line
    this.log?.info(
      { id: created.id, name: req.name, image: req.image, mounts: mounts.map((m) => ({ source: m.source, target: m.target, read_only: m.read_only })), network: req.network ?? 'none' },
      'runner spawned',
    );
    return { id: created.id, name: req.name };
  }

  /** Real, allowed bind sources: never the daemon socket, never below a directory some container may write. */
  private async resolveMounts(mounts: Array<{ source: string; target: string; read_only: boolean }>) {
    if (mounts.length === 0) return [];
    const socketPath = realOrResolved(this.socket_path);
    const writable = await this.writableBindSources();
    const out: Array<{ source: string; target: string; read_only: boolean }> = [];
    for (const [i, m] of mounts.entries()) {
      const field = `mounts.${i}.source`;
      const refuse = (why: string): never => {
        throw new SocketError('forbidden', `${field} ${why}`, [{ field, message: why }]);
      };
      const resolved = await this.mountPaths.check(m.source, field);
      if (!resolved.exists) throw new SocketError('invalid_args', `${field} must exist`, [{ field, message: 'must exist' }]);
      const real = resolved.real;
      // mounting the daemon socket (or a directory holding it) would hand the runner the daemon
      if (socketPath === real || isInside(socketPath, real)) refuse('must not expose the container daemon socket');
      const under = writable.find((w) => isInside(real, w));
      if (under) refuse(`lies below ${under}, which a container may write (it could re-point what lies below)`);
      out.push({ source: real, target: m.target, read_only: m.read_only });
    }
    return out;
  }

  /** Real sources of every read-write bind mount of every container of the daemon (any state: a stopped one may start again). */
  private async writableBindSources(): Promise<string[]> {
    const all = await this.call('list containers', async () => (await this.docker()).listContainers({ all: true }));
    const sources = new Set<string>();
    for (const c of all) for (const m of c.Mounts ?? []) if (m.Type === 'bind' && m.RW && m.Source) sources.add(m.Source);
    return Promise.all([...sources].map((p) => fsp.realpath(p).catch(() => p)));
  }

  /** The containers this service created (its runner label), whatever their name. */
  private ownContainers() {
    return this.call('list containers', async () => (await this.docker()).listContainers({ all: true, filters: { label: [`${RUNNER_LABEL}=true`] } }));
  }

  override operations(): Record<string, ProviderOperation> {
    const none = Joi.object({});
    return {
      health: { schema: none, permission: null, requires_available: false, run: () => this.health_check() },
      mounts: { schema: none, permission: null, run: () => this.get_mounts() },
      storage_root: { schema: none, permission: null, run: async () => ({ storage_root: await this.detect_storage_root() }) },
      resolve_mounts: {
        schema: Joi.object({ targets: Joi.array().items(absolutePath).min(1).max(64).required() }),
        permission: null,
        run: (a: { targets: string[] }) => this.resolve_mounts(a.targets),
      },
      runners: {
        schema: Joi.object({ prefix: prefixSchema.default(this.runnerPrefix) }),
        permission: null,
        run: async (a: { prefix: string }) => ({ runners: await this.runners(a.prefix) }),
      },
      cleanup: {
        schema: Joi.object({
          prefix: prefixSchema.default(this.runnerPrefix),
          max_age_minutes: Joi.number().min(0).max(MAX_AGE_MINUTES).default(60),
          dry_run: Joi.boolean().default(false),
        }),
        permission: 'socket:container:cleanup',
        run: (a: { prefix: string; max_age_minutes: number; dry_run: boolean }) =>
          this.cleanup_stale(a.prefix, a.max_age_minutes, { dry_run: a.dry_run }),
      },
      spawn: {
        schema: this.spawnSchema(),
        permission: SPAWN_PERMISSION,
        permissionsFor: (a: SpawnRequest) => (a.mounts?.some((m) => m.read_only === false) ? [MOUNT_RW_PERMISSION] : []),
        run: (a: SpawnRequest) => this.spawn(a),
      },
    };
  }

  override async close(): Promise<void> {
    // dockerode keeps no persistent connection; nothing to release
  }

  private spawnSchema(): Joi.ObjectSchema {
    const prefix = this.runnerPrefix;
    return Joi.object({
      image: Joi.string().max(255).pattern(/^[A-Za-z0-9][A-Za-z0-9_.\/:@-]*$/, 'image reference').required(),
      name: Joi.string()
        .pattern(CONTAINER_NAME, 'container name')
        .custom((v: string, helpers) => (v.startsWith(prefix) ? v : helpers.message({ custom: `{{#label}} must start with the runner prefix "${prefix}"` })))
        .required(),
      env: Joi.object().pattern(Joi.string().pattern(/^[A-Za-z_][A-Za-z0-9_]*$/).max(128), Joi.string().max(32_768).allow('')).max(256).default({}),
      mounts: Joi.array()
        .items(Joi.object({ source: absolutePath.required(), target: absolutePath.invalid('/').required(), read_only: Joi.boolean().default(true) }))
        .max(32)
        .default([]),
      command: Joi.array().items(Joi.string().max(32_768).allow('')).max(256).default([]),
      labels: Joi.object().pattern(Joi.string().max(256).pattern(/^[A-Za-z0-9][A-Za-z0-9_.\/-]*$/), Joi.string().max(4096).allow('')).max(64).default({}),
      // 'host' would give the runner the host's network stack; container:<id> joins another's
      network: Joi.string().max(128).pattern(PREFIX_PATTERN, 'network name').invalid('host'),
    });
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

  /** Runs a daemon call; connection failures become `unavailable`, daemon refusals `failed`. */
  private async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw this.toSocketError(err, what);
    }
  }

  private toSocketError(err: unknown, what: string): SocketError {
    if (err instanceof SocketError) return err;
    const e = err as { code?: string; statusCode?: number; json?: { message?: string }; message?: string; name?: string };
    if ((e?.code && DAEMON_DOWN_CODES.has(e.code)) || e?.name === 'AbortError' || e?.name === 'TimeoutError' || /timeout/i.test(e?.message ?? '')) {
      this.markDown();
      return new SocketError('unavailable', `container daemon unreachable (${what}: ${e?.code ?? e?.name ?? 'timeout'})`);
    }
    const detail = (e?.json?.message ?? e?.message ?? String(err)).slice(0, 300);
    return new SocketError('failed', `${what} failed: ${detail}`, e?.statusCode ? { status: e.statusCode } : undefined);
  }
}

function checkPrefix(prefix: unknown): asserts prefix is string {
  if (typeof prefix !== 'string' || prefix.length === 0 || prefix.length > 128 || !PREFIX_PATTERN.test(prefix)) {
    throw new SocketError('invalid_args', `prefix must be non-empty and match ${PREFIX_PATTERN.source}`);
  }
}

/** The container's own name: Names holds "/name" plus "/other/alias" entries of legacy links. */
function primaryName(names: string[] | undefined): string | null {
  const own = (names ?? []).find((n) => n.lastIndexOf('/') === 0);
  return own ? own.slice(1) : null;
}


/** Host path of `target` through the mount whose destination holds it most specifically. */
export function hostPathFor(target: string, mounts: Array<{ source: string; destination: string }>): string | null {
  let best: { source: string; destination: string } | null = null;
  for (const m of mounts) {
    if (!m.destination || !m.source) continue;
    if (isInside(target, m.destination) && (!best || m.destination.length > best.destination.length)) best = m;
  }
  if (!best) return null;
  const rest = target.slice(best.destination === '/' ? 0 : best.destination.length);
  return rest ? path.posix.join(best.source, rest) : best.source;
}

/**
 * The container id of this process from /proc: cgroup v1 paths (/docker/<id>, docker-<id>.scope)
 * or, under cgroup v2, the daemon-managed files bind-mounted into the container
 * (<data-root>/containers/<id>/hostname, hosts, resolv.conf) named in mountinfo.
 */
export function containerIdFromProc(cgroup: string, mountinfo: string): string | null {
  const fromCgroup = /(?:\/docker\/|docker-)([0-9a-f]{64})(?:\.scope)?(?:$|\/|\s)/m.exec(cgroup);
  if (fromCgroup) return fromCgroup[1];
  for (const line of mountinfo.split('\n')) {
    const fields = line.split(' ');
    const root = fields[3] ?? '';
    const mountPoint = fields[4] ?? '';
    if (!['/etc/hostname', '/etc/hosts', '/etc/resolv.conf'].includes(mountPoint)) continue;
    const m = /\/containers\/([0-9a-f]{64})\/(?:hostname|hosts|resolv\.conf)$/.exec(root);
    if (m) return m[1];
  }
  return null;
}

async function realpathOrSelf(p: string): Promise<string> {
  const abs = path.resolve(p);
  return fsp.realpath(abs).catch(() => abs);
}

/** realpath when the path exists, else the resolved path (for comparisons only). */
function realOrResolved(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}
