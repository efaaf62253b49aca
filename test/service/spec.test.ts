import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { loadConfig } from '../../src/config.js';
import { Service } from '../../src/service.js';
import { createLogger } from '../../src/log.js';
import { freshDatabase, startService, testEnv, adminAuth, SYSTEM_KEY } from '../support/service.js';
import { WsClient } from '../gateway/helpers.js';

/** The boot order and what the specification says of boot, readiness and the welcome frame. */
describe('boot as specified', function () {
  this.timeout(30_000);

  it('IAM starts its migrations and seeding from the db:connected event', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-spec-'));
    const db = await freshDatabase();
    // never started: only the event sets IAM going
    const service = new Service(loadConfig(testEnv(dataDir, db.url)), { logger: createLogger('silent') });
    try {
      const inits: string[] = [];
      const init = service.iam.init.bind(service.iam);
      service.iam.init = () => {
        inits.push('init');
        return init();
      };
      expect(inits).to.deep.equal([]);
      service.bus.emit('db:connected', { dialect: db.url ? 'postgres' : 'sqlite' });
      // started within the emission itself, by IAM's own listener
      expect(inits).to.deep.equal(['init']);
      await service.iam.initialised();
      expect((await service.iam.store.userByUsername('admin'))?.groups).to.deep.equal(['INT_ADMIN']);
      expect((await service.iam.store.listGroups()).map((g) => g.name)).to.include.members(['INT_ADMIN', 'INT_USER', 'INT_VIEWER']);
    } finally {
      await service.stop();
      await db.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('applies baseline and role grants again at system:boot_complete', async () => {
    const svc = await startService();
    try {
      const { iam } = svc.service;
      iam.ledger.setPlugin({ id: 'late', roles: [{ id: 'operator', permissions: ['plugin:late:run'], auto_map_groups: ['INT_USER'] }] });
      svc.service.bus.emit('system:boot_complete', { plugins: [] });
      await iam.ledger.idle();
      const user = (await iam.store.listGroups()).find((g) => g.name === 'INT_USER')!;
      expect(user.permissions).to.include.members(['plugin:late', 'plugin:late:api:read', 'plugin:late:api:write', 'plugin:late:run']);
      const viewer = (await iam.store.listGroups()).find((g) => g.name === 'INT_VIEWER')!;
      expect(viewer.permissions).to.include('plugin:late').and.not.to.include('plugin:late:api:write');
      // a repeat changes nothing
      const before = await svc.service.db('role_grants').count({ n: '*' });
      svc.service.bus.emit('system:boot_complete', { plugins: [] });
      await iam.ledger.idle();
      expect(await svc.service.db('role_grants').count({ n: '*' })).to.deep.equal(before);
    } finally {
      await svc.destroy();
    }
  });

  it('/readyz while boot waits for the database answers {status: "unavailable", reason: "database_unavailable"} with its words', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-spec-'));
    // the SQLite file's folder cannot be made while a plain file stands in its way: boot waits
    const blocker = path.join(dataDir, 'db');
    fs.writeFileSync(blocker, 'not a folder');
    const service = new Service(loadConfig(testEnv(dataDir, `sqlite://${path.join(blocker, 'service.sqlite')}`)), {
      logger: createLogger('silent'),
      dbRetryMs: 100,
    });
    try {
      await service.start();
      const res = await request(service.url).get('/readyz').expect(503);
      // the reason an operator can act on (DESIGN: `reason` while the database is unreachable), with the database's own words
      expect(res.body).to.include({ status: 'unavailable', reason: 'database_unavailable' });
      expect(res.body.error.message).to.match(/^database unreachable: /);
      expect(res.headers['retry-after']).to.exist;
    } finally {
      await service.stop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("a system-key connection's gateway:welcome lists its permissions as /api/me/access does", async () => {
    const svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY } });
    try {
      const access = (await request(svc.url).get('/api/me/access').set('X-API-Key', SYSTEM_KEY).expect(200)).body;
      expect(access.permissions).to.include.members(['feature:admin.users', 'api:write', 'socket:container:cleanup']);
      const ws = await WsClient.connect(svc, { headers: { 'X-API-Key': SYSTEM_KEY } });
      try {
        const welcome = ws.frames[0]!;
        expect(welcome.event).to.equal('gateway:welcome');
        expect(welcome.payload.permissions).to.deep.equal(access.permissions);
      } finally {
        await ws.close();
      }
      // anyone else's welcome is unchanged: their own grants
      const admin = await WsClient.connect(svc, { headers: { Authorization: adminAuth() } });
      try {
        expect(admin.frames[0]!.payload.permissions).to.include('feature:*');
      } finally {
        await admin.close();
      }
    } finally {
      await svc.destroy();
    }
  });
});
