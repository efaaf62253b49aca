import bcrypt from 'bcryptjs';

/** Runs in a worker thread of the password pool (src/iam/passwords.ts): one bcrypt hash or compare. */
export type HashTask = { op: 'hash'; password: string; cost: number } | { op: 'verify'; password: string; hash: string };

export default function run(task: HashTask): Promise<string | boolean> {
  return task.op === 'hash' ? bcrypt.hash(task.password, task.cost) : bcrypt.compare(task.password, task.hash);
}
