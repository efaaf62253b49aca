import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { eventually, writePlugin } from './helpers.js';
import { capturingLogger } from '../sockets/helpers.js';

/** A plugin's grants are in place when the service says it is ready, not some moments later. */
describe('plugin grants at boot', function () {
  this.timeout(30_000);
  let svc: TestService;

  after(() => svc?.destroy());

  it('are written before system:boot_complete and /readyz 200', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-grants-'));
    writePlugin(
      path.join(dataDir, 'plugins'),
      'early',
      {
        id: 'early',
        name: 'Early',
        version: '1.0.0',
        entry: 'index.mjs',
        roles: [{ id: 'operator', permissions: ['plugin:early:run'], auto_map_groups: ['INT_USER'] }],
        permissions_declared: [{ id: 'run', description: 'run it' }],
      },
      {
        'index.mjs':
          "export function setup(ctx) {\n  ctx.router.get('/status', (koa) => { koa.body = { ok: true }; });\n  ctx.router.post('/run', (koa) => { koa.status = 204; });\n}\n",
      },
    );
    writePlugin(
      path.join(dataDir, 'plugins'),
      'fails',
      { id: 'fails', name: 'Fails', version: '1.0.0', entry: 'index.mjs' },
      { 'index.mjs': "export function setup() { throw new Error('no'); }\n" },
    );
    svc = await startService({ dataDir });
    // nothing after boot_complete has had a turn yet: the grants must already be there
    const rows = await svc.service.db('role_grants').where({ plugin_id: 'early' });
    expect(rows.map((r) => `${r.group_name} ${r.permission}`)).to.include.members([
      'INT_VIEWER plugin:early',
      'INT_USER plugin:early:api:write',
      'INT_USER plugin:early:run',
    ]);
    await request(svc.url).get('/readyz').expect(200);
    // each grant is the group's change by the service, with its event in the same transaction
    await svc.service.iam.audit.flush();
    const events = await svc.service.db('audit_events').where({ action: 'group.updated', actor_username: 'service' }).select('target_name', 'details');
    const granted = events.map((e) => JSON.parse(e.details)).filter((d) => d.plugin === 'early');
    expect(granted).to.have.length(rows.length);
    expect(granted).to.deep.include({ permissions_added: ['plugin:early:run'], plugin: 'early', role: 'operator', via: 'role_ledger' });
  });

  it("a running plugin's routes are in the OpenAPI document, with the permission each needs", async () => {
    const paths = (await request(svc.url).get('/openapi.json').expect(200)).body.paths;
    expect(paths['/api/plugins/early/status'].get).to.include({ 'x-permission': 'plugin:early:api:read' });
    expect(paths['/api/plugins/early/status'].get.tags).to.deep.equal(['plugin:early']);
    expect(paths['/api/plugins/early/run'].post).to.include({ 'x-permission': 'plugin:early:api:write' });
    await request(svc.url).get('/api/plugins/early/status').set('Authorization', adminAuth()).expect(200);
  });

  it('the access view lists every plugin: a failed or disabled one as nothing anyone can use', async () => {
    const auth = adminAuth();
    const access = async () => (await request(svc.url).get('/api/me/access').set('Authorization', auth).expect(200)).body.plugins;
    const none = { visible: false, can_read: false, can_write: false, routes: [] };
    let plugins = await access();
    expect(plugins.early).to.include({ visible: true, can_read: true, can_write: true });
    expect(plugins.fails).to.deep.equal(none);
    await request(svc.url).post('/api/plugins/early/disable').set('Authorization', auth).expect(200);
    plugins = await access();
    expect(plugins.early).to.deep.equal(none);
    // and its routes leave the API document with it
    const paths = (await request(svc.url).get('/openapi.json').expect(200)).body.paths;
    expect(paths).not.to.have.property('/api/plugins/early/status');
  });
});

/** The ledger's passes after the first write nothing; one the database refuses is a log line, and the next pass applies it. */
describe('plugin grants after boot', function () {
  this.timeout(30_000);
  let svc: TestService;
  const log = capturingLogger('warn');

  before(async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-grants-'));
    writePlugin(
      path.join(dataDir, 'plugins'),
      'again',
      { id: 'again', name: 'Again', version: '1.0.0', entry: 'index.mjs' },
      { 'index.mjs': 'export function setup() {}\n' },
    );
    svc = await startService({ dataDir, logger: log.logger });
  });
  after(() => svc?.destroy());

  it('a pass over grants recorded before reads the ledger and writes nothing (no write lock for instances booting together)', async () => {
    const statements: string[] = [];
    const record = (q: { sql: string }) => statements.push(q.sql);
    svc.service.db.on('query', record);
    try {
      await svc.service.iam.ledger.applyAll();
    } finally {
      svc.service.db.off('query', record);
    }
    expect(statements.length).to.be.greaterThan(0);
    expect(statements.filter((sql) => !/^select /i.test(sql.trim()))).to.deep.equal([]);
  });

  it('a pass the database refuses is logged, not an unhandled rejection; the next pass applies the grants', async () => {
    const db = svc.service.db;
    await db('role_grants').where({ plugin_id: 'again' }).delete();
    await db.schema.renameTable('role_grants', 'role_grants_away');
    try {
      svc.service.bus.emit('plugin:state_changed', { plugin_id: 'again', state: 'loaded', enabled: true });
      await eventually(() => expect(log.text()).to.include('plugin role grants not applied'), 5000);
    } finally {
      await db.schema.renameTable('role_grants_away', 'role_grants');
    }
    await svc.service.iam.ledger.applyAll();
    const rows = await db('role_grants').where({ plugin_id: 'again' });
    expect(rows.map((r) => `${r.group_name} ${r.permission}`)).to.include('INT_VIEWER plugin:again');
  });
});
