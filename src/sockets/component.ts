import { markRecorded } from '../errors.js';
import fs from 'node:fs';
import type Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { Knex } from 'knex';
import { privateDir, type Config } from '../config.js';
import type { EventBus } from '../bus/bus.js';
import type { ClientChannels } from '../bus/channels.js';
import type { Logger } from '../log.js';
import { ApiRouter, guardFor, type Endpoint, type ResponseDoc, type RouteAuth } from '../http/api.js';
import { HttpError, notFound, unauthenticated } from '../http/errors.js';
import { jsonBody } from '../http/body.js';
import { validate } from '../http/validate.js';
import { SocketRegistry } from './registry.js';
import { CHECK_PATH_MAX_LENGTH, CHECK_PATHS_MAX, checkPathsSchema, MountGuardian, repairSchema } from './mount-guardian.js';
import { mountCheckResult, providerListResult, repairResult } from './schemas.js';
import { HostPaths } from './host-paths.js';
import { SocketRequests, type SocketAuditEntry, type SocketCaller } from './bus-handler.js';
import { ContainerProvider } from './container-provider.js';
import { register as registerDns } from './dns/index.js';
import { register as registerDhcp } from './dhcp/index.js';
import { register as registerInit } from './init/index.js';
import { register as registerGrpc } from './grpc/index.js';
import type { RegisterHostService } from './host-service.js';

/** dns before dhcp: a reservation with `dns: true` finds the dns provider registered */
const HOST_SERVICES: readonly RegisterHostService[] = [registerDns, registerDhcp, registerInit, registerGrpc];
import { httpOf, isChange, servedOperations, type OperationHttp, type ProviderOperation, type SocketProvider } from './base-provider.js';
import { socketErrorToHttp } from './errors.js';
import { actingFrom } from '../request-context.js';
import { reachesHost } from '../iam/policy.js';

// the limits of mounts:check (checkPathsSchema), refused here under the parameter's own name;
// the header limit (431) bounds the whole string
interface RequiredDirsQuery {
  required_dirs?: string;
}

const requiredDirsQuery = Joi.object<RequiredDirsQuery, true>({
  required_dirs: Joi.string()
    .custom((value: string, helpers) =>
      checkPathsSchema.validate(splitPaths(value)).error
        ? helpers.message({ custom: `{{#label}} must hold 1 to ${CHECK_PATHS_MAX} paths of at most ${CHECK_PATH_MAX_LENGTH} characters each` })
        : value,
    )
    .description(
      `comma-separated paths (spaces around each trimmed, empty entries skipped): at most ${CHECK_PATHS_MAX} paths of at most ${CHECK_PATH_MAX_LENGTH} characters each; default: SERVICE_MANAGED_DIRS`,
    ),
});

/**
 * The socket provider registry with its bus operations and the HTTP API under /api/socket
 * (OpenAPI tag socket-management). Every HTTP route is a thin shell over the same operation the
 * bus and the ws gateway use, so the three agree on validation and permissions.
 */
export class SocketsComponent {
  readonly registry: SocketRegistry;
  readonly guardian: MountGuardian;
  readonly requests: SocketRequests;

  constructor(
    private readonly deps: {
      config: Config;
      bus: EventBus;
      log: Logger;
      /** what the host-service providers keep (dns records, the dhcp lock) */
      db: Knex;
      instanceId?: string;
      /** step-up before an operation with these permissions (src/sockets/bus-handler.ts) */
      stepUp?: (caller: SocketCaller | null, permissions: readonly string[]) => Promise<void>;
      /** privileged operations for the audit trail (src/sockets/bus-handler.ts) */
      record?: (entry: SocketAuditEntry) => void;
    },
  ) {
    this.registry = new SocketRegistry({ logger: deps.log, instanceId: deps.instanceId });
    const { managedDirs, dataDir } = deps.config;
    // the data dir holds the master key and the database: other users may not enter it
    const loose = privateDir(dataDir, { tighten: true });
    if (loose) deps.log.warn({ data_dir: dataDir }, `data dir: ${loose}`);
    // the default managed root, <data>/managed, exists from the start
    const folder = HostPaths.managedFolderOf(dataDir);
    if (managedDirs.includes(folder)) fs.mkdirSync(folder, { recursive: true, mode: 0o755 });
    this.guardian = new MountGuardian({ managedDirs, dataDir, logger: deps.log });
    this.requests = new SocketRequests({ registry: this.registry, mountGuardian: this.guardian, logger: deps.log, stepUp: deps.stepUp, record: deps.record });
    this.registry.attachBus(deps.bus);
    this.requests.attachBus(deps.bus);
  }

