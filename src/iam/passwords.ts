import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import { DomainError } from '../errors.js';
import runInline, { type HashTask } from './hash-worker.js';

export const BCRYPT_COST = 10;
/** The longest password accepted anywhere; a longer one is refused before any hashing. */
export const PASSWORD_MAX = 1024;
/** bcrypt of a random value: compared against when a user is unknown, so timing tells nobody who exists. */
const DUMMY_HASH = '$2b$10$BNQfVp7u55aVkTTjvEw6su4r/7b6hVDm5HC0jll90gLYP/rsyhSIi';

export interface PasswordOptions {
  /** worker threads; 0 hashes on the calling thread (the CLI and knex seeds, never the server) */
  threads?: number;
  /** checks waiting for a thread at most; one more is refused at once (503) */
  maxQueue?: number;
  cost?: number;
}

/**
 * bcrypt off the event loop: a small pool of worker threads (one fewer than the cores, at
 * least one, at a lower priority than the event loop: src/iam/hash-worker.ts) with a bounded queue, so a storm of logins or Basic requests with new passwords
 * costs those callers a wait or a 503, never the latency of every other request.
 */
export class Passwords {
  private readonly pool: Piscina<HashTask, string | boolean> | null;
  private readonly cost: number;
  private readonly maxQueue: number;

  constructor(opts: PasswordOptions = {}) {
    this.cost = opts.cost ?? BCRYPT_COST;
    this.maxQueue = opts.maxQueue ?? 64;
    const threads = opts.threads ?? Math.max(1, (os.availableParallelism?.() ?? os.cpus().length) - 1);
    if (threads === 0) {
      this.pool = null;
      return;
    }
    // the worker runs the same build as this module: hash-worker.ts under tsx, .js when compiled
    const here = fileURLToPath(import.meta.url);
    this.pool = new Piscina({
      filename: path.join(path.dirname(here), `hash-worker${path.extname(here)}`),
      minThreads: threads,
      maxThreads: threads,
      maxQueue: this.maxQueue,
      idleTimeout: 60_000,
    });
  }

  hash(password: string): Promise<string> {
    return this.run({ op: 'hash', password, cost: this.cost }) as Promise<string>;
  }

  /** True when `password` matches `hash`; against a dummy hash when there is none (same cost either way). */
  verify(password: string, hash: string | null): Promise<boolean> {
    return this.run({ op: 'verify', password, hash: hash ?? DUMMY_HASH }).then((ok) => ok === true && hash !== null);
  }

  private async run(task: HashTask): Promise<string | boolean> {
    if (task.password.length > PASSWORD_MAX) throw new DomainError('validation_failed', `password must be at most ${PASSWORD_MAX} characters`, [{ field: 'password', message: `must be at most ${PASSWORD_MAX} characters` }]);
    if (!this.pool) return runInline(task);
    if (this.pool.queueSize >= this.maxQueue) {
      throw new DomainError('unavailable', 'too many password checks in progress; try again shortly', undefined, 1);
    }
    return this.pool.run(task);
  }

  async close(): Promise<void> {
    await this.pool?.close({ force: true });
  }
}
