import type Joi from 'joi';
import type { Logger } from '../log.js';

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
 * An operation served over HTTP too, at `/api/socket/<provider name>/<operation>` (an `_` in the
 * operation's name becomes `-`): GET takes the args from the query string, POST from the JSON
 * body. The route and its OpenAPI entry are derived from the operation: same rule, same
 * permission, same answer as over the bus and ws.
 */
export interface OperationHttp {
  method: 'GET' | 'POST';
  summary: string;
  description?: string;
  /** what a 200 answers, in words (its shape is the operation's `result`) */
  response?: string;
}

/**
 * One operation a provider serves over socket:request (and the HTTP/ws layers).
 * `args` reaches `run` only after `schema` validated (and defaulted) it: A is the type the schema
 * declares (`Joi.object<A, true>({...})`); write a typed operation with operation() below.
 */
export interface ProviderOperation<A = unknown> {
  /** joi schema of the args object */
  schema: Joi.ObjectSchema<A>;
  /** permission the caller needs; null = a read that any caller (even anonymous) may do */
  permission: string | null;
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
   * its HTTP route documents (every key the result may leave out says `.optional()`)
   */
  result?: Joi.Schema<unknown>;
  /** also an HTTP route (see OperationHttp); without it, bus and ws only */
  http?: OperationHttp;
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
  abstract health_check(): Promise<Record<string, unknown>>;

  /** Operations by short name (e.g. 'health' serves `<kind>:health`). */
  abstract operations(): Record<string, ProviderOperation>;

  /** Releases resources; called when the provider is unregistered. */
  async close(): Promise<void> {}
}

/** A class the registry accepts: derives from SocketProvider and is not abstract. */
export type SocketProviderClass = new (options: Record<string, unknown>, logger: Logger) => SocketProvider;
