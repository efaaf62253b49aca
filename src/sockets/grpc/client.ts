import { createRequire } from 'node:module';
import type * as Grpc from '@grpc/grpc-js';
import { SocketError, type SocketErrorCode } from '../errors.js';
import { decodeAnswer, encodeRequest, type LoadedMethod } from './protos.js';

/**
 * One gRPC daemon on a UNIX socket: a channel made on first use, every call bounded by a
 * deadline. A call the daemon did not answer (away, or too slow) drops the channel: the next call
 * connects anew at once, so a daemon that comes back is reached by the very next call instead of
 * after the channel's reconnect backoff.
 */

/** the channel's own reconnect backoff, kept short: a daemon on this host restarts in seconds */
/** @grpc/grpc-js, loaded with the first channel (a service without a gRPC daemon configured never loads it) */
let grpcModule: typeof Grpc | null = null;
function grpcJs(): typeof Grpc {
  grpcModule ??= createRequire(import.meta.url)('@grpc/grpc-js') as typeof Grpc;
  return grpcModule;
}

/** gRPC's status codes (the same numbers in every implementation), by name */
const STATUS = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;
const STATUS_NAME: Record<number, string> = Object.fromEntries(Object.entries(STATUS).map(([name, code]) => [code, name]));

const CHANNEL_OPTIONS: Grpc.ClientOptions = {
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.min_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1000,
  // a channel of its own connections: a new channel must not inherit a backed-off connection from the process-wide pool
  'grpc.use_local_subchannel_pool': 1,
  // what a daemon may answer with (gRPC's default; a larger answer is failed)
  'grpc.max_receive_message_length': 4 * 1024 * 1024,
};

/** gRPC status codes that say the daemon did not answer */
const AWAY = new Set<number>([STATUS.UNAVAILABLE, STATUS.DEADLINE_EXCEEDED]);

/** what the daemon's answer means for the caller (DESIGN's codes; gRPC's own mapping to HTTP statuses) */
const CODE_BY_STATUS: Partial<Record<number, SocketErrorCode>> = {
  [STATUS.INVALID_ARGUMENT]: 'invalid_args',
  [STATUS.OUT_OF_RANGE]: 'invalid_args',
  [STATUS.NOT_FOUND]: 'not_found',
  [STATUS.ALREADY_EXISTS]: 'conflict',
  [STATUS.ABORTED]: 'conflict',
  [STATUS.FAILED_PRECONDITION]: 'invalid_args',
  [STATUS.UNIMPLEMENTED]: 'unsupported',
  [STATUS.UNAVAILABLE]: 'unavailable',
  [STATUS.DEADLINE_EXCEEDED]: 'unavailable',
};

export class GrpcChannel {
  private client: Grpc.Client | null = null;

  constructor(
    readonly socketPath: string,
    private readonly timeoutMs: number,
  ) {}

  private current(): Grpc.Client {
    const grpc = grpcJs();
    this.client ??= new grpc.Client(`unix://${this.socketPath}`, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
    return this.client;
  }

  /** Drops the channel (closed once calls still on it had their time): the next call makes a new one. */
  private drop(client: Grpc.Client): void {
    if (this.client !== client) return;
    this.client = null;
    setTimeout(() => client.close(), this.timeoutMs).unref();
  }

  /**
   * Calls a unary method; resolves with the answer as plain JSON. A gRPC failure rejects with a
   * GrpcFailure (its status, and whether the daemon answered at all).
   */
  call(method: LoadedMethod, request: Record<string, unknown>, metadata: Record<string, string>, timeoutMs = this.timeoutMs): Promise<Record<string, unknown>> {
    const client = this.current();
    const md = new (grpcJs().Metadata)();
    for (const [key, value] of Object.entries(metadata)) md.set(key, value);
    return new Promise((resolve, reject) => {
      client.makeUnaryRequest(
        method.path,
        (r: Record<string, unknown>) => encodeRequest(method.requestType, r),
        (b: Buffer) => decodeAnswer(method.responseType, b),
        request,
        md,
        { deadline: Date.now() + timeoutMs },
        (err, value) => {
          if (!err) return resolve(value ?? {});
          const failure = new GrpcFailure(err.code, err.details);
          if (failure.away) this.drop(client);
          reject(failure);
        },
      );
    });
  }

  /** Does the daemon accept a connection within `timeoutMs`? */
  connects(timeoutMs: number): Promise<boolean> {
    const client = this.current();
    return new Promise((resolve) =>
      client.waitForReady(Date.now() + timeoutMs, (err) => {
        if (err) this.drop(client);
        resolve(!err);
      }),
    );
  }

  close(): void {
    this.client?.close();
    this.client = null;
  }
}

/** A call that failed: the gRPC status and the daemon's words. */
export class GrpcFailure extends Error {
  constructor(
    readonly status: number,
    readonly details: string,
  ) {
    super(`${STATUS_NAME[status] ?? status}: ${details}`);
    this.name = 'GrpcFailure';
  }

  /** the call ran out of its deadline (the daemon frozen, or an answer that never arrived) */
  get timedOut(): boolean {
    return this.status === STATUS.DEADLINE_EXCEEDED;
  }

  /** the daemon did not answer (away, or not within the deadline) */
  get away(): boolean {
    return AWAY.has(this.status);
  }

  /**
   * The caller's error: the code that fits the status, a message naming the method and the
   * status only (the audit trail keeps messages, and the daemon's words may quote the request),
   * the daemon's words in the details.
   */
  toSocketError(provider: string, method: string): SocketError {
    const statusName = STATUS_NAME[this.status] ?? String(this.status);
    const code = CODE_BY_STATUS[this.status] ?? 'failed';
    const words = this.details.slice(0, 500);
    if (this.away) return new SocketError('unavailable', `${provider} did not answer ${method} (${statusName})`);
    if (code === 'invalid_args')
      return new SocketError(code, `${provider} refused the request of ${method} (${statusName})`, [{ field: 'request', message: words }]);
    return new SocketError(code, `${provider} answered ${method} with ${statusName}`, { grpc_status: statusName, grpc_message: words });
  }
}
