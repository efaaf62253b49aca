import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createDb, isUniqueViolation, knexConfig, type Knex } from '../../src/db/knex.js';
import { migrateLatest } from '../../src/db/migrate.js';
import { spawnSync } from 'node:child_process';
import { freshDatabase, testEnv, type TestDb } from '../support/service.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

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

  it('several migrators on one new database (instances starting together, the CLI beside them): one applies, the others find nothing left', async function () {
    this.timeout(60_000);
    // each on a database of its own, new: the race is on creating knex's own tables
    for (let round = 0; round < 4; round++) {
      const fresh = await freshDatabase();
      const roundDir = fs.mkdtempSync(path.join(dataDir, 'round-'));
      const handles = [0, 1, 2].map(() => createDb({ databaseUrl: fresh.url, dataDir: roundDir }));
      try {
        const applied = await Promise.all(handles.map((h) => migrateLatest(h)));
        expect(applied.flat().length, `round ${round}`).to.equal(applied.find((a) => a.length)!.length);
        expect(await migrateLatest(handles[0]!)).to.deep.equal([]);
      } finally {
        await Promise.all(handles.map((h) => h.destroy()));
        await fresh.drop();
      }
    }
  });

  it('a new database that two first migrations left with two lock rows (knex reads that as locked for ever) is migrated', async function () {
    this.timeout(60_000);
    const fresh = await freshDatabase();
    const db = createDb({ databaseUrl: fresh.url, dataDir: fs.mkdtempSync(path.join(dataDir, 'two-rows-')) });
    try {
      // what knex makes (table-creator.js), with the row each migrator inserted after both found the table empty
      await db.schema.createTable('knex_migrations', (t) => {
        t.increments();
        t.string('name');
        t.integer('batch');
        t.timestamp('migration_time');
      });
      await db.schema.createTable('knex_migrations_lock', (t) => {
        t.increments('index').primary();
        t.integer('is_locked');
      });
      await db('knex_migrations_lock').insert([{ is_locked: 0 }, { is_locked: 0 }]);
      const applied = await migrateLatest(db);
      expect(applied).to.have.length(fs.readdirSync(path.join(ROOT, 'migrations')).filter((f) => f.endsWith('.ts')).length);
      expect(await db('knex_migrations_lock').select('is_locked')).to.deep.equal([{ is_locked: 0 }]);
    } finally {
      await db.destroy();
      await fresh.drop();
    }
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
    await db('users').insert({
      id: '00000000-0000-4000-8000-000000000001',
      username: 'olduser',
      email: 'old@example.org',
      roles: '[]',
      groups: '["INT_USER"]',
    });
    await migrate();
    const cols = await columns('users');
    for (const c of ['extra_permissions', 'disabled', 'display_name', 'created_at']) expect(cols).to.include(c);
    const row = await db('users').where({ username: 'olduser' }).first();
    expect(row.email).to.equal('old@example.org');
    expect(JSON.parse(row.groups)).to.deep.equal(['INT_USER']);
    expect(JSON.parse(row.extra_permissions)).to.deep.equal([]);
    expect(Boolean(row.disabled)).to.equal(false);
  });

  it('a database holding two names that differ only in case keeps both, without the index that refuses such pairs', async () => {
    const index = await import('../../migrations/20261202000100_usernames_unique_in_any_case.js');
    await migrate();
    // the pair as an older release let it in: the index (made by the migration) set aside
    await db.raw('DROP INDEX users_username_folded');
    await db('users').insert([
      { id: '00000000-0000-4000-8000-0000000000a1', username: 'vic', roles: '[]', groups: '[]' },
      { id: '00000000-0000-4000-8000-0000000000a2', username: 'VIC', roles: '[]', groups: '[]' },
    ]);
    await index.up(db);
    expect((await db('users').whereIn('username', ['vic', 'VIC'])).length).to.equal(2);
    await db('users').insert({ id: '00000000-0000-4000-8000-0000000000a3', username: 'Vic', roles: '[]', groups: '[]' });
    // once the pair is one name, the migration's body makes the index
    await db('users').whereIn('username', ['VIC', 'Vic']).delete();
    await index.up(db);
    const twin = await db('users')
      .insert({ id: '00000000-0000-4000-8000-0000000000a4', username: 'VIC', roles: '[]', groups: '[]' })
      .then(
        () => null,
        (err: unknown) => err,
      );
    expect(isUniqueViolation(twin), String(twin)).to.equal(true);
  });

  it('knex seed:run and migrate:latest (`npx knex`) work on a fresh data dir, idempotently, writing nothing else; seeding is audited and keeps roles', async function () {
    this.timeout(60_000);
    const fresh = path.join(dataDir, 'fresh');
    const env = { ...process.env, ...testEnv(fresh, tdb.url) };
    delete env.SERVICE_SECRET_KEY;
    // the command npx runs (without npm's own half second of start-up for each call)
    const knexCli = (...args: string[]) => spawnSync('node_modules/.bin/knex', args, { env, encoding: 'utf8', timeout: 30_000 });
    const seedRun = () => {
      const seeded = knexCli('seed:run');
      expect(seeded.status, seeded.error ? String(seeded.error) : seeded.stderr + seeded.stdout).to.equal(0);
      // knex's answer only: no loader announcement (knexfile.js, not .mjs), nothing on stderr
      expect(seeded.stdout).not.to.include('Requiring external module');
      expect(seeded.stdout).to.match(/^Ran \d+ seed files?\n$/);
      expect(seeded.stderr).to.equal('');
    };
    seedRun();
    const check = createDb({ databaseUrl: tdb.url, dataDir: fresh });
    try {
      // the superadmin flag the service's boot set (SERVICE_ADMIN_FORCE_SUPERADMIN) is not the seed's to take away
      await check('users')
        .where({ username: 'admin' })
        .update({ roles: JSON.stringify(['superadmin']) });
      seedRun();
      const migrated = knexCli('migrate:latest');
      expect(migrated.status, migrated.stderr).to.equal(0);
      expect(migrated.stdout).to.equal('Already up to date\n');
      // seeding migrated first, as boot does; the master key is not needed, so none was written
      expect(fs.existsSync(path.join(fresh, 'secret.key'))).to.equal(false);
      if (!tdb.url) expect(fs.readdirSync(fresh).filter((f) => !f.startsWith('service.sqlite'))).to.deep.equal([]);
      const [groups, users] = await Promise.all([check('groups').select('name'), check('users').select('username', 'hashed_password', 'roles')]);
      expect(groups.map((g) => g.name).sort()).to.deep.equal(['INT_ADMIN', 'INT_USER', 'INT_VIEWER']);
      expect(users.map((u) => u.username).sort()).to.deep.equal(['admin', 'bot']);
      expect(JSON.parse(users.find((u) => u.username === 'admin')!.roles)).to.deep.equal(['superadmin']);
      // hashed at SERVICE_BCRYPT_COST (testEnv's 4), as the service and the CLI hash
      for (const u of users) expect(u.hashed_password, u.username).to.match(/^\$2[aby]\$04\$/);
      // what it made is in the trail, by the cli actor, once
      const events = await check('audit_events').orderBy('seq').select('action', 'actor_username', 'target_name');
      expect(events.map((e) => `${e.actor_username} ${e.action} ${e.target_name}`)).to.deep.equal([
        'cli group.created INT_VIEWER',
        'cli group.created INT_USER',
        'cli group.created INT_ADMIN',
        'cli user.created admin',
        'cli user.created bot',
      ]);
    } finally {
      await check.destroy();
    }
  });
});
