/**
 * The plain way to store a notification, the baseline of `npm run bench:notifications`: a Koa
 * app with the service's database configuration (src/db/knex.ts: the same driver, the same pool,
 * the same SQLite pragmas), one INSERT per request, each its own transaction (autocommit), into
 * a table made from the service's own definition of `notifications` (columns and indexes). The
 * seq is a counter in this process (no counter row, no lock) and the id the service's own
 * (time-ordered); no authentication, no validation beyond reading the JSON, no push: everything
 * favours the baseline.
 *
 *   node --import tsx scripts/bench/plain-insert-server.ts <database url or ''> <data dir>
 *
 * POST / stores the body's notification and answers 202 {id, seq}; GET /count answers the rows
 * stored. Prints its port.
 */
import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Koa from 'koa';
import { notificationTables } from '../../migrations/20261125000100_notifications.js';
import { createDb } from '../../src/db/knex.js';
import { ensureSchema } from '../../src/db/schema.js';
import { newNotificationId } from '../../src/notifications/writer.js';

const db = createDb({ databaseUrl: process.argv[2] || null, dataDir: process.argv[3]! });
// a user id of the service's shape (the service stores the target's id)
const USER_ID = crypto.randomUUID();
let seq = 0;

async function readJson(req: http.IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
}

async function main(): Promise<void> {
  await ensureSchema(
    db,
    notificationTables.filter((t) => t.name === 'notifications'),
  );
  const app = new Koa();
  app.use(async (ctx) => {
    if (ctx.method === 'GET' && ctx.path === '/count') {
      const [row] = await db('notifications').count({ n: '*' });
      ctx.body = { count: Number(row!.n) };
      return;
    }
    if (ctx.method !== 'POST') return;
    const n = await readJson(ctx.req);
    const now = Date.now();
    const row = {
      id: newNotificationId(),
      seq: ++seq,
      user_id: USER_ID,
      title: String(n.title ?? ''),
      message: String(n.message ?? ''),
      level: 'info',
      source: null,
      link: null,
      toast: Boolean(n.toast ?? true),
      cleared: false,
      sender: 'admin',
      created_at: now,
      updated_at: now,
    };
    await db('notifications').insert(row);
    ctx.status = 202;
    ctx.body = { id: row.id, seq: row.seq };
  });
  const server = http.createServer(app.callback());
  server.listen(0, '127.0.0.1', () => process.stdout.write(`${(server.address() as AddressInfo).port}\n`));
  process.once('SIGTERM', () => {
    server.close();
    void db.destroy().then(() => process.exit(0));
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
