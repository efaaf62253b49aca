import { promises as fsp } from 'node:fs';
import Joi from 'joi';
import type { Logger } from '../../log.js';
import { operation, SocketProvider, type ProviderCapabilities, type ProviderOperation } from '../base-provider.js';
import { SocketError } from '../errors.js';
import { GrpcChannel, GrpcFailure } from './client.js';
import type { GrpcSpec } from './config.js';
import { METHOD_NAME } from './protos.js';
import { checkRequest, type FieldProblem } from './request-check.js';

export interface GrpcProviderOptions {
  spec: GrpcSpec;
  /** every call's deadline (config.hostServices.timeoutMs) */
  timeoutMs: number;
  /** how long an availability answer is kept (default 2 s) */
  availabilityTtlMs?: number;
}

export interface CallArgs {
  method: string;
  request: Record<string, unknown>;
  metadata?: Record<string, string>;
}

/** The permission that calling `method` of the daemon `name` asks for (DESIGN 13). */
export function methodPermission(name: string, method: string): string {
  return `socket:grpc:${name}:${method}`;
}

/** the longest an availability probe waits (provider:list bounds each provider by 3 s) */
const PROBE_TIMEOUT_MS = 2500;

const healthResult = Joi.object({
  available: Joi.boolean().required(),
  methods: Joi.array().items(Joi.string()).required().description('the methods callers may call, each `package.Service/Method`'),
});

const callResult = Joi.object({
  response: Joi.object()
    .unknown(true)
    .required()
    .description("the method's answer as JSON: fields by their .proto names, every field present, 64-bit integers and enums as strings, bytes in base64"),
});

/**
 * A gRPC daemon on a UNIX socket (src/sockets/grpc/config.ts describes its file): `<name>:health`
 * and `<name>:call {method, request, metadata?}` for the methods configured, each with its own
 * permission (`socket:grpc:<name>:<package.Service>/<Method>`); a change method needs step-up, a
 * read does not. The registry makes one instance per class, so index.ts registers a subclass per daemon.
 */
export class GrpcProvider extends SocketProvider {
  readonly name: string;
  readonly socket_path: string;
  readonly capabilities: ProviderCapabilities = { can_verify_mounts: false, can_repair_permissions: false };
  private readonly spec: GrpcSpec;
  private readonly channel: GrpcChannel;
  private readonly availabilityTtlMs: number;

  constructor(options: Record<string, unknown>, logger?: Logger) {
    super(options, logger);
    const o = options as unknown as GrpcProviderOptions;
    if (!o.spec) throw new Error('a gRPC provider is made from a configured daemon (readProvidersFile)');
    this.spec = o.spec;
    this.name = o.spec.name;
    this.socket_path = o.spec.socket;
    this.availabilityTtlMs = o.availabilityTtlMs ?? 2000;
    this.channel = new GrpcChannel(o.spec.socket, o.timeoutMs);
  }

  /** the methods callers may call, in the file's order */
  get methods(): string[] {
    return [...this.spec.methods.keys()];
  }

  /** As the base's shareProbe says: a daemon found away is asked again at once. */
  override isAvailable(): Promise<boolean> {
    return this.shareProbe(this.availabilityTtlMs, () => this.probe());
  }

  /** Is the socket there, and does the daemon answer (its probe method, or a connection)? */
  private async probe(): Promise<void> {
    let reason: string | null = null;
    const st = await fsp.stat(this.socket_path).catch(() => null);
    if (!st) reason = `no socket at ${this.socket_path}`;
    else if (!st.isSocket()) reason = `${this.socket_path} is not a socket`;
    else if (this.spec.probe) {
      const probe = this.spec.methods.get(this.spec.probe)!.method;
      try {
        await this.channel.call(probe, {}, this.defaults(), Math.min(PROBE_TIMEOUT_MS, this.timeoutMs));
      } catch (err) {
        // any answer of the daemon, even a refusal, says it is there
        if (!(err instanceof GrpcFailure) || err.away) reason = `the daemon at ${this.socket_path} did not answer ${this.spec.probe}`;
      }
    } else if (!(await this.channel.connects(Math.min(PROBE_TIMEOUT_MS, this.timeoutMs)))) {
      reason = `the daemon at ${this.socket_path} did not accept a connection`;
    }
    this.seen(reason);
  }

  /** Does the daemon answer now (its probe method, or a connection), within a second at most? */
  private async answers(): Promise<boolean> {
    const within = Math.min(1000, this.timeoutMs);
    if (!this.spec.probe) return this.channel.connects(within);
    try {
      await this.channel.call(this.spec.methods.get(this.spec.probe)!.method, {}, this.defaults(), within);
      return true;
    } catch (err) {
      return err instanceof GrpcFailure && !err.away;
    }
  }

  private get timeoutMs(): number {
    return (this.options as unknown as GrpcProviderOptions).timeoutMs;
  }

  override async health_check(): Promise<Record<string, unknown>> {
    return { available: await this.isAvailable(), methods: this.methods };
  }

  override permissions(): Array<{ id: string; description: string }> {
    return [...this.spec.methods].map(([method, { kind }]) => ({
      id: methodPermission(this.name, method),
      description: `Call ${method} on the gRPC daemon ${this.name} (${kind === 'change' ? 'a change' : 'a read'})`,
    }));
  }

