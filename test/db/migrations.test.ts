import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createDb, knexConfig, type Knex } from '../../src/db/knex.js';
import { freshDatabase, type TestDb } from '../support/service.js';

describe('migrations', () => {
  let tdb: TestDb;
  let db: Knex;
  let dataDir: string;

  beforeEach(async () => {
    tdb = await freshDatabase();
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-mig-'));
    db = createDb({ databaseUrl: tdb.url, dataDir });
  });
  afterEach(async () => {
    await db.destroy();
    await tdb.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const columns = async (table: string) => Object.keys(await db(table).columnInfo()).sort();
  const migrate = () => db.migrate.latest(knexConfig({ databaseUrl: tdb.url, dataDir }).migrations);

  it('run twice without change', async () => {
    const [, first] = await migrate();
    expect(first.length).to.be.greaterThan(0);
    const before = { users: await columns('users'), groups: await columns('groups'), api_keys: await columns('api_keys') };
    const [, second] = await migrate();
    expect(second).to.deep.equal([]);
    expect({ users: await columns('users'), groups: await columns('groups'), api_keys: await columns('api_keys') }).to.deep.equal(before);
    // running the migration body again on a migrated database is a no-op too
    const mod = await import('../../migrations/20261125000000_core.js');
    await mod.up(db);
    expect(await columns('users')).to.deep.equal(before.users);
  });

  it('upgrade an older schema that lacks columns, losing nothing', async () => {
    // the shape an older release left behind: no extra_permissions, disabled or display_name
    await db.schema.createTable('users', (t) => {
      t.string('id', 36).primary();
      t.string('username', 128).notNullable().unique();
      t.string('email', 320);
      t.string('hashed_password', 128);
      t.text('roles').notNullable().defaultTo('[]');
      t.text('groups').notNullable().defaultTo('[]');
    });
    await db('users').insert({ id: '00000000-0000-4000-8000-000000000001', username: 'olduser', email: 'old@example.org', roles: '[]', groups: '["INT_USER"]' });
    await migrate();
    const cols = await columns('users');
    for (const c of ['extra_permissions', 'disabled', 'display_name', 'created_at']) expect(cols).to.include(c);
    const row = await db('users').where({ username: 'olduser' }).first();
    expect(row.email).to.equal('old@example.org');
    expect(JSON.parse(row.groups)).to.deep.equal(['INT_USER']);
    expect(JSON.parse(row.extra_permissions)).to.deep.equal([]);
    expect(Boolean(row.disabled)).to.equal(false);
  });
});
