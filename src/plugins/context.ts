import crypto from 'node:crypto';
import type Router from '@koa/router';
import Joi from 'joi';
import type { EventBus } from '../bus/bus.js';
import type { EventName, SocketRequestPayload, SocketResponsePayload } from '../bus/events.js';
import type { Logger } from '../log.js';
import { SocketProvider } from '../sockets/base-provider.js';
import { SocketError } from '../sockets/errors.js';
import { REGISTRY_KINDS, type SocketRegistry } from '../sockets/registry.js';
import type { SocketCaller, SocketRequestHandler } from '../sockets/bus-handler.js';
import { HttpError } from '../http/errors.js';
import { jsonBody } from '../http/body.js';
import { validate } from '../http/validate.js';
import { identity } from '../auth/guards.js';
import { ApiRouter, type EndpointDef, type EndpointHandler } from '../http/api.js';
import { ApiIdentity } from '../auth/identity.js';
import type { AuthProvider } from '../auth/providers/types.js';
import type { PluginManifest } from './manifest.js';
import { routeGuard } from './routing.js';
import {
  PluginPermissionError,
  type PluginBus,
  type PluginContext,
  type PluginEndpointDef,
  type PluginHandler,
  type PluginSdk,
  type PluginSocketRequest,
  type SocketRequestOptions,
} from './types.js';

export const SDK: PluginSdk = Object.freeze({ SocketProvider, SocketError, HttpError, Joi, jsonBody, validate, identity });

/** What the host lends a context. */
export interface ContextDeps {
  manifest: PluginManifest;
  config: Record<string, string | null>;
  /** the settings as the module's settingsSchema made them (default: config) */
  settings?: Record<string, unknown>;
  log: Logger;
  bus: EventBus;
  registry: SocketRegistry;
  socketRequests: SocketRequestHandler;
  /** the login chain, to confirm an auth provider registration took */
  authChain?: AuthChainLike | null;
}

export interface AuthChainLike {
  unregister(id: string): boolean;
  entries?(): { provider: { id: string }; plugin: string | null }[];
}

/**
 * One plugin's view of the service. Every call is checked against the manifest; everything the
 * plugin attaches (bus handlers, socket providers, auth providers) is tracked so disabling the
 * plugin removes it. Plugins run in-process: these checks hold a plugin to what it declared
 * (and what an administrator approved), they are not a sandbox.
 */
export class PluginContextImpl implements PluginContext {
  readonly id: string;
  readonly manifest: Readonly<PluginManifest>;
  readonly config: Readonly<Record<string, string | null>>;
  readonly settings: Readonly<Record<string, unknown>>;
  readonly log: Logger;
  readonly router: Router;
  /** the plugin's routes: the plain ones of `router` and those declared with endpoint() */
  private readonly api: ApiRouter;
  readonly sdk = SDK;
  readonly bus: PluginBus;
  private readonly abort = new AbortController();
  private readonly offs: (() => void)[] = [];
  /** socket:response handlers: fed only with answers to this plugin's own requests */
  private readonly responseHandlers = new Set<PluginHandler<SocketResponsePayload>>();
  readonly authProviderIds = new Set<string>();
  private closedFlag = false;
  /** the plugin's own caller: it holds its own plugin:<id>:* permissions and nothing else */
  private readonly selfCaller: SocketCaller;