  /** made once per provider (its args depend on the configured methods and metadata): the bus handler asks at every request */
  private ops: Record<string, ProviderOperation> | null = null;

  operations(): Record<string, ProviderOperation> {
    this.ops ??= this.makeOperations();
    return this.ops;
  }

  private makeOperations(): Record<string, ProviderOperation> {
    const methods = this.spec.methods;
    return {
      health: operation({
        schema: Joi.object<Record<string, never>, true>({}),
        permission: null,
        requires_available: false,
        changes: false,
        result: healthResult,
        http: {
          method: 'GET',
          summary: `Whether the gRPC daemon ${this.name} answers, and the methods callers may call`,
          response: 'availability and methods',
        },
        run: () => this.health_check(),
      }),
      call: operation({
        schema: Joi.object<CallArgs, true>({
          method: Joi.string()
            .max(400)
            .pattern(METHOD_NAME, 'package.Service/Method')
            .required()
            .description('`package.Service/Method`, one of the methods of health'),
          request: Joi.object().unknown(true).default({}).description("the method's request message as JSON, fields by their .proto names"),
          metadata: this.metadataSchema(),
        }),
        permission: null,
        // the method's own permission; a method off the list asks for none and is refused by run (not_allowed)
        permissionsFor: (a) => (methods.has(a.method) ? [methodPermission(this.name, a.method)] : []),
        changes: (a) => methods.get(a.method)?.kind === 'change',
        // the daemon being away is the call's own answer (unavailable), after the method and request are checked
        requires_available: false,
        // never the request's values: they may hold secrets
        audited: (a) => ({ method: a.method, request_fields: Object.keys(a.request ?? {}), metadata: Object.keys(a.metadata ?? {}) }),
        result: callResult,
        http: {
          method: 'POST',
          summary: `Call a method of the gRPC daemon ${this.name}`,
          description: `The method must be one of those configured (else 403 not_allowed) and the caller must hold socket:grpc:${this.name}:<package.Service>/<Method>; a change method needs step-up. The request is checked against the method's message type (400 naming request.<field>).`,
          response: "the method's answer",
          responses: {
            400: "validation_failed: method is not package.Service/Method, a request field is not of the method's message type (request.<field>), metadata is not allowed or does not match its pattern (metadata.<key>), or the daemon refused the request (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE)",
            403: 'not_allowed: the method is not one of those configured; forbidden: the caller lacks its permission; step_up_required: a change method, verify the second factor again',
            404: 'not_found: the daemon answered NOT_FOUND',
            409: 'conflict: the daemon answered ALREADY_EXISTS or ABORTED',
            501: 'unsupported: the daemon does not implement the method (UNIMPLEMENTED)',
            502: 'failed: the daemon answered with a status this service has no code for, or its answer to this call could not be read within the deadline while it answers other calls',
            503: 'unavailable: the daemon did not answer within the deadline (SERVICE_HOST_SERVICE_TIMEOUT_MS), or is away',
          },
        },
        run: (a) => this.call(a),
      }),
    };
  }

  /** only the configured keys, each value matching its pattern */
  private metadataSchema(): Joi.ObjectSchema<Record<string, string>> {
    const keys = Object.fromEntries(
      [...this.spec.metadata].map(([key, rule]) => [
        key,
        Joi.string().max(1024).pattern(rule.pattern, `${key} value`).description(`must match ${rule.pattern.source}`),
      ]),
    );
    return Joi.object<Record<string, string>>(keys).description(`request metadata: only ${[...this.spec.metadata.keys()].join(', ') || 'none'}`);
  }

  /** the metadata defaults of the file */
  private defaults(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [key, rule] of this.spec.metadata) if (rule.default !== null) out[key] = rule.default;
    return out;
  }

  /** Calls a configured method with a checked request. */
  async call(args: CallArgs): Promise<{ response: Record<string, unknown> }> {
    const entry = this.spec.methods.get(args.method);
    if (!entry) throw new SocketError('not_allowed', `${args.method} is not a method callers may call on ${this.name}`);
    const problems: FieldProblem[] = checkRequest(entry.method.requestType, args.request ?? {});
    const metadata = { ...this.defaults(), ...(args.metadata ?? {}) };
    for (const [key, rule] of this.spec.metadata) {
      if (rule.required && metadata[key] === undefined) problems.push({ field: `metadata.${key}`, message: 'is required' });
    }
    if (problems.length) throw new SocketError('invalid_args', problems.map((p) => `${p.field}: ${p.message}`).join('; '), problems);
    try {
      const response = await this.channel.call(entry.method, args.request ?? {}, metadata);
      this.seen(null);
      return { response };
    } catch (err) {
      if (!(err instanceof GrpcFailure)) throw err;
      if (err.timedOut && (await this.answers())) {
        // the daemon answers, this call's answer never came: one too large to read (HTTP/2 drops
        // trailers over 64 KiB, e.g. an error quoting a very long request value), not the daemon away
        this.seen(null);
        throw new SocketError('failed', `${this.name} gave no answer to ${args.method} that could be read within the deadline, though it answers other calls`);
      }
      if (err.away) this.seen(`the daemon at ${this.socket_path} did not answer ${args.method}`);
      else this.seen(null);
      throw err.toSocketError(this.name, args.method);
    }
  }

  override async close(): Promise<void> {
    this.channel.close();
  }
}
