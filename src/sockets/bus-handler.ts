import Joi from 'joi';
import type { EventBus } from '../bus/bus.js';
import type { SocketRequestPayload, SocketResponsePayload } from '../bus/events.js';
import type { Logger } from '../log.js';
import { fullCapabilities, isChange, isPrivileged, servedOperations, type ProviderOperation, type TypedArgs } from './base-provider.js';
import { SocketError } from './errors.js';
import { checkPathsSchema, repairSchema, type MountGuardian } from './mount-guardian.js';
import type { SocketRegistry } from './registry.js';
import { mountCheckResult, providerListResult, repairResult } from './schemas.js';
import { DomainError, fieldErrorsOf, fieldErrorsText } from '../errors.js';
import { reachesHost } from '../iam/policy.js';

/** A privileged socket operation as the audit trail records it (the composition root hands it on). */
export interface SocketAuditEntry {
  /** the caller; TRUSTED_CALLER for a request on the bus (a plugin or the core itself) */
  caller: SocketCaller | null;
  trusted: boolean;
  operation: string;
  provider: string | null;
  outcome: 'success' | 'failure' | 'denied';
  /** the args' shape, never their secrets: the validated args of the operation */
  args: Record<string, unknown>;
  error: { code: string; message: string } | null;
}

/** a refusal of policy: in the trail whether the operation reads or changes */
const DENIALS: ReadonlySet<string> = new Set(['forbidden', 'step_up_required', 'not_allowed', 'forbidden_zone']);

interface Privileged {
  args: Record<string, unknown>;
  change: boolean;
}

/** Who asks. null = no identity: only operations without a permission are allowed. */
export interface SocketCaller {
  allows(permission: string): boolean;
}

/** The in-process bus is trusted; plugins reach it through their context, which narrows them (src/plugins/context.ts). */
export const TRUSTED_CALLER: SocketCaller = { allows: () => true };

export type SocketRequestHandler = (request: unknown, caller: SocketCaller | null) => Promise<SocketResponsePayload>;

const envelopeSchema = Joi.object({
  request_id: Joi.string().min(1).max(200).required(),
  operation: Joi.string().min(1).max(200).required(),
  provider: Joi.string().min(1).max(64),
  args: Joi.object().unknown(true).default({}),
}).unknown(true);

const OPERATION_NAME = /^([a-z][a-z0-9_-]{0,62}):([a-z][a-z0-9_]{0,62})$/;
const ARGS_OPTIONS: Joi.ValidationOptions = { abortEarly: false, convert: false, allowUnknown: false };

/** A registry operation: the capability a named provider must declare for it, and the provider named. */
interface BuiltinOperation<A = unknown> extends ProviderOperation<A> {
  capability?: 'can_verify_mounts' | 'can_repair_permissions';
  run(args: A, provider?: string): Promise<unknown>;
}

/** A registry operation whose `run` takes the args as its schema types them. */
function builtin<A>(op: BuiltinOperation<A> & TypedArgs<A>): BuiltinOperation {
  return op;
}

/**
 * Serves socket:request for every registered provider plus the registry-level operations
 * provider:list, mounts:check and mounts:repair. Used by the bus (trusted), and by the ws gateway
 * and HTTP routes with the caller's permissions. Never throws: every failure is a response.
 */
export class SocketRequests {
  /** the operations of the registry itself, made once */
  private readonly builtins: Record<string, BuiltinOperation>;

  constructor(
    private readonly deps: {
      registry: SocketRegistry;
      mountGuardian?: MountGuardian;
      logger: Logger;
      /**
       * Before an operation needing these permissions runs for this caller: throws (a
       * `step_up_required` DomainError) when the caller's session must verify its second factor
       * again (the composition root decides which permissions need it: those reaching the host).
       */
      stepUp?: (caller: SocketCaller | null, permissions: readonly string[]) => Promise<void>;
      /** every operation that needs a permission, done, failed or refused (the audit trail's socket.operation) */
      record?: (entry: SocketAuditEntry) => void;
    },
  ) {
    this.builtins = this.builtinOperations();
  }

  /** Serves one request; a privileged operation (one with a permission) is recorded, whatever came of it. */
  readonly handle: SocketRequestHandler = async (request, caller) => {
    const response = await this.serve(request, caller);
    const op = this.privileged.get(response);
    if (op && this.deps.record) {
      const denied = DENIALS.has(response.error?.code ?? '');
      // a read is in the trail when it was refused; a change whatever came of it
      if (!denied && !op.change) return response;
      this.deps.record({
        caller,
        trusted: caller === TRUSTED_CALLER,
        operation: response.operation,
        provider: response.provider,
        outcome: response.ok ? 'success' : denied ? 'denied' : 'failure',
        args: op.args,
        error: response.error ? { code: response.error.code, message: response.error.message } : null,
      });
    }
    return response;
  };

