import bcrypt from 'bcryptjs';
import os from 'node:os';
import { isMainThread } from 'node:worker_threads';

/** Runs in a worker thread of the password pool (src/iam/passwords.ts): one bcrypt hash or compare. */
export type HashTask = { op: 'hash'; password: string; cost: number } | { op: 'verify'; password: string; hash: string };

/** The nice value of the pool's threads: below the event loop's, so busy cores delay a login, not every request. */
export const HASH_THREAD_NICE = 10;

// On Linux the nice value belongs to the thread: this lowers the pool's worker only (the main
// thread imports this module too, to hash inline in the CLI).
if (!isMainThread) {
  try {
    os.setPriority(HASH_THREAD_NICE);
  } catch {
    // not permitted here: hash at the process's priority
  }
}

export default function run(task: HashTask): Promise<string | boolean> {
  return task.op === 'hash' ? bcrypt.hash(task.password, task.cost) : bcrypt.compare(task.password, task.hash);
}