  /** The built-in providers, registered before plugins boot: the container daemon, and each host service that is configured. */
  registerBuiltins(): void {
    const c = this.deps.config;
    this.registry.register(ContainerProvider, {
      owner: 'core',
      // runners may bind-mount only what lies inside the managed dirs
      options: { socketPath: c.containerSocket, runnerPrefix: c.runnerPrefix, dataDir: c.dataDir, mountRoots: c.managedDirs },
    });
    const deps = { config: c, db: this.deps.db, bus: this.deps.bus, log: this.deps.log, registry: this.registry };
    for (const register of HOST_SERVICES) register(deps);
  }

  /** `socket:request` frames over the ws gateway: answered to that connection only, with its permissions. */
  attachChannels(channels: ClientChannels): void {
    channels.frame({
      event: 'socket:request',
      permission: null, // each operation checks its own
      handle: async (session, payload, ref) => session.send('socket:response', await this.requests.handle(payload, session.actor), ref),
    });
  }

  private async run(ctx: Context, operation: string, args: Record<string, unknown> = {}, provider?: string) {
    const caller: SocketCaller | null = ctx.state.identity ? actingFrom(ctx.state.identity, ctx.ip) : null;
    const res = await this.requests.handle({ request_id: ctx.state.requestId, operation, args, ...(provider ? { provider } : {}) }, caller);
    // a permission the args asked for (permissionsFor), refused to nobody in particular: sign in first
    if (!res.ok && res.error!.code === 'forbidden' && !caller) throw unauthenticated(ctx.headers);
    if (!res.ok) {
      const err = socketErrorToHttp(res.error!);
      // the bus handler recorded it (socket.operation): the HTTP answer records nothing more
      if (this.requests.recorded(res)) markRecorded(err);
      throw err;
    }
    return res.result;
  }

  /** The operation `/api/socket/<provider>/<operation>` names, when it declares this method. */
  private httpOperation(
    providerName: string,
    path: string,
    method: OperationHttp['method'],
  ): { provider: SocketProvider; name: string; op: ProviderOperation } {
    const provider = this.registry.get(providerName);
    // one URL per operation: `record-add`, never `record_add` beside it
    if (path.includes('_')) throw notFound(`socket operation /api/socket/${providerName}/${path}`);
    const name = path.replace(/-/g, '_');
    const ops = provider ? servedOperations(provider) : {};
    const op = Object.prototype.hasOwnProperty.call(ops, name) ? ops[name] : undefined;
    if (!provider || !op) throw notFound(`socket operation /api/socket/${providerName}/${path}`);
    const http = httpOf(provider.kind, name, op);
    if (http.method !== method) throw new HttpError(405, 'method_not_allowed', `use ${http.method}`, undefined, { Allow: http.method });
    return { provider, name, op };
  }

  private async runOperation(ctx: Context, method: OperationHttp['method']): Promise<unknown> {
    const { provider, name, op } = this.httpOperation(ctx.params.provider!, ctx.params.operation!, method);
    // 401 before the args are looked at, as on every other route; the permission is the bus
    // handler's (before the args too), so a refusal is one socket.operation event however it came
    const guard = guardFor(httpAuth(op, this.registry.ownerOf(provider.name), this.deps.config.socketReadsRequireAuth), 'operation');
    if (this.refusedBeforeArgs(ctx, op.permission)) return this.run(ctx, `${provider.kind}:${name}`, this.argNames(ctx, method), provider.name);
    let result: unknown;
    const run = async () => {
      // a query string is text: its values are converted by the operation's own rule first (an
      // object schema's value, whatever type the operation gives it)
      const args = method === 'GET' ? (validate(op.schema, { ...ctx.query }, 'query') as Record<string, unknown>) : objectBody(ctx);
      result = await this.run(ctx, `${provider.kind}:${name}`, args, provider.name);
    };
    if (guard) await guard(ctx, run);
    else await run();
    return result;
  }

