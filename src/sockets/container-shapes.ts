import { createHash } from 'node:crypto';
import fs from 'node:fs';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import Joi from 'joi';
import type { OperationHttp } from './base-provider.js';
import { SocketError } from './errors.js';
import { isInside } from './paths.js';

/** The container provider's options, request shapes, names and rules, and its path helpers. */

export interface CleanupOptions {
  dry_run?: boolean;
}

export interface CleanupResult {
  dry_run: boolean;
  removed: Array<{ id: string; name: string }>;
  errors: Array<{ id: string; name: string; error: string }>;
}

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
export const CONTAINER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
/** max_age_minutes upper bound: ten years, so the cutoff arithmetic stays exact */
export const MAX_AGE_MINUTES = 5_256_000;
/** set on every container this service creates: cleanup and the runner list touch no other */
export const RUNNER_LABEL = 'service-core.runner';
export const SPAWN_PERMISSION = 'socket:container:spawn';
/** a runner that can write a host directory can re-point what lies below it: a separate grant */
export const MOUNT_RW_PERMISSION = 'socket:container:mount_rw';

export const absolutePath = Joi.string()
  .max(4096)
  .pattern(/^\//, 'absolute path')
  .custom((value: string, helpers) => {
    if (value.includes('\0') || path.posix.normalize(value) !== value || (value.length > 1 && value.endsWith('/'))) {
      return helpers.message({ custom: '{{#label}} must be a normalized absolute path (no "..", "//" or trailing "/")' });
    }
    return value;
  });

export const prefixSchema = Joi.string().max(128).pattern(PREFIX_PATTERN, 'prefix (letters, digits, _ . -; not starting with _ . -)');

export const JOI_OPTIONS: Joi.ValidationOptions = { abortEarly: false, convert: false, allowUnknown: false };

export function checkPrefix(prefix: unknown): asserts prefix is string {
  if (typeof prefix !== 'string' || prefix.length === 0 || prefix.length > 128 || !PREFIX_PATTERN.test(prefix)) {
    throw new SocketError('invalid_args', `prefix must be non-empty and match ${PREFIX_PATTERN.source}`);
  }
}

/** The container's own name: Names holds "/name" plus "/other/alias" entries of legacy links. */
export function primaryName(names: string[] | undefined): string | null {
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

export async function realpathOrSelf(p: string): Promise<string> {
  const abs = path.resolve(p);
  return fsp.realpath(abs).catch(() => abs);
}

/** realpath when the path exists, else the resolved path (for comparisons only). */
export function realOrResolved(p: string): string {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

/** A spawn request: every field bounded, the name under the runner prefix, never the host's network. */
export function spawnSchema(prefix: string): Joi.ObjectSchema {
  return Joi.object({
    image: Joi.string()
      .max(255)
      .pattern(/^[A-Za-z0-9][A-Za-z0-9_./:@-]*$/, 'image reference')
      .required()
      .description('an image the daemon already has, e.g. busybox:latest (it is not pulled)'),
    name: Joi.string()
      .pattern(CONTAINER_NAME, 'container name')
      .custom((v: string, helpers) => (v.startsWith(prefix) ? v : helpers.message({ custom: `{{#label}} must start with the runner prefix "${prefix}"` })))
      .required()
      .description(`the container's name; it must start with the runner prefix ("${prefix}", SERVICE_RUNNER_PREFIX)`),
    env: Joi.object()
      .pattern(
        Joi.string()
          .pattern(/^[A-Za-z_][A-Za-z0-9_]*$/)
          .max(128),
        Joi.string().max(32_768).allow(''),
      )
      .max(256)
      .default({})
      .description('environment variables (the audit trail keeps their names only)'),
    mounts: Joi.array()
      .items(
        Joi.object({
          source: absolutePath.required().description('a directory inside SERVICE_MANAGED_DIRS'),
          target: absolutePath.invalid('/').required().description('where it appears in the container'),
          read_only: Joi.boolean().default(true).description('false needs socket:container:mount_rw'),
        }),
      )
      .max(32)
      .default([]),
    command: Joi.array().items(Joi.string().max(32_768).allow('')).max(256).default([]).description("the command and its arguments; default: the image's"),
    labels: Joi.object()
      .pattern(
        Joi.string()
          .max(256)
          .pattern(/^[A-Za-z0-9][A-Za-z0-9_./-]*$/),
        Joi.string().max(4096).allow(''),
      )
      .max(64)
      .default({}),
    // 'host' would give the runner the host's network stack; container:<id> joins another's
    network: Joi.string().max(128).pattern(PREFIX_PATTERN, 'network name').invalid('host'),
  });
}

const DAEMON_DOWN_CODES = new Set(['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EPIPE', 'EACCES', 'ETIMEDOUT', 'ABORT_ERR']);

/** A dockerode failure as a socket error: `unavailable` (and `down`) when the daemon could not be reached, else `failed`. */
export function daemonFailure(err: unknown, what: string): { down: boolean; error: SocketError } {
  if (err instanceof SocketError) return { down: false, error: err };
  const e = err as { code?: string; statusCode?: number; json?: { message?: string }; message?: string; name?: string };
  if ((e?.code && DAEMON_DOWN_CODES.has(e.code)) || e?.name === 'AbortError' || e?.name === 'TimeoutError' || /timeout/i.test(e?.message ?? '')) {
    return { down: true, error: new SocketError('unavailable', `container daemon unreachable (${what}: ${e?.code ?? e?.name ?? 'timeout'})`) };
  }
  const detail = (e?.json?.message ?? e?.message ?? String(err)).slice(0, 300);
  // the daemon's own answers about the request: a name taken, an image or container it does not have
  const code = e?.statusCode === 409 ? 'conflict' : e?.statusCode === 404 ? 'not_found' : 'failed';
  return { down: false, error: new SocketError(code, `${what} failed: ${detail}`, e?.statusCode ? { status: e.statusCode } : undefined) };
}

/** What the container provider's operations answer (their `result`; the HTTP routes' 200 bodies). */
const containerRef = { id: Joi.string(), name: Joi.string() };

/** The container provider's permissions: holding any of them shows host paths in its open reads. */
const CONTAINER_ADMIN = [SPAWN_PERMISSION, MOUNT_RW_PERMISSION, 'socket:container:cleanup'];

const HOST_PATHS_HIDDEN = Joi.boolean()
  .valid(true)
  .optional()
  .description('present when the caller holds no socket:container permission: every host path is then empty (mounts) or null');

const mapValues = <T, U>(o: Record<string, T>, f: (v: T) => U): Record<string, U> => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, f(v)]));

