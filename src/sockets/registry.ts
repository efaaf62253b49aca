import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import Joi from 'joi';
import {
  servedOperations,
  fullCapabilities,
  OPTIONAL_CAPABILITIES,
  REQUIRED_CAPABILITIES,
  SocketProvider,
  type ProviderCapabilities,
  type SocketProviderClass,
} from './base-provider.js';
import { ProviderRegistrationError } from './errors.js';

/** 'core' for built-in providers, else the registering plugin's name. */
export type ProviderOwner = string;

export interface RegisterOptions {
  owner: ProviderOwner;
  /** first constructor argument of the provider class */
  options?: Record<string, unknown>;
  /** the provider's logger, and the one its failures are logged with (a plugin's: it conceals the plugin's secrets) */
  logger?: Logger;
}

export interface ProviderListEntry {
  name: string;
  socket_path: string;
  available: boolean;
  /** why it is unavailable (null when available), so an administrator can act on it */
  reason: string | null;
  capabilities: ProviderCapabilities;
  /** owning plugin, null for core providers */
  plugin: string | null;
}

/**
 * Decides whether `owner` may register a provider called `name` (the plugin host plugs in its
 * manifest check). Return true to allow, or a reason string to refuse.
 */
export type RegistrationPolicy = (owner: ProviderOwner, name: string) => true | string;

interface Entry {
  provider: SocketProvider;
  cls: SocketProviderClass;
  owner: ProviderOwner;
  logger: Logger;
}

const PROVIDER_NAME = /^[a-z][a-z0-9_-]{0,62}$/;
const OWNER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.@/-]{0,127}$/;
const AVAILABILITY_TIMEOUT_MS = 3000;
/** operation prefixes served by the registry itself (provider:list, mounts:check, mounts:repair): no provider may take them */
export const REGISTRY_KINDS: ReadonlySet<string> = new Set(['provider', 'mounts']);

/** true when `value` is a class whose prototype chain contains SocketProvider.prototype */
export function derivesFromSocketProvider(value: unknown): value is SocketProviderClass {
  if (typeof value !== 'function') return false;
  const proto = (value as { prototype?: unknown }).prototype;
  return typeof proto === 'object' && proto !== null && proto instanceof SocketProvider;
}

/**
 * Registry of socket providers: each class instantiated once, one instance per name, owner
 * recorded so a plugin's providers go away with the plugin.
 */
export class SocketRegistry {
  private readonly entries = new Map<string, Entry>();
  private policy: RegistrationPolicy | null;

  private bus: EventBus | null = null;

  constructor(private readonly deps: { logger: Logger; policy?: RegistrationPolicy; instanceId?: string }) {
    this.policy = deps.policy ?? null;
  }

  /** The instance whose host this registry describes (each instance's registry is the truth of its own host). */
  get instance(): string {
    return this.deps.instanceId ?? 'local';
  }

  /** changes whenever a provider comes or goes (the HTTP routes derived from them changed) */
  version = 0;

  /** Tells every instance (and the ws clients) what this instance's registry holds now. */
  private changed(): void {
    this.version++;
    this.bus?.emit('socket:providers_changed', { instance: this.instance, providers: this.names() });
  }

  setPolicy(policy: RegistrationPolicy | null): void {
    this.policy = policy;
  }