  /** Was this response recorded (a privileged operation's, whatever came of it)? The transport answering it records nothing more. */
  recorded(response: SocketResponsePayload): boolean {
    const op = this.privileged.get(response);
    return Boolean(this.deps.record) && Boolean(op) && (op!.change || DENIALS.has(response.error?.code ?? ''));
  }

  /** the responses of privileged operations, with their args and whether they change something, for handle() to record */
  private readonly privileged = new WeakMap<object, Privileged>();

  private readonly serve: SocketRequestHandler = async (request, caller) => {
    const raw = (typeof request === 'object' && request !== null ? request : {}) as Record<string, unknown>;
    const base = {
      request_id: typeof raw.request_id === 'string' ? raw.request_id.slice(0, 200) : '',
      operation: typeof raw.operation === 'string' ? raw.operation.slice(0, 200) : '',
      provider: null as string | null,
    };
    // set once the operation turns out to need a permission: what handle() records
    let privileged: Privileged | null = null;
    const mark = (response: SocketResponsePayload): SocketResponsePayload => {
      if (privileged) this.privileged.set(response, privileged);
      return response;
    };
    const fail = (code: string, message: string, details?: unknown): SocketResponsePayload =>
      mark({
        ...base,
        ok: false,
        result: null,
        error: details === undefined ? { code, message } : { code, message, details },
      });

    const { value, error } = envelopeSchema.validate(request, { convert: false, abortEarly: false });
    if (error) {
      const problems = fieldErrorsOf(error);
      return fail('invalid_args', fieldErrorsText(problems), problems);
    }
    const req = value as Required<Pick<SocketRequestPayload, 'request_id' | 'operation' | 'args'>> & { provider?: string };

    const m = OPERATION_NAME.exec(req.operation);
    if (!m) return fail('unknown_operation', `unknown operation ${req.operation}`);
    const [, kind, short] = m;

    let op: ProviderOperation | undefined;
    let providerName: string | null = null;
    let needsAvailable: (() => Promise<boolean>) | null = null;
    const builtin = Object.prototype.hasOwnProperty.call(this.builtins, req.operation) ? this.builtins[req.operation] : undefined;
    if (builtin) {
      // a registry-level operation may name a provider: it must exist and be able to do what is
      // asked (provider:list then lists that one); the answer says which
      if (req.provider !== undefined) {
        const named = this.deps.registry.get(req.provider);
        if (!named) return fail('unknown_provider', `no socket provider named ${req.provider}`);
        if (builtin.capability && !fullCapabilities(named.capabilities)[builtin.capability]) {
          const problem = { field: 'provider', message: `${req.provider} does not declare ${builtin.capability}` };
          return fail('invalid_args', `provider: ${problem.message}`, [problem]);
        }
        base.provider = req.provider;
      }
      op = { ...builtin, run: (args) => builtin.run(args, req.provider) };
    } else {
      providerName = req.provider ?? kind;
      base.provider = providerName;
      const provider = this.deps.registry.get(providerName);
      if (!provider) return fail('unknown_provider', `no socket provider named ${providerName}`);
      const ops = provider.kind === kind ? servedOperations(provider) : {};
      op = Object.prototype.hasOwnProperty.call(ops, short) ? ops[short] : undefined;
      if (op && op.requires_available !== false) needsAvailable = () => provider.isAvailable();
    }
    if (!op) return fail('unknown_operation', `unknown operation ${req.operation}${providerName ? ` for provider ${providerName}` : ''}`);

    // until the args are validated only their names are recorded: a refused request's raw args are anyone's
    if (isPrivileged(op)) privileged = { args: { fields: Object.keys(req.args ?? {}).slice(0, 50) }, change: isChange(op) };
    if (op.permission !== null && !allows(caller, op.permission)) return fail('forbidden', `missing permission ${op.permission}`);

    // everything that asks the operation's own code (its schema, audited, permissionsFor, run) is
    // inside: a provider's mistake is a `failed` answer, never a rejection of handle()
    try {
      const checked = op.schema.validate(req.args, ARGS_OPTIONS);
      const change = !checked.error && isChange(op, checked.value);
      if (privileged && !checked.error) privileged = { args: op.audited ? op.audited(checked.value) : { fields: Object.keys(checked.value ?? {}) }, change };
      if (checked.error) {
        const problems = fieldErrorsOf(checked.error);
        return fail('invalid_args', fieldErrorsText(problems), problems);
      }
      const further = op.permissionsFor?.(checked.value) ?? [];
      for (const permission of further) {
        if (!allows(caller, permission)) return fail('forbidden', `missing permission ${permission}`);
      }
      // a change needs a recent second factor (the composition root decides for which permissions); a read does not
      const needed = [...(op.permission !== null ? [op.permission] : []), ...further];
      if (this.deps.stepUp && caller !== TRUSTED_CALLER && change && needed.length) {
        try {
          await this.deps.stepUp(caller, needed);
        } catch (err) {
          if (err instanceof DomainError && err.code === 'step_up_required') return fail('step_up_required', err.message, err.details);
          // the check itself failed (the session store away): the operation is not run
          this.deps.logger.error({ err, operation: req.operation, provider: providerName }, 'socket operation: the step-up check failed');
          return fail('failed', 'the step-up check failed');
        }
      }

      if (needsAvailable && !(await needsAvailable())) {
        // a caller holding the operation's permission may read why not (the reason names the daemon's socket); an open read's may not
        const why = isPrivileged(op) ? this.deps.registry.get(providerName!)?.unavailable_reason : null;
        return fail('unavailable', `socket provider ${providerName} is not available${why ? `: ${why}` : ''}`);
      }
      const answer = await op.run(checked.value);
      const result = op.shownTo && caller !== TRUSTED_CALLER ? op.shownTo(answer, (p) => allows(caller, p)) : answer;
      return mark({ ...base, ok: true, result, error: null });
    } catch (err) {
      if (err instanceof SocketError) return fail(err.code, err.message, err.details);
      const logger = providerName ? this.deps.registry.loggerOf(providerName) : this.deps.logger;
      logger.error({ err, operation: req.operation, provider: providerName }, 'socket operation failed');
      return fail('failed', 'socket operation failed');
    }
  };

