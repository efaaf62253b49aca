import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { writePlugin } from './helpers.js';

/** A plugin's grants are in place when the service says it is ready, not some moments later. */
describe('plugin grants at boot', function () {
  this.timeout(30_000);
  let svc: TestService;

  after(() => svc?.destroy());

  it('are written before system:boot_complete and /readyz 200', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-grants-'));
    writePlugin(path.join(dataDir, 'plugins'), 'early', {
      id: 'early',
      name: 'Early',
      version: '1.0.0',
      entry: 'index.mjs',
      roles: [{ id: 'operator', permissions: ['plugin:early:run'], auto_map_groups: ['INT_USER'] }],
      permissions_declared: [{ id: 'run', description: 'run it' }],
    }, { 'index.mjs': "export function setup(ctx) {\n  ctx.router.get('/status', (koa) => { koa.body = { ok: true }; });\n  ctx.router.post('/run', (koa) => { koa.status = 204; });\n}\n" });
    writePlugin(path.join(dataDir, 'plugins'), 'fails', { id: 'fails', name: 'Fails', version: '1.0.0', entry: 'index.mjs' }, { 'index.mjs': "export function setup() { throw new Error('no'); }\n" });
    svc = await startService({ dataDir });
    // nothing after boot_complete has had a turn yet: the grants must already be there
    const rows = await svc.service.db('role_grants').where({ plugin_id: 'early' });
    expect(rows.map((r) => `${r.group_name} ${r.permission}`)).to.include.members(['INT_VIEWER plugin:early', 'INT_USER plugin:early:api:write', 'INT_USER plugin:early:run']);
    await request(svc.url).get('/readyz').expect(200);
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
