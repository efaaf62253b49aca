import fs from 'node:fs';
import type Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { Config } from '../config.js';
import type { EventBus } from '../bus/bus.js';
import type { ClientChannels } from '../bus/channels.js';
import type { Logger } from '../log.js';
import { ApiRouter } from '../http/api.js';
import { jsonBody } from '../http/body.js';
import { validate } from '../http/validate.js';
import { SocketRegistry } from './registry.js';
import { MountGuardian, repairSchema } from './mount-guardian.js';
import { HostPaths } from './host-paths.js';
import { SocketRequests, type SocketCaller } from './bus-handler.js';
import { ContainerProvider, PREFIX_PATTERN } from './container-provider.js';
import { socketErrorToHttp } from './errors.js';

/**
 * The socket provider registry with its bus operations and the HTTP API under /api/socket
 * (OpenAPI tag socket-management). Every HTTP route is a thin shell over the same operation the
 * bus and the ws gateway use, so the three agree on validation and permissions.
 */
export class SocketsComponent {
  readonly registry: SocketRegistry;
  readonly guardian: MountGuardian;
  readonly requests: SocketRequests;

  constructor(private readonly deps: { config: Config; bus: EventBus; log: Logger; instanceId?: string }) {
    this.registry = new SocketRegistry({ logger: deps.log, instanceId: deps.instanceId });
    const { managedDirs, dataDir } = deps.config;
    // the default managed root, <data>/managed, exists from the start
    const folder = HostPaths.managedFolderOf(dataDir);
    if (managedDirs.includes(folder)) fs.mkdirSync(folder, { recursive: true, mode: 0o755 });
    this.guardian = new MountGuardian({ managedDirs, dataDir, logger: deps.log });
    this.requests = new SocketRequests({ registry: this.registry, mountGuardian: this.guardian, logger: deps.log });
    this.registry.attachBus(deps.bus);
    this.requests.attachBus(deps.bus);
  }

  /** The built-in container provider, registered before plugins boot. */
  registerBuiltins(): void {
    const c = this.deps.config;
    this.registry.register(ContainerProvider, {
      owner: 'core',
      // runners may bind-mount only what lies inside the managed dirs
      options: { socketPath: c.containerSocket, runnerPrefix: c.runnerPrefix, dataDir: c.dataDir, mountRoots: c.managedDirs },
    });
  }

  /** `socket:request` frames over the ws gateway: answered to that connection only, with its permissions. */
  attachChannels(channels: ClientChannels): void {
    channels.frame({
      event: 'socket:request',
      permission: null, // each operation checks its own
      handle: async (session, payload, ref) => session.send('socket:response', await this.requests.handle(payload, session.identity), ref),
    });
  }

  private async run(ctx: Context, operation: string, args: Record<string, unknown> = {}) {
    const caller: SocketCaller | null = ctx.state.identity ?? null;
    const res = await this.requests.handle({ request_id: ctx.state.requestId, operation, args }, caller);
    if (!res.ok) throw socketErrorToHttp(res.error!);
    return res.result;
  }

  routers(): Router[] {
    const api = new ApiRouter({ prefix: '/api/socket', tag: 'socket-management' });
    const dirs = Joi.object({ required_dirs: Joi.string().max(16_384).description('comma-separated paths; default: SERVICE_MANAGED_DIRS') });
    // the operation validates its args (the same check as bus and ws); these describe them
    const cleanupBody = Joi.object({
      prefix: Joi.string().max(128).pattern(PREFIX_PATTERN).description('name prefix of the containers to remove; default SERVICE_RUNNER_PREFIX'),
      max_age_minutes: Joi.number().min(0).default(60),
      dry_run: Joi.boolean().default(false),
    });
    const optional = 'optional' as const;

    api.endpoint(
      {
        method: 'GET',
        path: '/health',
        summary: 'Mount health of directories (read-only)',
        description: 'Paths outside SERVICE_MANAGED_DIRS are reported with error `not_managed`.',
        auth: optional,
        query: dirs,
        responses: { 200: { description: '{healthy, mounts: {<path>: {exists, writable, is_mount_point, owner_uid, mode, error}}}', schema: Joi.object({ healthy: Joi.boolean(), mounts: Joi.object().unknown(true) }) } },
      },
      async (ctx, { query: q }) => {
        const paths = q.required_dirs ? q.required_dirs.split(',').map((p: string) => p.trim()).filter(Boolean) : this.guardian.managedDirs;
        return this.run(ctx, 'mounts:check', { paths });
      },
    );
    api.endpoint(
      {
        method: 'GET',
        path: '/providers',
        summary: 'Registered socket providers, which are available, and why the others are not (`reason`)',
        auth: optional,
        responses: { 200: { description: 'the providers of the instance that answered', schema: Joi.object({ providers: Joi.array().items(Joi.object().unknown(true)), available: Joi.array().items(Joi.string()), total: Joi.number().integer(), instance: Joi.string() }) } },
      },
      (ctx) => this.run(ctx, 'provider:list'),
    );
    api.endpoint({ method: 'GET', path: '/container/health', summary: 'Container daemon health', auth: optional, responses: { 200: '{healthy, daemon: {version, api_version}, containers_running, containers_total, images, error?}' } }, (ctx) =>
      this.run(ctx, 'container:health'),
    );
    api.endpoint({ method: 'GET', path: '/container/mounts', summary: 'Container mount mappings', auth: optional, responses: { 200: '{mounts: {<container id>: {<destination>: <source>}}}' } }, (ctx) =>
      this.run(ctx, 'container:mounts'),
    );
    api.endpoint(
      { method: 'GET', path: '/container/storage-root', summary: 'The host storage root as seen inside containers', auth: optional, responses: { 200: '{storage_root: "<host path>" | null}' } },
      (ctx) => this.run(ctx, 'container:storage_root'),
    );
    api.endpoint(
      {
        method: 'POST',
        path: '/container/cleanup',
        summary: 'Remove stale runner containers',
        description: 'Only containers whose name starts with the prefix are touched.',
        auth: { permission: 'socket:container:cleanup' },
        body: cleanupBody,
        bodyMode: 'manual',
        responses: { 200: '{removed: [{id, name}], errors: []}' },
      },
      (ctx) => this.run(ctx, 'container:cleanup', objectBody(ctx)),
    );
    api.endpoint(
      {
        method: 'POST',
        path: '/repair',
        summary: 'Repair owner and mode of a managed directory',
        description: 'A target (symlinks resolved) outside SERVICE_MANAGED_DIRS is 403, a missing one 404.',
        auth: { permission: 'socket:mounts:repair' },
        body: repairSchema,
        bodyMode: 'manual',
        responses: { 200: '{status: "repaired", target_dir, changed}', 404: 'no such directory' },
      },
      (ctx) => this.run(ctx, 'mounts:repair', objectBody(ctx)),
    );
    return [api.router];
  }

  async close(): Promise<void> {
    await this.registry.close();
  }
}

function objectBody(ctx: Context): Record<string, unknown> {
  return validate(Joi.object().unknown(true), jsonBody(ctx)) as Record<string, unknown>;
}
