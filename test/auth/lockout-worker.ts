// A second instance's lockout for test/auth/lockout.test.ts: a connection of its own on another
// thread (on SQLite a second writer that waits for the file's lock, as another process would).
import { parentPort, workerData } from 'node:worker_threads';
import { LoginLockout } from '../../src/auth/lockout.js';
import { createDb, type DbSettings } from '../../src/db/knex.js';

const { settings, attempts, username, ip } = workerData as { settings: DbSettings; attempts: number; username: string; ip: string };
const db = createDb(settings);
const lockout = new LoginLockout(db);
try {
  parentPort!.postMessage(await Promise.all(Array.from({ length: attempts }, () => lockout.begin(username, ip))));
} finally {
  await db.destroy();
}
