// The floor of the cold start (not a test): the least a process must do before it may answer
// /readyz 200 on a fresh SQLite data dir. It loads Koa and knex, applies the service's own
// migration files (the build's, so the same tables), makes two bcrypt hashes at the configured
// cost (the bootstrap admin's and bot's passwords), listens, and answers /readyz 200. Plain
// JavaScript so that node runs it as it runs the build: no TypeScript loader in the figure.
//
//   SERVICE_PORT=… SERVICE_DATA_DIR=… [SERVICE_BCRYPT_COST=…] node scripts/bench/cold-floor.mjs <build dir>
//
// scripts/bench.ts starts it in alternation with the service (`npm run bench -- --cold-only`).
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const dist = path.resolve(process.argv[2] ?? 'dist');
const migrationsDir = path.join(dist, 'migrations');
const dataDir = process.env.SERVICE_DATA_DIR;
if (!dataDir) throw new Error('SERVICE_DATA_DIR is required');
const cost = Number(process.env.SERVICE_BCRYPT_COST || 12);

const [{ default: Koa }, { default: knex }, { default: bcrypt }] = await Promise.all([import('koa'), import('knex'), import('bcryptjs')]);

fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
const db = knex({
  client: 'better-sqlite3',
  connection: { filename: path.join(dataDir, 'service.sqlite') },
  useNullAsDefault: true,
  pool: { min: 1, max: 1 },
});
const names = fs
  .readdirSync(migrationsDir)
  .filter((f) => f.endsWith('.js'))
  .map((f) => f.slice(0, -3))
  .sort();
await db.migrate.latest({
  tableName: 'knex_migrations',
  migrationSource: {
    getMigrations: async () => names,
    getMigrationName: (name) => name,
    getMigration: (name) => import(pathToFileURL(path.join(migrationsDir, `${name}.js`)).href),
  },
});
await Promise.all([bcrypt.hash('floor-admin-password', cost), bcrypt.hash('floor-bot-password', cost)]);

const app = new Koa();
app.use((ctx) => {
  ctx.body = ctx.path === '/readyz' ? { status: 'ready' } : { status: 'ok' };
});
const server = app.listen(Number(process.env.SERVICE_PORT || 0), process.env.SERVICE_HOST || '127.0.0.1');
const stop = () => server.close(() => db.destroy().then(() => process.exit(0)));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