  register<T extends SocketProvider>(cls: new (options: Record<string, unknown>, logger: Logger) => T, opts: RegisterOptions): T {
    const owner = opts?.owner;
    if (typeof owner !== 'string' || !OWNER_NAME.test(owner)) {
      throw new ProviderRegistrationError('invalid_provider', 'owner must be "core" or a plugin name');
    }
    if (!derivesFromSocketProvider(cls)) {
      throw new ProviderRegistrationError('not_a_provider', 'provider class must derive from SocketProvider');
    }
    // same class, same owner again: de-duplicated, no second instance
    for (const entry of this.entries.values()) {
      if (entry.cls === cls) {
        if (entry.owner === owner) return entry.provider as T;
        throw new ProviderRegistrationError('duplicate_provider', `provider class ${cls.name || '(anonymous)'} is already registered by ${entry.owner}`);
      }
    }

    let provider: T;
    const logger = opts.logger ?? this.deps.logger.child({ provider_owner: owner });
    try {
      provider = new cls(opts.options ?? {}, logger);
    } catch (err) {
      throw new ProviderRegistrationError('invalid_provider', `provider constructor failed: ${(err as Error)?.message ?? err}`);
    }
    this.checkContract(provider);

    const existing = this.entries.get(provider.name);
    if (existing) {
      void provider.close().catch(() => undefined);
      throw new ProviderRegistrationError('duplicate_provider', `a provider named ${provider.name} is already registered (owner ${existing.owner})`);
    }
    if (this.policy) {
      const verdict = this.policy(owner, provider.name);
      if (verdict !== true) {
        void provider.close().catch(() => undefined);
        throw new ProviderRegistrationError('not_allowed', `provider ${provider.name} refused: ${verdict}`);
      }
    }
    this.entries.set(provider.name, { provider, cls: cls as SocketProviderClass, owner, logger });
    this.deps.logger.info({ provider: provider.name, owner, socket_path: provider.socket_path }, 'socket provider registered');
    this.changed();
    return provider;
  }

  get(name: string): SocketProvider | undefined {
    return this.entries.get(name)?.provider;
  }

  /** The logger a provider's failures go to: its own (a plugin's provider's conceals the plugin's secrets). */
  loggerOf(name: string): Logger {
    return this.entries.get(name)?.logger ?? this.deps.logger;
  }

  ownerOf(name: string): ProviderOwner | undefined {
    return this.entries.get(name)?.owner;
  }

  names(): string[] {
    return [...this.entries.keys()];
  }

  /** Every provider with a fresh availability check (each bounded by a short timeout). */
  async list(): Promise<ProviderListEntry[]> {
    const entries = [...this.entries.values()];
    return Promise.all(
      entries.map(async ({ provider, owner }) => ({
        name: provider.name,
        socket_path: provider.socket_path,
        ...(await availableWithin(provider, AVAILABILITY_TIMEOUT_MS)),
        capabilities: fullCapabilities(provider.capabilities),
        plugin: owner === 'core' ? null : owner,
      })),
    );
  }

  /** Removes (and closes) every provider of `owner`; returns the removed names. */
  async unregisterOwner(owner: ProviderOwner): Promise<string[]> {
    const removed: string[] = [];
    for (const [name, entry] of [...this.entries]) {
      if (entry.owner !== owner) continue;
      this.entries.delete(name);
      removed.push(name);
      try {
        await entry.provider.close();
      } catch (err) {
        entry.logger.warn({ err, provider: name }, 'socket provider close failed');
      }
    }
    if (removed.length) {
      this.deps.logger.info({ owner, providers: removed }, 'socket providers unregistered');
      this.changed();
    }
    return removed;
  }

  async close(): Promise<void> {
    for (const owner of new Set([...this.entries.values()].map((e) => e.owner))) await this.unregisterOwner(owner);
  }

  /** Serves socket:provider:register; returns a function that detaches it. */
  attachBus(bus: EventBus): () => void {
    this.bus = bus;
    return bus.on('socket:provider:register', (payload) => {
      const pluginName = payload?.plugin_name;
      try {
        if (typeof pluginName !== 'string' || pluginName === 'core') {
          throw new ProviderRegistrationError('invalid_provider', 'plugin_name must name the registering plugin');
        }
        this.register(payload.provider_class as SocketProviderClass, { owner: pluginName });
      } catch (err) {
        const reason = err instanceof ProviderRegistrationError ? err.message : String((err as Error)?.message ?? err);
        const code = err instanceof ProviderRegistrationError ? err.code : 'invalid_provider';
        this.deps.logger.error({ plugin: typeof pluginName === 'string' ? pluginName : null, code, reason }, 'socket provider registration rejected');
      }
    });
  }