  constructor(private readonly deps: ContextDeps) {
    const m = deps.manifest;
    this.id = m.id;
    this.manifest = deepFreeze(structuredClone(m));
    this.config = Object.freeze({ ...deps.config });
    this.settings = Object.freeze({ ...(deps.settings ?? deps.config) });
    this.log = deps.log;
    this.api = new ApiRouter({ prefix: `/api/plugins/${m.id}`, tag: `plugin:${m.id}` });
    this.router = this.api.router;
    const own = `plugin:${m.id}`;
    // who the audit trail names for the plugin's own socket requests
    this.selfCaller = Object.assign(
      { allows: (p: string) => p === own || p.startsWith(`${own}:`) },
      { username: `plugin:${m.id}`, userId: null, isSystem: false, isSuperadmin: false },
    );
    this.bus = {
      on: (topic: string, handler: PluginHandler<unknown>) => this.subscribe(topic, handler),
      emit: (topic: string, payload: unknown) => this.publish(topic, payload),
    } as PluginBus;
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  private ensureOpen(what: string): void {
    if (this.closedFlag) throw new PluginPermissionError(`plugin ${this.id} is stopped; ${what} refused`);
  }

  private subscribe(topic: string, handler: PluginHandler<unknown>): () => void {
    this.ensureOpen(`subscribing to ${topic}`);
    if (typeof handler !== 'function') throw new TypeError('handler must be a function');
    if (!this.manifest.permissions.subscribe.includes(topic)) {
      throw new PluginPermissionError(`plugin ${this.id} may not subscribe to topic "${topic}": it is not in permissions.subscribe`);
    }
    if (topic === 'socket:response') {
      this.responseHandlers.add(handler);
      return () => this.responseHandlers.delete(handler);
    }
    const off = this.deps.bus.on(topic as EventName, async (payload) => {
      if (this.closedFlag) return;
      try {
        await handler(payload);
      } catch (err) {
        // logged under the plugin's name, so an operator sees whose handler failed
        this.log.error({ err, topic }, 'plugin bus handler failed');
      }
    });
    this.offs.push(off);
    return off;
  }

  private publish(topic: string, payload: unknown): void {
    this.ensureOpen(`emitting ${topic}`);
    if (!this.manifest.permissions.emit.includes(topic)) {
      throw new PluginPermissionError(`plugin ${this.id} may not emit topic "${topic}": it is not in permissions.emit`);
    }
    const p = (payload ?? {}) as Record<string, unknown>;
    switch (topic) {
      case 'socket:request':
        // served here with the plugin's own permissions; the answer goes to this plugin only
        void this.socketRequest(p as unknown as PluginSocketRequest).then(
          (res) => this.deliverResponse(res),
          (err) => this.log.error({ err }, 'socket:request from the plugin failed'),
        );
        return;
      case 'auth:register_provider':
        if (p.plugin_name !== undefined && p.plugin_name !== this.id)
          throw new PluginPermissionError(`plugin ${this.id} may not register an auth provider for ${String(p.plugin_name)}`);
        this.registerAuthProvider(p.provider as AuthProvider);
        return;
      case 'socket:provider:register':
        // the registry's policy checks the name against provides; the owner must be this plugin
        if (p.plugin_name !== this.id) throw new PluginPermissionError(`plugin ${this.id} may not register a socket provider for ${String(p.plugin_name)}`);
        // registered as registerSocketProvider does (the provider logs under the plugin's logger); an
        // event has no caller to throw to, so a refusal is logged, as the registry logs one off the bus
        try {
          this.registerSocketProvider(p.provider_class as never);
        } catch (err) {
          this.log.error(
            { code: (err as { code?: string }).code ?? 'invalid_provider', reason: (err as Error).message },
            'socket provider registration rejected',
          );
        }
        return;
      default:
        this.deps.bus.emit(topic as EventName, payload as never);
    }
  }

  private deliverResponse(res: SocketResponsePayload): void {
    for (const h of this.responseHandlers) {
      try {
        const r = h(res);
        if (r && typeof (r as Promise<void>).catch === 'function')
          (r as Promise<void>).catch((err) => this.log.error({ err }, 'socket:response handler failed'));
      } catch (err) {
        this.log.error({ err }, 'socket:response handler failed');
      }
    }
  }

  registerSocketProvider<T extends SocketProvider>(cls: new (options: Record<string, unknown>, logger: Logger) => T, options: Record<string, unknown> = {}): T {
    this.ensureOpen('registering a socket provider');
    return this.deps.registry.register(cls, { owner: this.id, options, logger: this.log.child({ provider_owner: this.id }) });
  }

  /**
   * A plugin reaches a provider only through core, only
   * one it declared (uses) or owns (provides), never another plugin's.
   */
  async socketRequest(request: PluginSocketRequest, opts: SocketRequestOptions = {}): Promise<SocketResponsePayload> {
    this.ensureOpen('a socket request');
    const req = (request ?? {}) as PluginSocketRequest;
    const full: SocketRequestPayload = {
      request_id: typeof req.request_id === 'string' && req.request_id ? req.request_id : `plugin:${this.id}:${crypto.randomUUID()}`,
      operation: req.operation,
      ...(req.provider !== undefined ? { provider: req.provider } : {}),
      ...(req.args !== undefined ? { args: req.args } : {}),
    };
    const refused = this.providerRefusal(full);
    if (refused) {
      return {
        request_id: full.request_id,
        operation: String(full.operation ?? ''),
        provider: refused.provider,
        ok: false,
        result: null,
        error: { code: 'forbidden', message: refused.message },
      };
    }
    let caller: SocketCaller = this.selfCaller;
    if (opts.identity != null) {
      // only an identity the core resolved counts: a plugin cannot make up its own permissions
      if (!(opts.identity instanceof ApiIdentity)) throw new PluginPermissionError('identity must be the ApiIdentity of the request (ctx.state.identity)');
      caller = opts.identity;
    }
    return this.deps.socketRequests(full, caller);
  }

  private providerRefusal(req: SocketRequestPayload): { provider: string | null; message: string } | null {
    const op = typeof req.operation === 'string' ? req.operation : '';
    const kind = op.split(':')[0];
    const target = typeof req.provider === 'string' ? req.provider : kind;
    if (!req.provider && REGISTRY_KINDS.has(kind)) return null;
    const owner = this.deps.registry.ownerOf(target);
    const { provides, uses } = this.manifest.socket_providers;
    if (owner === this.id) return null;
    if (owner !== undefined && owner !== 'core') {
      return { provider: target, message: `plugin ${this.id} may not use socket provider ${target}: it belongs to plugin ${owner}` };
    }
    if (!uses.includes(target) && !provides.includes(target)) {
      return { provider: target, message: `plugin ${this.id} may not use socket provider ${target}: it is not in socket_providers.uses` };
    }
    return null;
  }

  registerAuthProvider(provider: AuthProvider): void {
    this.ensureOpen('registering an auth provider');
    const id = (provider as { id?: unknown } | null)?.id;
    if (typeof id !== 'string') throw new TypeError('an auth provider needs a string id');
    if (!this.manifest.auth_providers.includes(id)) {
      throw new PluginPermissionError(`plugin ${this.id} may not register auth provider "${id}": it is not in auth_providers`);
    }
    this.deps.bus.emit('auth:register_provider', { provider, plugin_name: this.id });
    const chain = this.deps.authChain;
    if (chain?.entries && !chain.entries().some((e) => e.provider.id === id && e.plugin === this.id)) {
      throw new Error(`auth provider "${id}" was refused by the login chain (see the service log)`);
    }
    this.authProviderIds.add(id);
  }

  requirePermission(permission: string) {
    return routeGuard(permission);
  }

  endpoint(def: PluginEndpointDef, handler: EndpointHandler): void {
    this.ensureOpen('adding a route');
    // what only the core's own routes may set (a larger body limit is process-wide) is dropped
    const {
      permission,
      bodyLimit: _limit,
      hidden: _hidden,
      stepUp: _stepUp,
      middleware: _middleware,
      tag: _tag,
      ...rest
    } = def as PluginEndpointDef & Partial<EndpointDef>;
    // the dispatch has checked api:read / api:write; the route adds its own permission, if any
    this.api.endpoint({ ...rest, auth: permission ? { permission } : 'optional' }, handler);
  }

  /** Stops delivery of every bus event and refuses further calls. */
  close(): void {
    if (this.closedFlag) return;
    this.closedFlag = true;
    this.abort.abort(new Error(`plugin ${this.id} stopped`));
    for (const off of this.offs.splice(0)) off();
    this.responseHandlers.clear();
  }
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