  /** An identified caller without the operation's permission: refused by the bus handler before any args are read. */
  private refusedBeforeArgs(ctx: Context, permission: string | null): boolean {
    const id = ctx.state.identity;
    return permission !== null && Boolean(id) && !id!.allows(permission);
  }

  /**
   * The args a refused request sent, for the event, which names only the fields (as over ws):
   * the query's, or a JSON body's when it is one (else none).
   */
  private argNames(ctx: Context, method: OperationHttp['method']): Record<string, unknown> {
    if (method === 'GET') return { ...ctx.query };
    try {
      return objectBody(ctx);
    } catch {
      return {};
    }
  }

  /** The routes of every provider operation, for the OpenAPI document. */
  documentedRoutes(): { version: number; endpoints: Endpoint[] } {
    if (this.documented?.version !== this.registry.version) {
      const endpoints = this.registry.names().flatMap((providerName) => {
        try {
          const owner = this.registry.ownerOf(providerName);
          const readsRequireAuth = this.deps.config.socketReadsRequireAuth;
          const provider = this.registry.get(providerName)!;
          return Object.entries(servedOperations(provider)).map(([name, op]) =>
            operationEndpoint(providerName, name, op, httpOf(provider.kind, name, op), owner, readsRequireAuth),
          );
        } catch (err) {
          // a plugin provider whose operations() throws leaves the document, not breaks it
          this.deps.log.warn({ err, provider: providerName }, 'socket provider operations could not be listed');
          return [];
        }
      });
      this.documented = { version: this.registry.version, endpoints };
    }
    return this.documented;
  }

  private documented: { version: number; endpoints: Endpoint[] } | null = null;

  routers(): Router[] {
    const api = new ApiRouter({ prefix: '/api/socket', tag: 'socket-management' });
    // the reads: open to anyone, or (SERVICE_SOCKET_READS_REQUIRE_AUTH) to signed-in callers only
    const reads: RouteAuth = this.deps.config.socketReadsRequireAuth ? 'identity' : 'optional';

    api.endpoint(
      {
        method: 'GET',
        path: '/health',
        operationId: 'checkMountHealth',
        summary: 'Mount health of directories (read-only)',
        description: 'Paths outside SERVICE_MANAGED_DIRS are reported with error `not_managed`.',
        auth: reads,
        query: requiredDirsQuery,
        responses: { 200: { description: 'each directory and its status', schema: mountCheckResult } },
      },
      async (ctx, { query: q }) => {
        const paths = q.required_dirs ? splitPaths(q.required_dirs) : this.guardian.managedDirs;
        return this.run(ctx, 'mounts:check', { paths });
      },
    );
    api.endpoint(
      {
        method: 'GET',
        path: '/providers',
        operationId: 'listSocketProviders',
        summary: 'Registered socket providers, which are available, and why the others are not (`reason`)',
        auth: reads,
        responses: { 200: { description: 'the providers of the instance that answered', schema: providerListResult } },
      },
      (ctx) => this.run(ctx, 'provider:list'),
    );
    // every provider operation: one route for all, so a plugin's provider
    // gets its routes when it registers and loses them when it goes (documentedRoutes lists them)
    for (const method of ['GET', 'POST'] as const) {
      // each operation's own guard (httpAuth) runs in runOperation, once the operation is known
      api.endpoint({ method, path: '/:provider/:operation', summary: 'a provider operation', auth: 'optional', hidden: true }, (ctx) =>
        this.runOperation(ctx, method),
      );
    }
    api.endpoint(
      {
        method: 'POST',
        path: '/repair',
        operationId: 'repairMount',
        summary: 'Repair owner and mode of a managed directory',
        description: 'A target (symlinks resolved) outside SERVICE_MANAGED_DIRS is 403, a missing one 404.',
        auth: { permission: 'socket:mounts:repair' },
        permissionCheck: 'operation',
        // the bus handler asks for it, as for every change that reaches the host: the document says so
        stepUp: true,
        body: repairSchema,
        bodyMode: 'manual',
        responses: {
          200: { description: 'the directory repaired and what changed', schema: repairResult },
          403: 'forbidden: the caller lacks socket:mounts:repair; or step_up_required: verify the second factor again; or target_dir (symlinks resolved) lies outside SERVICE_MANAGED_DIRS or in the data dir (details name target_dir)',
          404: 'not_found: no such directory',
        },
      },
      (ctx) =>
        // the permission before the body (403 before 400), judged by the bus handler as over ws
        this.run(ctx, 'mounts:repair', this.refusedBeforeArgs(ctx, 'socket:mounts:repair') ? this.argNames(ctx, 'POST') : objectBody(ctx)),
    );
    return [api.router];
  }