  private checkContract(p: SocketProvider): void {
    const bad = (why: string) => {
      void p.close().catch(() => undefined);
      return new ProviderRegistrationError('invalid_provider', why);
    };
    if (typeof p.name !== 'string' || !PROVIDER_NAME.test(p.name)) {
      throw bad('provider name must match ^[a-z][a-z0-9_-]{0,62}$');
    }
    if (REGISTRY_KINDS.has(p.name) || REGISTRY_KINDS.has(p.kind)) throw bad(`provider name ${p.name} is reserved`);
    if (typeof p.kind !== 'string' || !PROVIDER_NAME.test(p.kind)) throw bad(`provider ${p.name}: kind must match the name rule`);
    if (typeof p.socket_path !== 'string' || p.socket_path.length === 0) throw bad(`provider ${p.name}: socket_path must be a string`);
    const caps = p.capabilities as unknown as Record<string, unknown> | undefined;
    if (!caps || typeof caps !== 'object' || REQUIRED_CAPABILITIES.some((f) => typeof caps[f] !== 'boolean')) {
      throw bad(`provider ${p.name}: capabilities must set ${REQUIRED_CAPABILITIES.join(' and ')} to a boolean`);
    }
    const wrong = OPTIONAL_CAPABILITIES.filter((f) => caps[f] !== undefined && typeof caps[f] !== 'boolean');
    if (wrong.length) throw bad(`provider ${p.name}: capabilities ${wrong.join(', ')} must be booleans when set`);
    // every operation documents its args and its result: the bus validates the one, the API document shows both
    let ops: Record<string, unknown>;
    try {
      ops = servedOperations(p);
    } catch (err) {
      throw bad(`provider ${p.name}: operations() failed: ${(err as Error)?.message ?? err}`);
    }
    for (const [name, op] of Object.entries(ops)) {
      const problem = OPERATION_SHORT.test(name) ? operationProblem(op as Record<string, unknown>) : 'its name must match ^[a-z][a-z0-9_]{0,62}$';
      if (problem) throw bad(`provider ${p.name}: operation ${name}: ${problem}`);
    }
  }
}

const OPERATION_SHORT = /^[a-z][a-z0-9_]{0,62}$/;

/** What is wrong with an operation's declaration (null: nothing). */
function operationProblem(op: Record<string, unknown> | null): string | null {
  if (!op || typeof op !== 'object') return 'must be an object';
  if (!Joi.isSchema(op.schema) || (op.schema as Joi.Schema).type !== 'object') return 'schema must be a joi object schema of its args';
  if (!Joi.isSchema(op.result)) return 'result must be a joi schema of what it answers';
  if (op.permission !== null && (typeof op.permission !== 'string' || !op.permission)) return 'permission must be a string or null';
  if (typeof op.run !== 'function') return 'run must be a function';
  const http = op.http as { method?: unknown; summary?: unknown } | undefined;
  if (http !== undefined && ((http.method !== 'GET' && http.method !== 'POST') || typeof http.summary !== 'string')) {
    return 'http must name GET or POST and a summary';
  }
  return null;
}

async function availableWithin(provider: SocketProvider, ms: number): Promise<{ available: boolean; reason: string | null }> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const available = await Promise.race([
      provider.isAvailable().then((v) => v === true),
      new Promise<null>((resolve) => {
        timer = setTimeout(() => resolve(null), ms);
      }),
    ]);
    if (available === null) return { available: false, reason: `no answer within ${ms / 1000} s` };
    return { available, reason: available ? null : (provider.unavailable_reason ?? 'the provider reports that it is unavailable') };
  } catch (err) {
    return { available: false, reason: `availability check failed: ${(err as Error)?.message ?? err}` };
  } finally {
    if (timer) clearTimeout(timer);
  }
}
