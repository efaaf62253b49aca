import type Router from '@koa/router';
import type Joi from 'joi';
import type { Context, Middleware } from 'koa';
import type { Logger } from '../log.js';
import type { EndpointDef, EndpointHandler } from '../http/api.js';
import type { EventMap, EventName, SocketResponsePayload } from '../bus/events.js';
import type { SocketProvider } from '../sockets/base-provider.js';
import type { SocketError } from '../sockets/errors.js';
import type { HttpError } from '../http/errors.js';
import type { AuthProvider } from '../auth/providers/types.js';
import type { ApiIdentity } from '../auth/identity.js';
import type { PluginManifest } from './manifest.js';

/**
 * The public surface a plugin sees (docs/plugins.md). A plugin module exports
 * `setup(ctx: PluginContext)` and optionally `teardown()`; type-only imports of this file
 * cost nothing at run time.
 */

export type { PluginState, PluginView } from '../client/api-types.js';

export type PluginHandler<P> = (payload: P) => void | Promise<void>;

/** The bus, narrowed to the topics the manifest lists. A topic outside the list throws PluginPermissionError. */
export interface PluginBus {
  on<E extends EventName>(topic: E, handler: PluginHandler<EventMap[E]>): () => void;
  /** a plugin-defined topic (e.g. `plugin:<id>:something`) */
  on(topic: string, handler: PluginHandler<unknown>): () => void;
  emit<E extends EventName>(topic: E, payload: EventMap[E]): void;
  emit(topic: string, payload: unknown): void;
}

export interface PluginSocketRequest {
  operation: string;
  provider?: string;
  args?: Record<string, unknown>;
  /** generated when absent */
  request_id?: string;
}

export interface SocketRequestOptions {
  /**
   * The caller the plugin acts for (ctx.state.identity of its route): the operation's
   * permission is checked against it. Without it the plugin acts as itself and holds only its
   * own `plugin:<id>:*` permissions, so guarded core operations are refused.
   */
  identity?: ApiIdentity | null;
}

/** Core pieces a plugin builds on, handed over so a plugin needs no import path into the core. */
export interface PluginSdk {
  /** base class of socket providers: the registry accepts only classes derived from it */
  SocketProvider: typeof SocketProvider;
  SocketError: typeof SocketError;
  HttpError: typeof HttpError;
  Joi: typeof Joi;
  /** the request's JSON body (empty -> {}; malformed -> 400) */
  jsonBody(ctx: Context): unknown;
  /** validates with joi; answers 400 naming each bad field */
  validate<T>(schema: Joi.Schema<T>, value: unknown, where?: 'body' | 'query' | 'params'): T;
  /** the authenticated caller of a plugin route (always set: plugin routes require an identity) */
  identity(ctx: Context): ApiIdentity;
}

/**
 * A route of the plugin declared like the core's own (src/http/api.ts): its query and body are
 * validated before the handler, and its answers (each status with its joi schema) are what the
 * API document lists. Mounted under /api/plugins/<id>/; the plugin dispatch still requires
 * plugin:<id>:api:read (GET) or plugin:<id>:api:write (other methods) first.
 */
export type PluginEndpointDef = Omit<EndpointDef, 'auth' | 'tag' | 'hidden' | 'bodyLimit' | 'stepUp' | 'middleware'> & {
  /** a further permission the route needs, on top of the dispatch's api:read / api:write */
  permission?: string;
};

export interface PluginContext {
  readonly id: string;
  readonly manifest: Readonly<PluginManifest>;
  /** the plugin's settings: environment, then the settings API, then the manifest default; null = unset */
  readonly config: Readonly<Record<string, string | null>>;
  /**
   * The settings as the module's `settingsSchema` validated and converted them (the same
   * values as `config` when the module declares no schema).
   */
  readonly settings: Readonly<Record<string, unknown>>;
  /** a logger bound to this plugin ({plugin: id}) */
  readonly log: Logger;
  readonly bus: PluginBus;
  /** mounted at /api/plugins/<id>/; GET needs plugin:<id>:api:read, other methods plugin:<id>:api:write */
  readonly router: Router;
  /** aborted when the plugin is disabled or the service stops */
  readonly signal: AbortSignal;
  readonly sdk: PluginSdk;
  /** registers a socket provider whose name the manifest lists in socket_providers.provides */
  registerSocketProvider<T extends SocketProvider>(cls: new (options: Record<string, unknown>, logger: Logger) => T, options?: Record<string, unknown>): T;
  /** a socket operation on a provider in socket_providers.uses (core providers) or this plugin's own provides */
  socketRequest(request: PluginSocketRequest, opts?: SocketRequestOptions): Promise<SocketResponsePayload>;
  /** adds an authentication provider whose id the manifest lists in auth_providers to the login chain */
  registerAuthProvider(provider: AuthProvider): void;
  /** an extra guard for one route (on top of the api:read / api:write default); the API document names it */
  requirePermission(permission: string): Middleware;
  /** a documented route (PluginEndpointDef): validated input, answers listed in /openapi.json */
  endpoint(def: PluginEndpointDef, handler: EndpointHandler): void;
}

export interface PluginModule {
  setup(ctx: PluginContext): void | Promise<void>;
  teardown?(): void | Promise<void>;
  /**
   * The rules of the plugin's settings (every key of the manifest's `settings`, as strings or
   * null): the host checks a change against them before storing it (400 naming the field), and
   * setup gets the validated, converted values as `ctx.settings`. The host may import the
   * module for this while the plugin is disabled: its top level must not act.
   */
  settingsSchema?(sdk: PluginSdk): Joi.ObjectSchema;
}

/** Thrown when a plugin reaches beyond its manifest. The message names the topic, provider or id. */
export class PluginPermissionError extends Error {
  readonly code = 'plugin_forbidden';
  constructor(message: string) {
    super(message);
    this.name = 'PluginPermissionError';
  }
}