/**
 * The open reads of the container provider (mounts, storage root, resolved mounts) as a caller
 * without a socket:container permission sees them: the same shape, every host path hidden (a
 * host's directory layout is for those who administer its containers).
 */
export const HIDE_HOST_PATHS = {
  mounts: (r: unknown, may: (p: string) => boolean) => {
    if (CONTAINER_ADMIN.some(may)) return r;
    const { mounts } = r as { mounts: Record<string, Record<string, string>> };
    return { mounts: mapValues(mounts, (byDest) => mapValues(byDest, () => '')), host_paths_hidden: true };
  },
  storage_root: (r: unknown, may: (p: string) => boolean) => (CONTAINER_ADMIN.some(may) ? r : { storage_root: null, host_paths_hidden: true }),
  resolve_mounts: (r: unknown, may: (p: string) => boolean) => {
    if (CONTAINER_ADMIN.some(may)) return r;
    const answer = r as { in_container: boolean; container_id: string | null; resolved: Record<string, string | null> };
    return { ...answer, resolved: mapValues(answer.resolved, () => null), host_paths_hidden: true };
  },
};

/**
 * What the audit trail keeps of a spawn: where it runs from and what it mounts; the command as
 * its program, its argument count and a digest (`sh -c "DB_PASSWORD=..."` is a secret); the
 * environment and labels by name only.
 */