  async close(): Promise<void> {
    await this.registry.close();
  }
}

/**
 * Who may call an operation over HTTP: its permission; without one, anyone for a core provider
 * (the read routes the specification leaves open, unless SERVICE_SOCKET_READS_REQUIRE_AUTH) and
 * any signed-in caller for a plugin's.
 */
function httpAuth(op: ProviderOperation, owner: string | undefined, readsRequireAuth: boolean): RouteAuth {
  if (op.permission !== null) return { permission: op.permission };
  return owner === 'core' && !readsRequireAuth ? 'optional' : 'identity';
}

function operationEndpoint(
  providerName: string,
  name: string,
  op: ProviderOperation,
  http: OperationHttp,
  owner: string | undefined,
  readsRequireAuth: boolean,
): Endpoint {
  const fullPath = `/api/socket/${providerName}/${name.replace(/_/g, '-')}`;
  const auth = httpAuth(op, owner, readsRequireAuth);
  const responses: Record<number, string | ResponseDoc> = {
    200: {
      description: http.response ?? 'the result',
      // an operation that does not declare its result: any JSON, and the document says so
      schema: op.result ?? { description: 'any JSON value: the provider does not describe the result of this operation' },
    },
    502: 'bad_gateway: the operation failed in the provider or the service behind it',
    ...http.responses,
  };
  if (op.requires_available !== false) responses[503] = 'unavailable: the provider is not available';
  // a change reaching the host needs step-up: its own permission says so, or (a gRPC call) the
  // permissions its args ask for, which a core provider's are (socket:...)
  const stepUp = isChange(op) && (op.permission !== null ? reachesHost(op.permission) : Boolean(op.permissionsFor) && owner === 'core');
  // args that ask for more (permissionsFor): a further permission, refused to nobody in particular as 401
  if (op.permissionsFor) {
    if (auth === 'optional') responses[401] = 'unauthorized: the args ask for a permission and no valid credential was given';
    const own = http.responses?.[403];
    responses[403] = [
      `forbidden: the caller lacks ${op.permission ? `${op.permission} or ` : ''}a permission these args ask for (the message names it)`,
      ...(stepUp && !own?.includes('step_up_required') ? ['step_up_required: verify the second factor again'] : []),
      ...(own ? [own] : []),
    ].join('; or ');
  }
  return {
    method: http.method,
    path: fullPath,
    fullPath,
    tag: 'socket-management',
    operationId: `${providerName}_${name}`.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c?: string) => (c ? c.toUpperCase() : '')),
    summary: http.summary,
    description: http.description,
    auth,
    // judged by the operation (its permission, with the key's scopes) as the route that runs it is
    permissionCheck: 'operation' as const,
    // an operation that reaches the host needs a recent second factor from a web session (the bus handler's stepUp)
    stepUp,
    ...(http.method === 'GET' ? { query: op.schema } : { body: op.schema, bodyMode: 'manual' as const }),
    responses,
  };
}

/** required_dirs as paths: comma-separated, each trimmed, empty entries skipped. */
function splitPaths(list: string): string[] {
  return list
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
}

function objectBody(ctx: Context): Record<string, unknown> {
  return validate(Joi.object().unknown(true), jsonBody(ctx)) as Record<string, unknown>;
}
