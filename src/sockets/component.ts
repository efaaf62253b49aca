import Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { Config } from '../config.js';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { requirePermission, optionalIdentity } from '../auth/guards.js';
import { jsonBody } from '../http/body.js';
import { validate } from '../http/validate.js';
import { SocketRegistry } from './registry.js';
import { MountGuardian } from './mount-guardian.js';
import { SocketRequests, type SocketCaller } from './bus-handler.js';
import { ContainerProvider } from './container-provider.js';
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

  constructor(private readonly deps: { config: Config; bus: EventBus; log: Logger }) {
    this.registry = new SocketRegistry({ logger: deps.log });
    this.guardian = new MountGuardian({ managedDirs: deps.config.managedDirs, logger: deps.log });
    this.requests = new SocketRequests({ registry: this.registry, mountGuardian: this.guardian, logger: deps.log });
    this.registry.attachBus(deps.bus);
    this.requests.attachBus(deps.bus);
  }

  /** The built-in container provider, registered before plugins boot. */
  registerBuiltins(): void {
    const c = this.deps.config;
    this.registry.register(ContainerProvider, {
      owner: 'core',
      options: { socketPath: c.containerSocket, runnerPrefix: c.runnerPrefix, dataDir: c.dataDir },
    });
  }

  private async run(ctx: Context, operation: string, args: Record<string, unknown> = {}) {
    const caller: SocketCaller | null = ctx.state.identity ?? null;
    const res = await this.requests.handle({ request_id: ctx.state.requestId, operation, args }, caller);
    if (!res.ok) throw socketErrorToHttp(res.error!);
    return res.result;
  }

  routers(): Router[] {
    const r = new Router({ prefix: '/api/socket' });
    const dirs = Joi.object({ required_dirs: Joi.string().max(16_384) });

    r.get('/health', optionalIdentity, async (ctx) => {
      const q = validate(dirs, ctx.query, 'query');
      const paths = q.required_dirs
        ? q.required_dirs.split(',').map((p: string) => p.trim()).filter(Boolean)
        : this.guardian.managedDirs;
      ctx.body = await this.run(ctx, 'mounts:check', { paths });
    });
    r.get('/providers', optionalIdentity, async (ctx) => {
      ctx.body = await this.run(ctx, 'provider:list');
    });
    r.get('/container/health', optionalIdentity, async (ctx) => {
      ctx.body = await this.run(ctx, 'container:health');
    });
    r.get('/container/mounts', optionalIdentity, async (ctx) => {
      ctx.body = await this.run(ctx, 'container:mounts');
    });
    r.get('/container/storage-root', optionalIdentity, async (ctx) => {
      ctx.body = await this.run(ctx, 'container:storage_root');
    });
    r.post('/container/cleanup', requirePermission('socket:container:cleanup'), async (ctx) => {
      ctx.body = await this.run(ctx, 'container:cleanup', objectBody(ctx));
    });
    r.post('/repair', requirePermission('socket:mounts:repair'), async (ctx) => {
      ctx.body = await this.run(ctx, 'mounts:repair', objectBody(ctx));
    });
    return [r];
  }

  async close(): Promise<void> {
    await this.registry.close();
  }
}

function objectBody(ctx: Context): Record<string, unknown> {
  return validate(Joi.object().unknown(true), jsonBody(ctx)) as Record<string, unknown>;
}