export function auditedSpawn(a: SpawnRequest): Record<string, unknown> {
  const command = a.command?.length
    ? {
        program: (a.command[0]!.split('/').pop() ?? '').slice(0, 64),
        args: a.command.length - 1,
        sha256: createHash('sha256').update(JSON.stringify(a.command)).digest('hex'),
      }
    : null;
  return {
    image: a.image,
    name: a.name,
    network: a.network ?? 'none',
    mounts: (a.mounts ?? []).map((m) => ({ source: m.source, target: m.target, read_only: m.read_only !== false })),
    command,
    env: Object.keys(a.env ?? {}),
    labels: Object.keys(a.labels ?? {}),
  };
}

export const RESULTS = {
  health: Joi.object({
    healthy: Joi.boolean(),
    daemon: Joi.object({ version: Joi.string().allow(null), api_version: Joi.string().allow(null) }),
    containers_running: Joi.number().integer().min(0).allow(null).description('null when the daemon did not answer'),
    containers_total: Joi.number().integer().min(0).allow(null),
    images: Joi.number().integer().min(0).allow(null),
    error: Joi.string().optional().description('why the daemon is not healthy (only then)'),
  }),
  mounts: Joi.object({
    mounts: Joi.object()
      .pattern(Joi.string(), Joi.object().pattern(Joi.string(), Joi.string().allow('')).description('{<destination>: <source>}'))
      .description('the running containers by id'),
    host_paths_hidden: HOST_PATHS_HIDDEN,
  }),
  storage_root: Joi.object({
    storage_root: Joi.string().allow(null).description('the host path of the data dir; null when the service does not run in a container of this daemon'),
    host_paths_hidden: HOST_PATHS_HIDDEN,
  }),
  resolve_mounts: Joi.object({
    in_container: Joi.boolean(),
    container_id: Joi.string().allow(null),
    resolved: Joi.object().pattern(Joi.string(), Joi.string().allow(null)).description('{<target>: <host path> | null}'),
    host_paths_hidden: HOST_PATHS_HIDDEN,
  }),
  runners: Joi.object({
    runners: Joi.array().items(Joi.object({ ...containerRef, state: Joi.string(), created_at: Joi.string().isoDate(), image: Joi.string() })),
  }),
  cleanup: Joi.object({
    dry_run: Joi.boolean(),
    removed: Joi.array().items(Joi.object(containerRef)).description('removed (with dry_run: what would be)'),
    errors: Joi.array()
      .items(Joi.object({ ...containerRef, error: Joi.string() }))
      .description('containers that could not be removed'),
  }),
  spawn: Joi.object(containerRef),
} as const;

/** The HTTP routes of the container provider's operations (`/api/socket/container/<operation>`). */
export const CONTAINER_ROUTES: Record<'health' | 'mounts' | 'storage_root' | 'resolve_mounts' | 'runners' | 'cleanup' | 'spawn', OperationHttp> = {
  health: {
    method: 'GET',
    summary: 'Container daemon health',
    response: "the daemon's health; a daemon that does not answer is healthy: false, not an error",
  },
  mounts: { method: 'GET', summary: 'Container mount mappings', response: 'the mounts of each running container' },
  storage_root: { method: 'GET', summary: 'The host storage root as seen inside containers', response: 'the storage root' },
  resolve_mounts: { method: 'GET', summary: 'The host paths behind paths inside this container', response: 'each target and the host path it lies on' },
  runners: { method: 'GET', summary: 'Runner containers', response: 'the containers whose name starts with the prefix' },
  cleanup: {
    method: 'POST',
    summary: 'Remove stale runner containers',
    description: 'Only containers whose name starts with the prefix are touched.',
    response: 'what was removed (or would be, with dry_run), and what could not be',
  },
  spawn: {
    method: 'POST',
    summary: 'Start a runner container',
    description:
      '`image` and `name` (starting with the runner prefix, SERVICE_RUNNER_PREFIX) are required; mounts come only from the managed dirs, read-only unless the caller also holds socket:container:mount_rw. docs/sockets.md walks through a first spawn.',
    response: 'the container started',
    responses: {
      404: 'not_found: the daemon has no such image (or network)',
      409: 'conflict: a container of that name exists (the daemon refused it)',
    },
  },
};
