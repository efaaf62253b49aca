import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { startService, adminAuth, basic, type TestService } from '../support/service.js';
import { eventually, dbIdle } from './helpers.js';
import { fixtures, probe } from './host-fixtures.js';
import type { EventMap } from '../../src/bus/events.js';

/** The plugin host end to end, with the fixture plugins of host-fixtures.ts. */
describe('plugin host', () => {
  let svc: TestService;
  const events: EventMap['plugin:state_changed'][] = [];
  const busResponses: string[] = [];
  let bootPlugins: string[] = [];
  const users: Record<string, string> = {};

  before(async () => {
    (globalThis as any).__pluginProbe = {};
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-plugins-'));
    const pluginsDir = path.join(dataDir, 'plugins');
    fixtures(pluginsDir);
    svc = await startService({ dataDir, wait: false });
    const bus = svc.service.bus;
    bus.on('plugin:state_changed', (e) => {
      events.push(e);
    });
    bus.on('socket:response', (r) => {
      busResponses.push(r.request_id);
    });
    bus.on('system:boot_complete', (e) => {
      bootPlugins = e.plugins;
    });
    await svc.service.booted();
    await svc.service.iam.ledger.applyAll();
    for (const [name, groups] of Object.entries({ viewer: ['INT_VIEWER'], user: ['INT_USER'] })) {
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', adminAuth())
        .send({ username: name, password: `${name}-password-1`, groups })
        .expect(201);
      users[name] = basic(name, `${name}-password-1`);
    }
  });
  after(async () => {
    await svc?.destroy();
    delete (globalThis as any).__pluginProbe;
  });

  const admin = () => adminAuth();
  const list = async () =>
    Object.fromEntries((await request(svc.url).get('/api/plugins').set('Authorization', admin()).expect(200)).body.plugins.map((p: any) => [p.id, p]));

  it('loads each plugin in isolation: a failing one does not stop the others', async () => {
    const p = await list();
    expect(p.good).to.include({ state: 'loaded', enabled: true, error: null, version: '1.0.0' });
    expect(p.sneaky.state).to.equal('loaded');
    expect(p.thrower).to.include({ state: 'failed', error: 'setup failed: boom at setup' });
    expect(p.noexport.error).to.contain('does not export setup(ctx)');
    // its secret setting's value is not shown where the plugin's words are (the API, the log)
    expect(p.leaky).to.include({ state: 'failed', error: 'setup failed: cannot reach eu with key=[secret api_key]' });
    expect(p.notjson.error).to.contain('not valid JSON');
    expect(p.escaper.error).to.contain('resolves outside the plugin folder');
    expect(p.linker.error).to.contain('resolves outside the plugin folder');
    expect(probe().escaped).to.equal(undefined);
    expect(p).not.to.have.property('not-a-plugin');
    expect(bootPlugins).to.have.members(['good', 'sneaky', 'liar', 'relay']);
    // every plugin announced its state once, and the database holds it
    expect(events.map((e) => e.plugin_id).sort()).to.deep.equal(Object.keys(p).sort());
    const rows = Object.fromEntries((await svc.service.db('plugins').select('*')).map((r: any) => [r.id, r]));
    expect(rows.thrower).to.include({ state: 'failed', version: '1.0.0', error: 'setup failed: boom at setup' });
    expect(Boolean(rows.good.enabled)).to.equal(true);
    expect(rows.good.state).to.equal('loaded');
  });

  it('names the bad fields of an invalid manifest', async () => {
    const p = await list();
    expect(p.broken.state).to.equal('failed');
    expect(p.broken.name).to.equal(null);
    for (const field of ['name:', 'version:', 'permissions.subscribe[0]:', 'permissions.emit[0]:', 'extra:']) expect(p.broken.error).to.contain(field);
    expect(p.broken.error).to.contain('topic db:connected is reserved to the core');
  });

  it('a failed setup leaves nothing behind (subscriptions, routes)', async () => {
    svc.service.bus.emit('system:notify', { title: 'ping', message: 'from the test' });
    await eventually(() => expect(probe().good.notified).to.equal(1));
    expect(probe().thrower.notified).to.equal(0);
    await request(svc.url).get('/api/plugins/thrower/alive').set('Authorization', admin()).expect(404);
  });

  it('marks a plugin degraded when its declared socket providers are missing', async () => {
    const p = await list();
    expect(p.liar.state).to.equal('degraded');
    expect(p.liar.error).to.contain('declared socket provider ghost was not registered');
    expect(p.liar.error).to.contain('used socket provider nosuch is not registered');
  });

  it('rejects undeclared subscribe and emit, naming the topic', () => {
    expect(probe().good.errors.subscribe_undeclared).to.match(/may not subscribe to topic "user:notify"/);
    expect(probe().good.errors.emit_undeclared).to.match(/may not emit topic "system:notify"/);
  });

  it('rejects undeclared socket and auth providers', async () => {
    const e = probe().sneaky.errors;
    expect(e.undeclared_provider).to.contain('provider rogue refused').and.contain('socket_providers.provides');
    expect(e.spoofed_owner).to.contain('may not register a socket provider for good');
    expect(e.bus_undeclared_provider).to.equal(null); // the event is accepted, the registry refuses it
    expect(e.undeclared_auth).to.contain('may not register auth provider "other-auth"');
    const names = svc.service.sockets.registry.names();
    expect(names).to.include.members(['container', 'goodsock', 'sneakysock']);
    expect(names).not.to.include.members(['rogue']);
    expect(names).not.to.include('rogue2');
    expect(names).not.to.include('rogue3');
    const providers = (await request(svc.url).get('/api/socket/providers').set('Authorization', admin()).expect(200)).body.providers;
    expect(providers.find((x: any) => x.name === 'goodsock').plugin).to.equal('good');
    const chain = svc.service.auth.chain.entries().map((x) => [x.provider.id, x.plugin]);
    expect(chain).to.deep.include(['sneaky-auth', 'sneaky']);
    expect(chain.map((c) => c[0])).not.to.include('other-auth');
  });

  it("forbids another plugin's provider; allows its own and the declared core ones", async () => {
    const s = probe().sneaky;
    expect(probe().good.own).to.include({ ok: true });
    expect(probe().good.own.result).to.deep.equal({ pong: 'goodsock' });
    expect(s.cross).to.include({ ok: false });
    expect(s.cross.error).to.deep.equal({ code: 'forbidden', message: 'plugin sneaky may not use socket provider goodsock: it belongs to plugin good' });
    expect(s.crossExplicit.error.code).to.equal('forbidden');
    expect(s.undeclaredUse.error.message).to.contain('not in socket_providers.uses');
    expect(s.ownRequest).to.include({ ok: true });
    // container is declared in uses: reachable (the daemon may be down here: never forbidden)
    expect(s.container.error?.code ?? 'ok').not.to.equal('forbidden');
    // the plugin acting as itself holds no core permission: guarded operations are refused
    expect(s.cleanup.error).to.deep.include({ code: 'forbidden' });
    expect(s.cleanup.error.message).to.contain('socket:container:cleanup');
    expect(s.list.ok).to.equal(true);
    expect(s.errors.fake_identity).to.contain('ApiIdentity');
    // socket:request emitted by a plugin is served with its permissions and answered to it alone
    await eventually(() => expect(s.responses.map((r: any) => r.request_id).sort()).to.deep.equal(['sneaky-bus-1', 'sneaky-bus-2']));
    const byId = Object.fromEntries(s.responses.map((r: any) => [r.request_id, r]));
    expect(byId['sneaky-bus-1'].error.code).to.equal('forbidden');
    expect(byId['sneaky-bus-2'].ok).to.equal(true);
    expect(busResponses).not.to.include('sneaky-bus-1');
    expect(busResponses).not.to.include('sneaky-bus-2');
  });

  it('guards plugin routes with plugin:<id>:api:read / write and the api:read / api:write fallback', async () => {
    await request(svc.url).get('/api/plugins/good/hello').expect(401);
    expect((await request(svc.url).get('/api/plugins/good/hello').set('Authorization', users.viewer).expect(200)).body).to.deep.equal({ hello: 'viewer' });
    const denied = await request(svc.url).post('/api/plugins/good/echo').set('Authorization', users.viewer).send({ a: 1 }).expect(403);
    expect(denied.body.error.message).to.equal('missing permission plugin:good:api:write');
    expect((await request(svc.url).post('/api/plugins/good/echo').set('Authorization', users.user).send({ a: 1 }).expect(200)).body).to.deep.equal({
      echo: { a: 1 },
    });
    await eventually(() => expect(probe().good.hello).to.equal(1));
    // global api:read / api:write satisfy the per-plugin permissions
    const groups: Record<string, string[]> = {
      apiread: ['api:read'],
      apiwrite: ['api:write'],
      nothing: ['feature:dashboard.view'],
      pluginread: ['plugin:good:api:read'],
    };
    const who: Record<string, string> = {};
    for (const [g, permissions] of Object.entries(groups)) {
      await request(svc.url).post('/api/groups').set('Authorization', admin()).send({ name: g, permissions }).expect(201);
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', admin())
        .send({ username: `u-${g}`, password: `u-${g}-password`, groups: [g] })
        .expect(201);
      who[g] = basic(`u-${g}`, `u-${g}-password`);
    }
    await request(svc.url).get('/api/plugins/good/hello').set('Authorization', who.apiread).expect(200);
    await request(svc.url).post('/api/plugins/good/echo').set('Authorization', who.apiread).send({}).expect(403);
    await request(svc.url).post('/api/plugins/good/echo').set('Authorization', who.apiwrite).send({}).expect(200);
    await request(svc.url).get('/api/plugins/good/hello').set('Authorization', who.pluginread).expect(200);
    await request(svc.url).post('/api/plugins/good/echo').set('Authorization', who.pluginread).send({}).expect(403);
    const none = await request(svc.url).get('/api/plugins/good/hello').set('Authorization', who.nothing).expect(403);
    expect(none.body.error.message).to.equal('missing permission plugin:good:api:read');
    // a per-route guard on top: plugin:good:run comes with the operator role (INT_USER)
    await request(svc.url).get('/api/plugins/good/run').set('Authorization', users.user).expect(200);
    await request(svc.url).get('/api/plugins/good/run').set('Authorization', users.viewer).expect(403);
    // a scoped key holds only its scopes
    const key = (
      await request(svc.url)
        .post('/api/me/api-keys')
        .set('Authorization', users.user)
        .send({ label: 'ro', scopes: ['plugin:good:api:read'] })
        .expect(201)
    ).body.token;
    await request(svc.url).get('/api/plugins/good/hello').set('X-API-Key', key).expect(200);
    await request(svc.url).post('/api/plugins/good/echo').set('X-API-Key', key).send({}).expect(403);
    await request(svc.url).get('/api/plugins/good/nope').set('Authorization', users.viewer).expect(404);
    await request(svc.url).get('/api/plugins/nosuch/hello').set('Authorization', admin()).expect(404);
  });

  it("documents each plugin route as the server serves it: a declared route's input and answers, a plain route's own guard", async () => {
    // a declared route validates its body before the handler runs
    const bad = await request(svc.url).post('/api/plugins/good/echo').set('Authorization', users.user).send({ a: 'x' }).expect(400);
    expect(bad.body.error.details.map((d: { field: string }) => d.field)).to.deep.equal(['a']);
    const paths = (await request(svc.url).get('/openapi.json').expect(200)).body.paths;
    const echo = paths['/api/plugins/good/echo'].post;
    expect(echo).to.include({ summary: 'answers its body', 'x-permission': 'plugin:good:api:write' });
    expect(echo.requestBody.content['application/json'].schema.properties).to.have.keys('a');
    expect(echo.responses['200'].content['application/json'].schema.required).to.deep.equal(['echo']);
    // the route's own guard is what a caller needs beyond the dispatch's api:read
    const run = paths['/api/plugins/good/run'].get;
    expect(run).to.include({ 'x-permission': 'plugin:good:run' });
    expect(run.description).to.contain('plugin:good:api:read');
    expect(paths['/api/plugins/good/hello'].get).to.include({ 'x-permission': 'plugin:good:api:read' });
    // bodyMode raw: the handler reads the exact bytes, a byte that is not UTF-8 and a byte-order mark included
    const bytes = Buffer.from([0xef, 0xbb, 0xbf, 0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]);
    const raw = await request(svc.url)
      .post('/api/plugins/good/raw')
      .set('Authorization', users.user)
      .set('Content-Type', 'application/json')
      .serialize((b: Buffer) => b as never)
      .send(bytes as never)
      .expect(200);
    expect(raw.body).to.deep.equal({ hex: bytes.toString('hex') });
  });

  it('/api/me/access fills the plugin entries for viewer, user and admin', async () => {
    const access = async (auth: string) => (await request(svc.url).get('/api/me/access').set('Authorization', auth).expect(200)).body;
    const viewer = await access(users.viewer);
    expect(viewer.plugins.good).to.deep.equal({ visible: true, can_read: true, can_write: false, routes: ['/dash'] });
    expect(viewer.permissions).to.include.members(['plugin:good', 'plugin:good:api:read', 'plugin:good:route:/dash']);
    const user = await access(users.user);
    expect(user.plugins.good).to.deep.equal({ visible: true, can_read: true, can_write: true, routes: ['/dash'] });
    const adm = await access(admin());
    expect(adm.plugins.good).to.deep.equal({ visible: true, can_read: true, can_write: true, routes: ['/admin'] });
    // the catalog lists every id the plugin brings
    const catalog = (await request(svc.url).get('/api/permissions').set('Authorization', users.viewer).expect(200)).body.permissions.map((p: any) => p.id);
    expect(catalog).to.include.members([
      'plugin:good',
      'plugin:good:api:read',
      'plugin:good:api:write',
      'plugin:good:route:/dash',
      'plugin:good:route:/admin',
      'plugin:good:run',
    ]);
  });

  it('applies baseline and role grants once; a revoked grant stays revoked after disable + enable', async () => {
    const groups = async () =>
      Object.fromEntries(
        (await request(svc.url).get('/api/groups').set('Authorization', admin()).expect(200)).body.groups.map((g: any) => [g.name, g.permissions]),
      );
    let g = await groups();
    expect(g.INT_VIEWER).to.include.members(['plugin:good', 'plugin:good:api:read', 'plugin:good:route:/dash']).and.not.include('plugin:good:api:write');
    expect(g.INT_USER).to.include.members(['plugin:good', 'plugin:good:api:read', 'plugin:good:api:write', 'plugin:good:run', 'plugin:good:route:/dash']);
    expect(g.INT_ADMIN).to.include.members(['plugin:good', 'plugin:good:api:read', 'plugin:good:api:write', 'plugin:good:route:/admin']);
    // failed plugins grant nothing
    expect(g.INT_VIEWER).not.to.include('plugin:thrower');
    // an administrator revokes the operator role's grant
    await request(svc.url)
      .patch('/api/groups/INT_USER')
      .set('Authorization', admin())
      .send({ permissions: g.INT_USER.filter((p: string) => p !== 'plugin:good:run') })
      .expect(200);
    await request(svc.url).get('/api/plugins/good/run').set('Authorization', users.user).expect(403);

    const seen: string[] = [];
    const off = svc.service.bus.on('plugin:state_changed', (e) => {
      if (e.plugin_id === 'good') seen.push(`${e.state}/${e.enabled}`);
    });
    const disabled = (await request(svc.url).post('/api/plugins/good/disable').set('Authorization', admin()).expect(200)).body;
    expect(disabled).to.include({ id: 'good', state: 'disabled', enabled: false });
    const enabled = (await request(svc.url).post('/api/plugins/good/enable').set('Authorization', admin()).expect(200)).body;
    expect(enabled).to.include({ id: 'good', state: 'loaded', enabled: true });
    off();
    expect(seen).to.deep.equal(['disabled/false', 'loaded/true']);
    expect(probe().good.setups).to.equal(2);

    g = await groups();
    expect(g.INT_USER).not.to.include('plugin:good:run');
    expect(g.INT_USER.filter((p: string) => p === 'plugin:good').length).to.equal(1);
    await request(svc.url).get('/api/plugins/good/run').set('Authorization', users.user).expect(403);
    // baseline 2 x 3 groups + write x 2, operator 1, dash 2, admin-ui 1
    expect((await svc.service.db('role_grants').where({ plugin_id: 'good' })).length).to.equal(12);
  });

  it('disable runs teardown and removes its routes, providers, subscriptions and auth providers', async () => {
    const before = probe().good.notified;
    await request(svc.url).post('/api/plugins/good/disable').set('Authorization', admin()).expect(200);
    expect(probe().good.teardowns).to.equal(2);
    await request(svc.url).get('/api/plugins/good/hello').set('Authorization', admin()).expect(404);
    expect(svc.service.sockets.registry.names()).not.to.include('goodsock');
    svc.service.bus.emit('system:notify', { title: 'after disable', message: 'nobody from good listens' });
    await new Promise((r) => setTimeout(r, 100));
    expect(probe().good.notified).to.equal(before);
    const row = await svc.service.db('plugins').where({ id: 'good' }).first();
    expect(row.state).to.equal('disabled');
    expect(Boolean(row.enabled)).to.equal(false);

    await request(svc.url).post('/api/plugins/sneaky/disable').set('Authorization', admin()).expect(200);
    expect(svc.service.auth.chain.entries().map((x) => x.provider.id)).not.to.include('sneaky-auth');
    expect(svc.service.sockets.registry.names()).not.to.include('sneakysock');
    await request(svc.url).post('/api/plugins/good/enable').set('Authorization', admin()).expect(200);
    await request(svc.url).get('/api/plugins/good/hello').set('Authorization', admin()).expect(200);
    expect(svc.service.sockets.registry.names()).to.include('goodsock');
  });

  it('the admin API needs feature:admin.plugins and answers 404 / 409 / 400', async () => {
    await request(svc.url).get('/api/plugins').expect(401);
    const res = await request(svc.url).get('/api/plugins').set('Authorization', users.user).expect(403);
    expect(res.body.error.message).to.equal('missing permission feature:admin.plugins');
    await request(svc.url).post('/api/plugins/good/disable').set('Authorization', users.user).expect(403);
    await request(svc.url).post('/api/plugins/nosuch/enable').set('Authorization', admin()).expect(404);
    const conflict = await request(svc.url).post('/api/plugins/broken/enable').set('Authorization', admin()).expect(409);
    expect(conflict.body.error.message).to.contain('invalid manifest');
    await request(svc.url).post('/api/plugins/bad%20id/enable').set('Authorization', admin()).expect(400);
    // retrying a plugin whose setup failed runs setup again (and fails again, recorded)
    const retried = (await request(svc.url).post('/api/plugins/thrower/enable').set('Authorization', admin()).expect(200)).body;
    expect(retried).to.include({ state: 'failed', error: 'setup failed: boom at setup' });
    // its teardown ran after the failed setup (the probe is reset by each setup)
    expect(probe().thrower.teardowns).to.equal(1);
  });

  it('a stored secret the plugin sends somewhere never follows a changed endpoint', async () => {
    const patch = (body: Record<string, unknown>) => request(svc.url).patch('/api/plugins/relay/settings').set('Authorization', admin()).send(body);
    await patch({ endpoint: 'https://relay.example.com/in', token: 'relay-token-0123456789' }).expect(200);
    const moved = await patch({ endpoint: 'https://attacker.example/collect' }).expect(400);
    expect(moved.body.error.details).to.deep.equal([{ field: 'token', message: 'must be entered again when endpoint changes' }]);
    const view = (await request(svc.url).get('/api/plugins/relay/settings').set('Authorization', admin()).expect(200)).body.settings;
    expect(view.find((x: { key: string }) => x.key === 'endpoint').value).to.equal('https://relay.example.com/in');
    await patch({ endpoint: 'https://relay2.example.com/in', token: 'typed-again-0123456789' }).expect(200);
    // sending the endpoint it already has moves nothing: no need to type the secret again
    await patch({ endpoint: 'https://relay2.example.com/in' }).expect(200);
    // without a stored secret there is nothing to follow the endpoint
    await patch({ token: null }).expect(200);
    await patch({ endpoint: 'https://relay3.example.com/in' }).expect(200);
  });

  it("checks settings against the plugin's own rules before storing them, running or disabled", async () => {
    const patch = (body: Record<string, unknown>) => request(svc.url).patch('/api/plugins/relay/settings').set('Authorization', admin()).send(body);
    const endpoint = async () =>
      (await request(svc.url).get('/api/plugins/relay/settings').set('Authorization', admin()).expect(200)).body.settings.find(
        (x: { key: string }) => x.key === 'endpoint',
      ).value;
    const before = await endpoint();
    // each setup leaves its settings in the probe: a refused change runs no setup
    expect(probe().relay).to.be.an('object');
    delete probe().relay;
    const refused = await patch({ endpoint: 'http://relay.example.com/in', token: 'short' }).expect(400);
    expect(refused.body.error.details.map((d: { field: string }) => d.field)).to.deep.equal(['endpoint', 'token']);
    expect(refused.body.error.message).not.to.contain('short');
    // nothing stored, and the plugin was not restarted
    expect(await endpoint()).to.equal(before);
    expect(probe().relay).to.equal(undefined);
    expect((await list()).relay).to.include({ state: 'loaded', error: null });
    // setup receives the values the rules made
    await patch({ endpoint: 'https://relay4.example.com/in', token: 'relay-token-0123456789' }).expect(200);
    expect(probe().relay.settings).to.deep.equal({ endpoint: 'https://relay4.example.com/in', token: 'relay-token-0123456789' });
    // a disabled plugin's settings are checked against the same rules
    await request(svc.url).post('/api/plugins/relay/disable').set('Authorization', admin()).expect(200);
    try {
      const disabled = await patch({ endpoint: 'ftp://relay.example.com/in', token: 'relay-token-0123456789' }).expect(400);
      expect(disabled.body.error.details.map((d: { field: string }) => d.field)).to.deep.equal(['endpoint']);
      expect(await endpoint()).to.equal('https://relay4.example.com/in');
    } finally {
      await request(svc.url).post('/api/plugins/relay/enable').set('Authorization', admin()).expect(200);
    }
  });

  it("follows another instance's plugin change by what the database says, never by the message alone", async () => {
    // as a message replayed (to an instance that started since) would say: enable sneaky, which
    // an administrator disabled
    await request(svc.url).post('/api/plugins/sneaky/disable').set('Authorization', admin()).expect(200);
    svc.service.bus.emit('plugin:admin_changed', { plugin_id: 'sneaky', action: 'enable', instance: 'another-instance' });
    await new Promise((r) => setTimeout(r, 200));
    const p = Object.fromEntries(
      (await request(svc.url).get('/api/plugins').set('Authorization', admin()).expect(200)).body.plugins.map((x: any) => [x.id, x]),
    );
    expect(p.sneaky).to.include({ state: 'disabled', enabled: false });
    expect(svc.service.sockets.registry.names()).not.to.include('sneakysock');
  });

  it('the enabled flag survives a restart', async () => {
    await request(svc.url).post('/api/plugins/liar/disable').set('Authorization', admin()).expect(200);
    await dbIdle(svc.service.db);
    await svc.stop();
    const again = await startService({ dataDir: svc.dataDir, databaseUrl: svc.databaseUrl });
    try {
      const p = Object.fromEntries(
        (await request(again.url).get('/api/plugins').set('Authorization', admin()).expect(200)).body.plugins.map((x: any) => [x.id, x]),
      );
      expect(p.liar).to.include({ state: 'disabled', enabled: false });
      expect(p.sneaky).to.include({ state: 'disabled', enabled: false });
      expect(p.good).to.include({ state: 'loaded', enabled: true });
      // a restart re-applies nothing that was revoked
      const g = (await request(again.url).get('/api/groups/INT_USER').set('Authorization', admin()).expect(200)).body;
      expect(g.permissions).not.to.include('plugin:good:run');
    } finally {
      await dbIdle(again.service.db);
      await again.stop();
    }
  });
});
