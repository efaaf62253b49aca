import { AsyncLocalStorage } from 'node:async_hooks';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import { DomainError } from '../errors.js';
import runInline, { type HashTask } from './hash-worker.js';

export const BCRYPT_COST = 10;
/** The longest password accepted anywhere; a longer one is refused before any hashing. */
export const PASSWORD_MAX = 1024;
/** bcrypt of a random value at BCRYPT_COST: compared against when a user is unknown, so timing tells nobody who exists. */
const DUMMY_HASH = '$2b$10$BNQfVp7u55aVkTTjvEw6su4r/7b6hVDm5HC0jll90gLYP/rsyhSIi';

/**
 * DUMMY_HASH at `cost`: the cost is a field of the hash, and a check against it runs that many
 * rounds whatever salt and digest follow (which then match no password), so no hash is made.
 */
export const dummyAt = (cost: number): string => DUMMY_HASH.replace(`$${BCRYPT_COST}$`, `$${String(cost).padStart(2, '0')}$`);

export interface PasswordOptions {
  /** worker threads; 0 hashes on the calling thread (the CLI and knex seeds, never the server) */
  threads?: number;
  /** checks waiting for a thread at most; one more is refused at once (503) */
  maxQueue?: number;
  cost?: number;
}

interface Waiting {
  task: HashTask;
  resolve(value: string | boolean): void;
  reject(err: unknown): void;
}

/**
 * The lane of the checks started inside `Passwords.prioritized`: it travels with the async
 * context, so the login chain and its providers between the caller and the pool need not carry it.
 */
const priorityLane = new AsyncLocalStorage<true>();

/**
 * bcrypt off the event loop: the process's worker threads (one fewer than the cores, at least
 * one, at a lower priority than the event loop: src/iam/hash-worker.ts; processPool below) with
 * a bounded queue, so a storm of logins or Basic requests with new passwords costs those callers
 * a wait or a 503, never the latency of every other request.
 *
 * Two lanes wait for a thread, each bounded by `maxQueue`: the priority lane (checks started
 * inside `prioritized()`: logins from a known device, src/auth/device-cookie.ts) is served
 * first, so a storm that fills the common lane does not reach it.
 */
export class Passwords {
  private readonly pool: Piscina<HashTask, string | boolean> | null;
  private readonly cost: number;
  /** what an unknown user's password is compared against: a hash at this pool's cost */
  private readonly dummy: string;
  private readonly maxQueue: number;
  private readonly threads: number;
  /** tasks handed to the pool: never more than its threads, so the order of the lanes holds */
  private running = 0;
  private readonly lanes: { priority: Waiting[]; common: Waiting[] } = { priority: [], common: [] };

  constructor(opts: PasswordOptions = {}) {
    this.cost = opts.cost ?? BCRYPT_COST;
    this.dummy = dummyAt(this.cost);
    this.maxQueue = opts.maxQueue ?? 64;
    const threads = opts.threads ?? Math.max(1, (os.availableParallelism?.() ?? os.cpus().length) - 1);
    this.threads = threads;
    if (threads === 0) {
      this.pool = null;
      return;
    }
    this.pool = processPool(threads);
  }

  hash(password: string): Promise<string> {
    return this.run({ op: 'hash', password, cost: this.cost }) as Promise<string>;
  }

  /** True when `password` matches `hash`; against a dummy hash when there is none (same cost either way). */
  verify(password: string, hash: string | null): Promise<boolean> {
    return this.run({ op: 'verify', password, hash: hash ?? this.dummy }).then((ok) => ok === true && hash !== null);
  }

  /** Runs `fn` with every password check it starts in the priority lane. */
  prioritized<T>(fn: () => Promise<T>): Promise<T> {
    return priorityLane.run(true, fn);
  }

  private async run(task: HashTask): Promise<string | boolean> {
    if (task.password.length > PASSWORD_MAX)
      throw new DomainError('validation_failed', `password must be at most ${PASSWORD_MAX} characters`, [
        { field: 'password', message: `must be at most ${PASSWORD_MAX} characters` },
      ]);
    if (!this.pool) return runInline(task);
    if (this.running < this.threads) return this.start(task);
    const lane = priorityLane.getStore() ? this.lanes.priority : this.lanes.common;
    if (lane.length >= this.maxQueue) {
      throw new DomainError('unavailable', 'too many password checks in progress; try again shortly', undefined, 1);
    }
    return new Promise((resolve, reject) => lane.push({ task, resolve, reject }));
  }

  private start(task: HashTask): Promise<string | boolean> {
    this.running++;
    return this.pool!.run(task).finally(() => {
      this.running--;
      const next = this.lanes.priority.shift() ?? this.lanes.common.shift();
      if (next) this.start(next.task).then(next.resolve, next.reject);
    });
  }

  /** Refuses the checks still waiting; those on a thread finish (the threads are the process's: processPool). */
  async close(): Promise<void> {
    for (const waiting of [...this.lanes.priority.splice(0), ...this.lanes.common.splice(0)]) {
      waiting.reject(new DomainError('unavailable', 'the password pool is closing', undefined, 1));
    }
  }
}

const pools = new Map<number, Piscina<HashTask, string | boolean>>();

/**
 * The process's bcrypt threads, one pool per thread count, shared by every Passwords in it, as
 * libuv's thread pool is: a service stopped and started again in one process (the test suite
 * does that hundreds of times) finds its threads there instead of starting new ones, each of
 * which loads the worker module anew. Idle threads do not keep the process alive (piscina unrefs
 * them), so a pool is never closed.
 */
function processPool(threads: number): Piscina<HashTask, string | boolean> {
  let pool = pools.get(threads);
  if (!pool) {
    // the worker runs the same build as this module: hash-worker.ts under tsx, .js when compiled
    const here = fileURLToPath(import.meta.url);
    pool = new Piscina({ filename: path.join(path.dirname(here), `hash-worker${path.extname(here)}`), minThreads: threads, maxThreads: threads });
    pools.set(threads, pool);
  }
  return pool;
}