  /** Answers socket:request on the bus with socket:response; returns a function that detaches it. */
  attachBus(bus: EventBus): () => void {
    return bus.on('socket:request', async (payload) => {
      const response = await this.handle(payload, TRUSTED_CALLER);
      bus.emit('socket:response', response);
    });
  }

  /**
   * Does a caller (its `may`) administer some host service: repairing mounts, or any permission
   * of a registered provider's operations that reaches the host? Host facts in reads open to
   * anyone are theirs only. (A plugin's provider may guard an operation with a permission of its
   * own, `plugin:<id>:...`, which readers hold: that administers nothing.)
   */
  private administersHost(may: (permission: string) => boolean): boolean {
    if (may('socket:mounts:repair')) return true;
    for (const name of this.deps.registry.names()) {
      try {
        if (
          this.deps.registry
            .get(name)
            ?.permissions()
            .some((p) => reachesHost(p.id) && may(p.id))
        )
          return true;
      } catch {
        continue;
      }
    }
    return false;
  }

  /** The operations of the registry itself; `provider` (checked) narrows provider:list to that one. */
  private builtinOperations(): Record<string, BuiltinOperation> {
    const ops: Record<string, BuiltinOperation> = {
      'provider:list': builtin({
        schema: Joi.object<Record<string, never>, true>({}),
        permission: null,
        run: async (_args, provider) => {
          const providers = (await this.deps.registry.list()).filter((p) => provider === undefined || p.name === provider);
          // which instance answered: each one lists the providers of its own host
          return {
            providers,
            available: providers.filter((p) => p.available).map((p) => p.name),
            total: providers.length,
            instance: this.deps.registry.instance,
          };
        },
        result: providerListResult,
        // where a daemon's socket lives is for those who administer a host service
        shownTo: (r, may) => {
          if (this.administersHost(may)) return r;
          const list = r as { providers: Array<Record<string, unknown>> };
          // a reason names sockets and paths: only whether it is available is anyone's
          const providers = list.providers.map((p) => ({ ...p, socket_path: '', reason: p.available ? null : 'not available' }));
          return { ...list, providers, host_facts_hidden: true };
        },
      }),
    };
    const guardian = this.deps.mountGuardian;
    if (guardian) {
      ops['mounts:check'] = builtin({
        schema: Joi.object<{ paths: string[] }, true>({ paths: checkPathsSchema.required() }),
        permission: null,
        capability: 'can_verify_mounts',
        run: (a) => guardian.check(a.paths),
        result: mountCheckResult,
        // whether the paths are healthy is anyone's (the specification's open read); their owners and modes are not
        shownTo: (r, may) => {
          if (this.administersHost(may)) return r;
          const check = r as { mounts: Record<string, Record<string, unknown>> };
          const mounts = Object.fromEntries(Object.entries(check.mounts).map(([p, s]) => [p, { ...s, owner_uid: null, mode: null }]));
          return { ...check, mounts, host_facts_hidden: true };
        },
      });
      ops['mounts:repair'] = builtin({
        schema: repairSchema,
        permission: 'socket:mounts:repair',
        capability: 'can_repair_permissions',
        run: ({ target_dir, ...options }) => guardian.repair(target_dir, options),
        // a path, a mode, ids and a flag: nothing secret
        audited: (a) => ({ ...a }),
        result: repairResult,
      });
    }
    return ops;
  }
}

function allows(caller: SocketCaller | null, permission: string): boolean {
  try {
    return caller !== null && caller.allows(permission) === true;
  } catch {
    return false;
  }
}
