import Joi from 'joi';
import type { Logger } from '../log.js';
import { SocketError } from './errors.js';

/**
 * What a provider can do. The two required flags are explicit for every provider; the others
 * describe a container daemon and default to false when a provider leaves them out.
 */
export interface ProviderCapabilities {
  can_verify_mounts: boolean;
  can_repair_permissions: boolean;
  can_spawn?: boolean;
  can_cleanup?: boolean;
  can_query_mounts?: boolean;
}

export const REQUIRED_CAPABILITIES = ['can_verify_mounts', 'can_repair_permissions'] as const;
export const OPTIONAL_CAPABILITIES = ['can_spawn', 'can_cleanup', 'can_query_mounts'] as const;

/** Every flag as a boolean (the optional ones false unless set), and nothing else a provider added. */
export function fullCapabilities(caps: ProviderCapabilities): Required<ProviderCapabilities> {
  return {
    can_verify_mounts: caps.can_verify_mounts,
    can_repair_permissions: caps.can_repair_permissions,
    can_spawn: caps.can_spawn ?? false,
    can_cleanup: caps.can_cleanup ?? false,
    can_query_mounts: caps.can_query_mounts ?? false,
  };
}

/**
 * How an operation is served over HTTP, at `/api/socket/<provider name>/<operation>` (an `_` in
 * the operation's name becomes `-`): GET (a read) takes the args from the query string, POST (a
 * change) from the JSON body. The route and its OpenAPI entry are derived from the operation:
 * same rule, same permission, same answer as over the bus and ws. Every operation has a route;
 * one that declares no `http` gets GET for a read and POST for a change, named by itself.
 */
export interface OperationHttp {
  method: 'GET' | 'POST';
  summary: string;
  description?: string;
  /** what a 200 answers, in words (its shape is the operation's `result`) */
  response?: string;
  /**
   * The other answers it may give, by status, in words starting with the code (docs/sockets.md):
   * `{409: 'conflict: the name is taken', 403: 'forbidden_zone: ...'}`. 400, 401, 403 for the
   * permission, 502 and 503 are documented for every operation.
   */
  responses?: Record<number, string>;
}

/**
 * One operation a provider serves over socket:request (and the HTTP/ws layers).
 * `args` reaches `run` only after `schema` validated (and defaulted) it: A is the type the schema
 * declares (`Joi.object<A, true>({...})`); write a typed operation with operation() below.
 */
export interface ProviderOperation<A = unknown> {
  /** joi schema of the args object */
  schema: Joi.ObjectSchema<A>;
  /** permission the caller needs; null = a read that any caller (even anonymous) may do (unless permissionsFor asks for one) */
  permission: string | null;
  /**
   * Does it change something on the host (a change needs step-up from a web session with a
   * second factor, and is in the audit trail whatever came of it; a read only when refused)?
   * A function decides by the validated args (a gRPC method). Absent: a POST route is a change,
   * a GET route a read; without `http`, an operation that needs a permission is a change.
   */
  changes?: boolean | ByArgs<A>;
  /** false: run even when the provider is unavailable (e.g. health reports the outage itself) */
  requires_available?: boolean;
  /** further permissions that these (validated) args need, e.g. a read-write mount */
  permissionsFor?(args: A): string[];
  run(args: A): Promise<unknown>;
  /**
   * What the audit trail keeps of the validated args of a privileged operation: an allow-list,
   * with names, counts or digests where a value could hold a secret (an environment, a command
   * line, a label). Absent: the names of the args only.
   */
  audited?(args: A): Record<string, unknown>;
  /**
   * What a caller sees of the result, by the permissions it holds (`may`): a read open to
   * anyone that shows host paths only to those who administer the provider. Absent: the result
   * as it is. The core's own requests on the bus see everything.
   */
  shownTo?(result: unknown, may: (permission: string) => boolean): unknown;
  /**
   * joi schema of what `run` resolves to: the `result` of its socket:response, and the 200 body
   * its HTTP route documents (every key the result may leave out says `.optional()`); the
   * registry refuses an operation without one
   */
  result: Joi.Schema<unknown>;
  /** its HTTP route (see OperationHttp); absent: derived (GET for a read, POST for a change) */
  http?: OperationHttp;
}

