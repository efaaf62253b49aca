import { Resolver } from 'node:dns/promises';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { createDb, probeDb } from '../../../src/db/knex.js';
import { migrateLatest } from '../../../src/db/migrate.js';
import { freshDatabase, migratedSqlite, PG_URL } from '../../support/service.js';

/** A migrated database of the run's kind: a fresh PostgreSQL database with SERVICE_TEST_DATABASE_URL, else an SQLite file. */
export async function migratedDb(): Promise<{ db: Knex; drop(): Promise<void> }> {
  if (!PG_URL) return migratedSqlite();
  const fresh = await freshDatabase(PG_URL, { migrated: true });
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-dns-'));
  const settings = { databaseUrl: fresh.url, dataDir };
  const db = createDb(settings);
  await probeDb(db, settings);
  await migrateLatest(db);
  return {
    db,
    drop: async () => {
      await db.destroy();
      await fresh.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A resolver that asks only the test's Unbound, once, briefly. */
export function resolverOf(port: number): Resolver {
  const r = new Resolver({ timeout: 1000, tries: 1 });
  r.setServers([`127.0.0.1:${port}`]);
  return r;
}

/** The DNS error code of a lookup (ENOTFOUND for NXDOMAIN, ENODATA for a name without that type), or 'resolved'. */
export async function lookupError(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'resolved';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? String(err);
  }
}