/** a function of the validated args, written as a method so that an operation of any args is a ProviderOperation */
type ByArgs<A> = { decide(args: A): boolean }['decide'];

/** Is this call of `op` (its validated args) a change (see ProviderOperation.changes)? */
export function isChange<A>(op: ProviderOperation<A>, args?: A): boolean {
  if (typeof op.changes === 'function') return args === undefined ? true : op.changes(args);
  if (typeof op.changes === 'boolean') return op.changes;
  if (op.http) return op.http.method === 'POST';
  return op.permission !== null || Boolean(op.permissionsFor);
}

/** The HTTP route of an operation: its own, or GET for a read and POST for a change. */
export function httpOf(kind: string, name: string, op: ProviderOperation): OperationHttp {
  return op.http ?? { method: isChange(op) ? 'POST' : 'GET', summary: `${kind}:${name}` };
}

/** Does the operation ask for a permission (its own, or one its args name)? Refusals and changes of these are audited. */
export function isPrivileged(op: ProviderOperation): boolean {
  return op.permission !== null || Boolean(op.permissionsFor);
}

/** Refuses a schema that declares no type (a plain `Joi.object({...})` is `ObjectSchema<any>`): `run` would take `any`. */
export type TypedArgs<A> = 0 extends 1 & A ? { schema: 'untyped args schema: write Joi.object<T, true>({...})' } : unknown;

/** An operation whose `run` and `permissionsFor` take the args as its schema types them (see TypedArgs). */
export function operation<A>(op: ProviderOperation<A> & TypedArgs<A>): ProviderOperation<A> {
  return op;
}

/**
 * Base type of every socket provider. The registry instantiates a subclass once as
 * `new Subclass(options, logger)`.
 */
export abstract class SocketProvider {
  abstract readonly name: string;
  abstract readonly socket_path: string;
  abstract readonly capabilities: ProviderCapabilities;

  /** last availability seen by isAvailable(); false until the first check */
  protected lastAvailable = false;
  /** why the last check found the provider unavailable, in words for an administrator */
  protected lastUnavailableReason: string | null = null;

  constructor(
    readonly options: Record<string, unknown> = {},
    protected readonly log?: Logger,
  ) {}

  /**
   * Prefix of this provider's operation names (`<kind>:<operation>`). Defaults to the name;
   * a second provider of the same kind (e.g. another container daemon) may return the same kind.
   */
  get kind(): string {
    return this.name;
  }

  /** Last known availability, without asking the socket. */
  get is_available(): boolean {
    return this.lastAvailable;
  }

  /** Why the last check failed (null when available or not said). */
  get unavailable_reason(): string | null {
    return this.lastAvailable ? null : this.lastUnavailableReason;
  }

  /** Asks the socket (implementations may cache briefly) and remembers the answer. */
  abstract isAvailable(): Promise<boolean>;

  /** when the daemon was last found answering or away (seen()) */
  private seenAt = 0;
  private probing: Promise<boolean> | null = null;

  /**
   * The availability rule of the host services: a daemon found answering is taken at its word
   * for `ttlMs`; one found away is asked again at once (a request right after it came back is
   * served); callers meanwhile share one probe. `probe` asks the daemon and says what it found
   * with seen(); what it throws counts as away.
   */
  protected shareProbe(ttlMs: number, probe: () => Promise<unknown>): Promise<boolean> {
    if (this.lastAvailable && Date.now() - this.seenAt < ttlMs) return Promise.resolve(true);
    this.probing ??= probe()
      .catch((err: unknown) => this.seen(`${this.name}: ${(err as Error)?.message ?? err}`))
      .then(() => this.lastAvailable)
      .finally(() => {
        this.probing = null;
      });
    return this.probing;
  }

  /** What a probe or a call found: the daemon answering (null), or away and why (for its administrators). */
  protected seen(reason: string | null): void {
    this.lastAvailable = reason === null;
    this.lastUnavailableReason = reason;
    this.seenAt = Date.now();
  }

  /*
   * The four operations every provider answers (the specification's base contract), as
   * `<kind>:health`, `<kind>:cleanup`, `<kind>:mounts` and `<kind>:storage_root`. The base
   * answers `unsupported` for each one a provider does not serve; a provider that serves one
   * overrides the method and declares its operation (with its args, permission and result).
   */
  async health_check(): Promise<Record<string, unknown>> {
    throw unsupported(this, 'health');
  }

  async cleanup_stale(..._args: unknown[]): Promise<unknown> {
    throw unsupported(this, 'cleanup');
  }

  async get_mounts(): Promise<unknown> {
    throw unsupported(this, 'mounts');
  }

  async detect_storage_root(): Promise<string | null> {
    throw unsupported(this, 'storage_root');
  }

  /** Operations by short name (e.g. 'health' serves `<kind>:health`); the required four are added by servedOperations(). */
  abstract operations(): Record<string, ProviderOperation>;

  /**
   * The permissions this provider's operations ask for, for the permission catalog (what an
   * administrator may grant). Default: each operation's own permission, described by its summary.
   */
  permissions(): Array<{ id: string; description: string }> {
    const out = new Map<string, string>();
    for (const [name, op] of Object.entries(servedOperations(this))) {
      if (op.permission !== null && !out.has(op.permission)) out.set(op.permission, httpOf(this.kind, name, op).summary);
    }
    return [...out].map(([id, description]) => ({ id, description }));
  }

  /** Releases resources; called when the provider is unregistered. */
  async close(): Promise<void> {}
}

/** A class the registry accepts: derives from SocketProvider and is not abstract. */
export type SocketProviderClass = new (options: Record<string, unknown>, logger: Logger) => SocketProvider;

/** the required operations a provider leaves to the base: any args, an answer of `unsupported` */
const ANY_ARGS = Joi.object<Record<string, unknown>, true>({}).unknown(true);
const ANY_RESULT = Joi.object().unknown(true).description('the provider does not serve this operation: it answers unsupported (501)');

/** named as a caller names the operation (`dhcp:mounts`), not by the method behind it */
function unsupported(provider: SocketProvider, operation: string): SocketError {
  return new SocketError('unsupported', `socket provider ${provider.name} does not serve ${provider.kind}:${operation}`);
}

/**
 * Every operation a provider serves: the four required ones (the base's `unsupported` answer
 * where the provider declares none) and its own. The registry, the bus handler and the HTTP
 * routes all read this, never operations() alone.
 */
export function servedOperations(provider: SocketProvider): Record<string, ProviderOperation> {
  const base = (name: string, method: 'GET' | 'POST', summary: string, run: () => Promise<unknown>): ProviderOperation<Record<string, unknown>> => ({
    schema: ANY_ARGS,
    permission: null,
    requires_available: false,
    changes: false,
    result: ANY_RESULT,
    http: {
      method,
      summary: `${summary} (${provider.name} answers unsupported)`,
      response: 'never: this provider does not serve it',
      responses: { 501: `unsupported: ${provider.name} does not serve ${name}` },
    },
    run,
  });
  return {
    health: base('health', 'GET', 'Health', () => provider.health_check()),
    cleanup: base('cleanup', 'POST', 'Clean up stale resources', () => provider.cleanup_stale()),
    mounts: base('mounts', 'GET', 'Mounts', () => provider.get_mounts()),
    storage_root: base('storage_root', 'GET', 'Storage root', async () => ({ storage_root: await provider.detect_storage_root() })),
    ...provider.operations(),
  } as Record<string, ProviderOperation>;
}
