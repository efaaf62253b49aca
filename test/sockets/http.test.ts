import { expect } from 'chai';
import request from 'supertest';
import fs from 'node:fs';
import { createHash } from 'node:crypto';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import Joi from 'joi';
import { RUNNER_LABEL } from '../../src/sockets/container-provider.js';
import { SocketProvider } from '../../src/sockets/base-provider.js';
import { SocketError } from '../../src/sockets/errors.js';
import { startDockerd, TEST_IMAGE, type TestDockerd } from '../support/dockerd.js';
import { startService, adminAuth, basic, SYSTEM_KEY, type TestService } from '../support/service.js';
import { WsClient } from '../gateway/helpers.js';

/**
 * A unix socket in front of a daemon's socket that passes everything through and counts the
 * requests, by path without the API version (`/info`, `/version`, `/_ping`).
 */
async function countingProxy(daemonSocket: string) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir().length <= 40 ? os.tmpdir() : '/tmp', 'svc-proxy-'));
  const socketPath = path.join(dir, 'docker.sock');
  const counts = new Map<string, number>();
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const daemon = net.connect(daemonSocket);
    for (const s of [client, daemon]) {
      open.add(s);
      s.on('close', () => open.delete(s));
      s.on('error', () => (s === client ? daemon : client).destroy());
    }
    client.on('data', (chunk: Buffer) => {
      for (const m of chunk.toString('latin1').matchAll(/(?:^|\r\n)(?:GET|HEAD|POST|PUT|DELETE) (?:\/v[\d.]+)?(\/[^\s?]*)\S* HTTP\/1\.[01]\r\n/g))
        counts.set(m[1]!, (counts.get(m[1]!) ?? 0) + 1);
    });
    client.pipe(daemon).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    socketPath,
    count: (p: string) => counts.get(p) ?? 0,
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The /api/socket HTTP API on a running service whose container provider talks to a real,
 * private dockerd.
 */
describe('socket HTTP API', function () {
  this.timeout(60000);
  let dockerd: TestDockerd;
  let svc: TestService;
  let viewer: string;
  let operator: string;

  before(async () => {
    dockerd = await startDockerd();
    svc = await startService({ env: { SERVICE_CONTAINER_SOCKET: dockerd.socketPath, SERVICE_SYSTEM_API_KEY: SYSTEM_KEY, SERVICE_RUNNER_PREFIX: 'runner-' } });
    const admin = adminAuth();
    // host permissions are granted by a superadmin or the system key only
    await request(svc.url)
      .post('/api/groups')
      .set('X-API-Key', SYSTEM_KEY)
      .send({ name: 'operators', permissions: ['socket:container:cleanup', 'socket:mounts:repair'] })
      .expect(201);
    await request(svc.url)
      .post('/api/users')
      .set('Authorization', admin)
      .send({ username: 'viewer', password: 'viewer-password', groups: ['INT_VIEWER'] })
      .expect(201);
    await request(svc.url)
      .post('/api/users')
      .set('X-API-Key', SYSTEM_KEY)
      .send({ username: 'operator', password: 'operator-password', groups: ['INT_VIEWER', 'operators'] })
      .expect(201);
    viewer = basic('viewer', 'viewer-password');
    operator = basic('operator', 'operator-password');
  });
  after(async () => {
    await svc?.destroy();
    await dockerd?.stop();
  });

  const create = async (name: string) => {
    // made as if this service had spawned it: cleanup only ever touches its own runners
    const c = await dockerd.docker.createContainer({
      name,
      Image: TEST_IMAGE,
      Labels: { [RUNNER_LABEL]: 'true' },
      Cmd: ['sleep', '300'],
      HostConfig: { NetworkMode: 'none' },
    });
    await c.start();
    return c.id;
  };

  it("lists providers, with or without an identity; where a daemon's socket lives only to holders of a socket permission", async () => {
    for (const auth of [null, viewer, operator]) {
      const req = request(svc.url).get('/api/socket/providers');
      if (auth) req.set('Authorization', auth);
      const res = await req.expect(200);
      expect(res.body.total).to.equal(1);
      expect(res.body.available).to.deep.equal(['container']);
      const c = res.body.providers[0];
      const administers = auth === operator;
      expect(c).to.include({ name: 'container', socket_path: administers ? dockerd.socketPath : '', available: true, reason: null, plugin: null });
      expect(res.body.host_facts_hidden).to.equal(administers ? undefined : true);
      expect(c.capabilities).to.include.keys('can_verify_mounts', 'can_repair_permissions');
    }
  });

  it('reports container daemon health, mounts and storage root', async () => {
    await create('runner-health-1');
    const h = (await request(svc.url).get('/api/socket/container/health').expect(200)).body;
    expect(h.healthy).to.equal(true);
    expect(h.daemon.version).to.be.a('string');
    expect(h.containers_running).to.be.at.least(1);
    expect(h.containers_total).to.be.at.least(1);
    expect(h.images).to.be.at.least(1);
    const m = (await request(svc.url).get('/api/socket/container/mounts').set('Authorization', viewer).expect(200)).body;
    expect(m.mounts).to.be.an('object');
    const s = (await request(svc.url).get('/api/socket/container/storage-root').expect(200)).body;
    expect(s).to.deep.equal({ storage_root: null, host_paths_hidden: true });
    const o = (await request(svc.url).get('/api/socket/container/storage-root').set('Authorization', operator).expect(200)).body;
    expect(o).to.deep.equal({ storage_root: null });
  });

  it('mounts: an open read, host paths shown only to holders of a container permission; a container started later is listed once the kept answer aged', async () => {
    const hostDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-mount-src-'));
    try {
      const c = await dockerd.docker.createContainer({
        name: 'runner-mounted-1',
        Image: TEST_IMAGE,
        Labels: { [RUNNER_LABEL]: 'true' },
        Cmd: ['sleep', '300'],
        HostConfig: { NetworkMode: 'none', Binds: [`${hostDir}:/work:ro`] },
      });
      await c.start();
      // the first answer after the start (any kept one is at most 2 s old)
      await new Promise((r) => setTimeout(r, 2100));
      const anonymous = (await request(svc.url).get('/api/socket/container/mounts').expect(200)).body;
      expect(anonymous.host_paths_hidden).to.equal(true);
      expect(anonymous.mounts[c.id]).to.deep.equal({ '/work': '' });
      const shown = (await request(svc.url).get('/api/socket/container/mounts').set('Authorization', operator).expect(200)).body;
      expect(shown).not.to.have.property('host_paths_hidden');
      expect(shown.mounts[c.id]).to.deep.equal({ '/work': hostDir });
      expect((await request(svc.url).get('/api/socket/container/mounts').set('Authorization', viewer).expect(200)).body.host_paths_hidden).to.equal(true);
      // a container started afterwards is in the answers once the kept one has aged (how often
      // the daemon is asked: the counting test below)
      const later = await create('runner-mounted-2');
      await new Promise((r) => setTimeout(r, 2100));
      expect((await request(svc.url).get('/api/socket/container/mounts').expect(200)).body.mounts).to.have.property(later);
    } finally {
      fs.rmSync(hostDir, { recursive: true, force: true });
    }
  });

  it('cleanup: 401 without identity, 403 without the permission, removes only prefixed containers with it', async () => {
    const keep = await create('keepme-1');
    const gone = await create('runner-old-1');
    const unauth = await request(svc.url).post('/api/socket/container/cleanup').send({ max_age_minutes: 0 }).expect(401);
    expect(unauth.body.error.code).to.equal('unauthorized');
    const denied = await request(svc.url).post('/api/socket/container/cleanup').set('Authorization', viewer).send({ max_age_minutes: 0 }).expect(403);
    expect(denied.body.error.message).to.contain('socket:container:cleanup');
    const dry = (
      await request(svc.url).post('/api/socket/container/cleanup').set('Authorization', operator).send({ max_age_minutes: 0, dry_run: true }).expect(200)
    ).body;
    expect(dry.removed.map((r: any) => r.id)).to.include(gone);
    expect((await dockerd.docker.getContainer(gone).inspect()).Id).to.equal(gone);
    const done = (await request(svc.url).post('/api/socket/container/cleanup').set('Authorization', operator).send({ max_age_minutes: 0 }).expect(200)).body;
    expect(done.removed.map((r: any) => r.id)).to.include(gone);
    expect(done.errors).to.deep.equal([]);
    const left = (await dockerd.docker.listContainers({ all: true })).map((c) => c.Id);
    expect(left).to.include(keep).and.not.include(gone);
    // the system key passes every permission check
    await request(svc.url).post('/api/socket/container/cleanup').set('X-API-Key', SYSTEM_KEY).send({ max_age_minutes: 0, dry_run: true }).expect(200);
  });

  it('cleanup rejects bad input with 400, never 500', async () => {
    for (const body of [
      { prefix: '' },
      { prefix: '.*' },
      { prefix: 'run(ner' },
      { max_age_minutes: -1 },
      { max_age_minutes: 'ten' },
      { dry_run: 'yes' },
      { surprise: 1 },
    ]) {
      const res = await request(svc.url).post('/api/socket/container/cleanup').set('Authorization', operator).send(body);
      expect(res.status, JSON.stringify(body)).to.equal(400);
      expect(res.body.error.code).to.equal('validation_failed');
    }
    const notJson = await request(svc.url)
      .post('/api/socket/container/cleanup')
      .set('Authorization', operator)
      .set('Content-Type', 'application/json')
      .send('[1,2')
      .expect(400);
    expect(notJson.body.error.code).to.equal('validation_failed');
  });

  it('serves every operation of a provider, with its method: spawn, runners and resolve_mounts too', async () => {
    // a change is a POST: spawn's args are checked by its own rule and named
    const spawn = await request(svc.url).post('/api/socket/container/spawn').set('X-API-Key', SYSTEM_KEY).send({}).expect(400);
    expect(spawn.body.error.details.map((d: { field: string }) => d.field).sort()).to.deep.equal(['image', 'name']);
    const wrongMethod = await request(svc.url).get('/api/socket/container/spawn').set('X-API-Key', SYSTEM_KEY).expect(405);
    expect(wrongMethod.headers.allow).to.equal('POST');
    // reads are GETs, their query converted by the operation's rule (one target or several)
    const runners = await request(svc.url).get('/api/socket/container/runners').set('X-API-Key', SYSTEM_KEY).expect(200);
    expect(runners.body.runners).to.be.an('array');
    const one = await request(svc.url).get('/api/socket/container/resolve-mounts').query({ targets: '/srv' }).set('X-API-Key', SYSTEM_KEY).expect(200);
    const two = await request(svc.url).get('/api/socket/container/resolve-mounts?targets=/srv&targets=/data').set('X-API-Key', SYSTEM_KEY).expect(200);
    expect(Object.keys(one.body.mounts ?? one.body)).to.have.length.greaterThan(0);
    expect(JSON.stringify(two.body)).to.include('/data');
    // one URL per operation: the underscore spelling is not a second one
    await request(svc.url).get('/api/socket/container/storage_root').set('X-API-Key', SYSTEM_KEY).expect(404);
    for (const path of ['/api/socket/nothing/health', '/api/socket/container/nothing']) {
      const res = await request(svc.url).post(path).set('X-API-Key', SYSTEM_KEY).send({}).expect(404);
      expect(res.body.error.code, path).to.equal('not_found');
    }
    const res = await request(svc.url).get('/api/socket/container/cleanup').set('X-API-Key', SYSTEM_KEY).expect(405);
    expect(res.headers.allow).to.equal('POST');
    expect(res.body.error.code).to.equal('method_not_allowed');
    // a GET's query is checked by the operation's rule: health takes no arguments
    const extra = await request(svc.url).get('/api/socket/container/health').query({ verbose: '1' }).expect(400);
    expect(extra.body.error.details).to.deep.equal([{ field: 'verbose', message: 'is not allowed' }]);
    // every one is in the API document
    const doc = (await request(svc.url).get('/openapi.json').expect(200)).body;
    expect(doc.paths['/api/socket/container/spawn'].post.requestBody.content['application/json'].schema.required).to.include.members(['image', 'name']);
    expect(doc.paths).to.include.keys('/api/socket/container/runners', '/api/socket/container/resolve-mounts');
  });

  it('a route derived from a declaration: args that ask for more are 401 to nobody, 403 to the unpermitted; a provider that cannot list its operations leaves only itself out of the document', async () => {
    class ProbeProvider extends SocketProvider {
      readonly name: string = 'probe';
      readonly socket_path = '/nonexistent/probe.sock';
      readonly capabilities = { can_verify_mounts: false, can_repair_permissions: false };
      override async isAvailable() {
        return (this.lastAvailable = true);
      }
      override async health_check() {
        return { healthy: true };
      }
      override operations() {
        return {
          poke: {
            schema: Joi.object({ deep: Joi.boolean().default(false) }),
            permission: null,
            permissionsFor: (a: { deep: boolean }) => (a.deep ? ['socket:probe:deep'] : []),
            run: async (a: { deep: boolean }) => ({ poked: true, deep: a.deep }),
            result: Joi.object({ poked: Joi.boolean(), deep: Joi.boolean() }),
            http: { method: 'POST' as const, summary: 'poke' },
          },
          crash: {
            schema: Joi.object({}),
            permission: null,
            run: async () => Promise.reject(new Error('secret detail /etc/x')),
            result: Joi.object({}),
            http: { method: 'POST' as const, summary: 'crash' },
          },
          refused: {
            schema: Joi.object({}),
            permission: null,
            run: async () => Promise.reject(new SocketError('failed', 'the daemon said no', { status: 500 })),
            result: Joi.object({}),
            http: { method: 'POST' as const, summary: 'refused' },
          },
        };
      }
    }
    // registered whole (the registry checks every operation), broken afterwards
    let broken = false;
    class BrokenProvider extends ProbeProvider {
      override readonly name = 'broken';
      override operations() {
        if (broken) throw new Error('cannot list');
        return super.operations();
      }
    }
    const registry = svc.service.sockets.registry;
    registry.register(ProbeProvider, { owner: 'core' });
    registry.register(BrokenProvider, { owner: 'core' });
    broken = true;
    registry.version++; // the document is made again
    try {
      expect((await request(svc.url).post('/api/socket/probe/poke').send({}).expect(200)).body).to.deep.equal({ poked: true, deep: false });
      await request(svc.url).post('/api/socket/probe/poke').send({ deep: true }).expect(401);
      const denied = await request(svc.url).post('/api/socket/probe/poke').set('Authorization', viewer).send({ deep: true }).expect(403);
      expect(denied.body.error.message).to.include('socket:probe:deep');
      // a failure behind the provider is a 502, never a 500; what the provider threw stays in the log
      const crash = await request(svc.url).post('/api/socket/probe/crash').send({}).expect(502);
      expect(crash.body.error).to.deep.equal({ code: 'bad_gateway', message: 'socket operation failed' });
      const refused = await request(svc.url).post('/api/socket/probe/refused').send({}).expect(502);
      expect(refused.body.error).to.deep.equal({ code: 'bad_gateway', message: 'the daemon said no', details: { status: 500 } });
      const doc = (await request(svc.url).get('/openapi.json').expect(200)).body;
      expect(doc.paths).to.have.property('/api/socket/probe/poke');
      // the declared result is the 200's schema; args that ask for a permission can be 401 and 403
      const poke = doc.paths['/api/socket/probe/poke'].post.responses;
      expect(poke['200'].content['application/json'].schema).to.deep.include({ required: ['poked', 'deep'], additionalProperties: false });
      expect(poke).to.include.keys('401', '403');
      expect(doc.paths['/api/socket/probe/crash'].post.responses).to.have.property('502');
      expect(Object.keys(doc.paths).filter((p) => p.startsWith('/api/socket/broken'))).to.deep.equal([]);
      // the required operations the provider does not serve: the base's answer, over HTTP and ws alike
      const root = await request(svc.url).get('/api/socket/probe/storage-root').expect(501);
      expect(root.body.error).to.deep.equal({ code: 'unsupported', message: 'socket provider probe does not serve probe:storage_root' });
      expect(doc.paths['/api/socket/probe/cleanup'].post).to.be.an('object');
      const viaBus = await svc.service.sockets.requests.handle({ request_id: 'r', operation: 'probe:mounts', args: {} }, null);
      expect(viaBus.error).to.deep.include({ code: 'unsupported', message: 'socket provider probe does not serve probe:mounts' });
    } finally {
      await registry.unregisterOwner('core').catch(() => undefined);
      svc.service.sockets.registerBuiltins();
    }
  });

  it('health of managed dirs is read-only; a path outside is not_managed', async () => {
    const inside = path.join(svc.dataDir, 'managed', 'inside');
    fs.mkdirSync(inside, { mode: 0o700 });
    fs.chmodSync(inside, 0o700);
    const res = (
      await request(svc.url)
        .get('/api/socket/health')
        .query({ required_dirs: `${inside},/etc` })
        .expect(200)
    ).body;
    // anyone may ask whether the paths are healthy; their owner and mode are for holders of a socket permission
    expect(res.mounts[inside]).to.include({ exists: true, mode: null, owner_uid: null });
    expect(res.host_facts_hidden).to.equal(true);
    const shown = (
      await request(svc.url)
        .get('/api/socket/health')
        .set('Authorization', operator)
        .query({ required_dirs: `${inside},/etc` })
        .expect(200)
    ).body;
    expect(shown.mounts[inside]).to.include({ exists: true, mode: '0700' });
    expect(shown).not.to.have.property('host_facts_hidden');
    expect(res.mounts['/etc'].error).to.equal('not_managed');
    expect(res.healthy).to.equal(false);
    // the data dir itself is never managed: its default managed root is <data>/managed
    expect(svc.config.managedDirs).to.deep.equal([path.join(svc.dataDir, 'managed')]);
    const data = (await request(svc.url).get('/api/socket/health').query({ required_dirs: svc.dataDir }).expect(200)).body;
    expect(data.mounts[svc.dataDir]).to.include({ error: 'not_managed', mode: null });
    expect(fs.statSync(inside).mode & 0o777).to.equal(0o700);
    const all = (await request(svc.url).get('/api/socket/health').expect(200)).body;
    // without required_dirs, the managed dirs themselves are checked
    expect(Object.keys(all.mounts)).to.deep.equal(svc.config.managedDirs);
    expect(all.mounts[svc.config.managedDirs[0]]).to.include({ exists: true, writable: true });
    expect(all.healthy).to.equal(true);
    // the limits the document states: 64 paths, 4,096 characters each
    const many = Array.from({ length: 65 }, (_, i) => `/p${i}`).join(',');
    for (const required_dirs of [many, `/${'x'.repeat(4096)}`]) {
      const res = await request(svc.url).get('/api/socket/health').query({ required_dirs }).expect(400);
      expect(res.body.error.details.map((d: { field: string }) => d.field)).to.deep.equal(['required_dirs']);
    }
    await request(svc.url)
      .get('/api/socket/health')
      .query({ required_dirs: Array.from({ length: 64 }, (_, i) => `/p${i}`).join(',') })
      .expect(200);
    const documented = (await request(svc.url).get('/openapi.json').expect(200)).body.paths['/api/socket/health'].get.parameters[0];
    expect(documented.description).to.contain('at most 64 paths of at most 4096 characters each');
    expect(documented.schema).not.to.have.property('maxLength');
  });

  it('repair: guarded, inside managed dirs only, symlink escapes 403, missing 404, bad mode 400', async () => {
    const managed = path.join(svc.dataDir, 'managed');
    const target = path.join(managed, 'repairme');
    fs.mkdirSync(path.join(target, 'sub'), { recursive: true });
    fs.chmodSync(target, 0o700);
    await request(svc.url).post('/api/socket/repair').send({ target_dir: target }).expect(401);
    await request(svc.url).post('/api/socket/repair').set('Authorization', viewer).send({ target_dir: target }).expect(403);
    const ok = (await request(svc.url).post('/api/socket/repair').set('Authorization', operator).send({ target_dir: target, mode: '0750' }).expect(200)).body;
    expect(ok.status).to.equal('repaired');
    expect(ok.changed).to.be.at.least(1);
    expect(fs.statSync(target).mode & 0o777).to.equal(0o750);
    fs.symlinkSync('/etc', path.join(managed, 'escape'));
    fs.symlinkSync(svc.dataDir, path.join(managed, 'to-data'));
    // what a generated key looks like (these tests set SERVICE_SECRET_KEY, so none was written)
    fs.writeFileSync(path.join(svc.dataDir, 'secret.key'), 'k'.repeat(43), { mode: 0o600 });
    const keyMode = fs.statSync(path.join(svc.dataDir, 'secret.key')).mode & 0o777;
    expect(keyMode).to.equal(0o600);
    for (const t of [
      path.join(managed, 'escape'),
      path.join(managed, '../../etc'),
      '/etc',
      svc.dataDir,
      path.dirname(svc.dataDir),
      path.join(managed, 'to-data'),
    ]) {
      const res = await request(svc.url)
        .post('/api/socket/repair')
        .set('Authorization', operator)
        .send({ target_dir: t, mode: '0777', include_private_files: true });
      expect(res.status, t).to.equal(403);
      expect(res.body.error.details, t).to.have.length(1);
      expect(res.body.error.details[0].field).to.equal('target_dir');
    }
    expect(fs.statSync(path.join(svc.dataDir, 'secret.key')).mode & 0o777).to.equal(keyMode);
    await request(svc.url)
      .post('/api/socket/repair')
      .set('Authorization', operator)
      .send({ target_dir: path.join(managed, 'missing') })
      .expect(404);
    for (const mode of ['999', 'abc', '12', 755]) {
      const res = await request(svc.url).post('/api/socket/repair').set('Authorization', operator).send({ target_dir: target, mode });
      expect(res.status, String(mode)).to.equal(400);
    }
    await request(svc.url).post('/api/socket/repair').set('Authorization', operator).send({}).expect(400);
    // unresolvable paths are the caller's problem, not a 500
    await request(svc.url)
      .post('/api/socket/repair')
      .set('Authorization', operator)
      .send({ target_dir: path.join(managed, 'x'.repeat(300)) })
      .expect(400);
    fs.symlinkSync('loop-b', path.join(managed, 'loop-a'));
    fs.symlinkSync('loop-a', path.join(managed, 'loop-b'));
    await request(svc.url)
      .post('/api/socket/repair')
      .set('Authorization', operator)
      .send({ target_dir: path.join(managed, 'loop-a') })
      .expect(400);
  });

  it('a runner spawned over ws by a holder of socket:container:spawn never gets the data dir', async () => {
    await request(svc.url)
      .post('/api/users')
      .set('X-API-Key', SYSTEM_KEY)
      .send({ username: 'spawner', password: 'spawner-password', groups: ['INT_VIEWER'], extra_permissions: ['socket:container:spawn'] })
      .expect(201);
    const ws = await WsClient.basic(svc, 'spawner', 'spawner-password');
    const spawn = async (ref: string, mounts: unknown[]) => {
      ws.send({
        event: 'socket:request',
        ref,
        payload: { request_id: ref, operation: 'container:spawn', args: { image: TEST_IMAGE, name: `runner-${ref}`, command: ['sleep', '600'], mounts } },
      });
      return (await ws.next('socket:response', (f) => f.ref === ref)).payload;
    };
    try {
      fs.writeFileSync(path.join(svc.dataDir, 'secret.key'), 'k'.repeat(43), { mode: 0o600 });
      fs.mkdirSync(path.join(svc.dataDir, 'managed', 'job'), { recursive: true });
      const refused = [svc.dataDir, path.join(svc.dataDir, 'secret.key'), path.dirname(svc.dataDir), path.join(svc.dataDir, 'managed', '..')];
      for (const [i, source] of refused.entries()) {
        const r = await spawn(`d${i}`, [{ source, target: '/m' }]);
        expect(r.ok, source).to.equal(false);
        expect(r.error.code, source).to.be.oneOf(['forbidden', 'invalid_args']);
      }
      const rw = await spawn('rw', [{ source: path.join(svc.dataDir, 'managed', 'job'), target: '/m', read_only: false }]);
      expect(rw.error).to.deep.equal({ code: 'forbidden', message: 'missing permission socket:container:mount_rw' });
      const ok = await spawn('ok', [{ source: path.join(svc.dataDir, 'managed', 'job'), target: '/m' }]);
      expect(ok.ok, JSON.stringify(ok.error)).to.equal(true);
      const mounts = (await dockerd.docker.getContainer(ok.result.id).inspect()).Mounts;
      expect(mounts).to.have.length(1);
      expect(mounts[0]).to.include({ Source: path.join(fs.realpathSync(svc.dataDir), 'managed', 'job'), RW: false });
      expect((await dockerd.docker.listContainers({ all: true })).map((c) => c.Names[0]).filter((n) => n.startsWith('/runner-'))).to.deep.equal(['/runner-ok']);
    } finally {
      await ws.close();
    }
  });

  it('records a spawn by an allow-list: the command as program, count and digest; environment and labels by name; no secret anywhere in the trail', async () => {
    const secret = 'hunter2-db-password-never-recorded';
    const token = 'svk_label-token-never-recorded-0123456789';
    const command = ['sh', '-c', `DB_PASSWORD=${secret} sleep 600`];
    const ws = await WsClient.connect(svc, { headers: { 'X-API-Key': SYSTEM_KEY } });
    try {
      ws.send({
        event: 'socket:request',
        ref: 'sec',
        payload: {
          request_id: 'sec',
          operation: 'container:spawn',
          args: { image: TEST_IMAGE, name: 'runner-secretive', command, env: { API_TOKEN: token }, labels: { deploy_token: token } },
        },
      });
      const r = (await ws.next('socket:response', (f) => f.ref === 'sec')).payload;
      expect(r.ok, JSON.stringify(r.error)).to.equal(true);
    } finally {
      await ws.close();
    }
    await svc.service.iam.audit.flush();
    const rows = await svc.service.db('audit_events').where({ action: 'socket.operation', target_id: 'container:spawn' });
    const table = JSON.stringify(rows);
    expect(table).not.to.include(secret);
    expect(table).not.to.include(token);
    const event = rows.map((e) => (typeof e.details === 'string' ? JSON.parse(e.details) : e.details)).find((d) => d.args?.name === 'runner-secretive');
    expect(event.args).to.deep.equal({
      image: TEST_IMAGE,
      name: 'runner-secretive',
      network: 'none',
      mounts: [],
      command: { program: 'sh', args: 2, sha256: createHash('sha256').update(JSON.stringify(command)).digest('hex') },
      env: ['API_TOKEN'],
      labels: ['deploy_token'],
    });
  });

  it('container health and mounts ask the daemon at most once per 2 s, however many callers ask at once or in a row', async () => {
    const proxy = await countingProxy(dockerd.socketPath);
    const counted = await startService({ env: { SERVICE_CONTAINER_SOCKET: proxy.socketPath } });
    try {
      // anonymous, as the default allows
      const ask = async () => (await request(counted.url).get('/api/socket/container/health').expect(200)).body;
      const askMounts = async () => (await request(counted.url).get('/api/socket/container/mounts').expect(200)).body;
      const started = Date.now();
      const answers = await Promise.all(Array.from({ length: 40 }, ask));
      const mounts = await Promise.all(Array.from({ length: 40 }, askMounts));
      for (let i = 0; i < 20; i++) {
        answers.push(await ask());
        mounts.push(await askMounts());
      }
      const elapsed = Date.now() - started;
      expect(answers[0]).to.include({ healthy: true });
      for (const a of answers) expect(a).to.deep.equal(answers[0]);
      expect(mounts[0].mounts).to.be.an('object');
      // one call of each per window at most: one, unless this machine took longer than a window
      const windows = 1 + Math.floor(elapsed / 2000);
      for (const call of ['/version', '/info', '/containers/json']) expect(proxy.count(call), `${call} in ${elapsed} ms`).to.be.within(1, windows);
      // an answer older than the window is asked for again
      const before = proxy.count('/info');
      await new Promise((r) => setTimeout(r, 2100));
      await ask();
      expect(proxy.count('/info')).to.equal(before + 1);
    } finally {
      await counted.destroy();
      await proxy.close();
    }
  });

  it('with SERVICE_SOCKET_READS_REQUIRE_AUTH the socket reads are 401 to anonymous callers and answered to signed-in ones', async () => {
    const locked = await startService({ env: { SERVICE_CONTAINER_SOCKET: dockerd.socketPath, SERVICE_SOCKET_READS_REQUIRE_AUTH: 'true' } });
    try {
      await request(locked.url)
        .post('/api/users')
        .set('Authorization', adminAuth())
        .send({ username: 'viewer', password: 'viewer-password', groups: ['INT_VIEWER'] })
        .expect(201);
      const reads = [
        '/api/socket/providers',
        '/api/socket/health',
        '/api/socket/container/health',
        '/api/socket/container/mounts',
        '/api/socket/container/storage-root',
      ];
      for (const read of reads) {
        const anonymous = await request(locked.url).get(read).expect(401);
        expect(anonymous.body.error.code, read).to.equal('unauthorized');
        await request(locked.url).get(read).set('Authorization', viewer).expect(200);
      }
      // the guarded operations are as before
      await request(locked.url).post('/api/socket/container/cleanup').send({ max_age_minutes: 0 }).expect(401);
      await request(locked.url).post('/api/socket/container/cleanup').set('Authorization', viewer).send({ max_age_minutes: 0 }).expect(403);
      // and the API document says what is enforced
      const doc = (await request(locked.url).get('/openapi.json').expect(200)).body;
      for (const read of reads) expect(doc.paths[read].get.security, read).not.to.deep.include({});
    } finally {
      await locked.destroy();
    }
    // off (the default): the same reads answer anonymous callers
    for (const read of ['/api/socket/providers', '/api/socket/health', '/api/socket/container/mounts', '/api/socket/container/storage-root'])
      await request(svc.url).get(read).expect(200);
    const doc = (await request(svc.url).get('/openapi.json').expect(200)).body;
    expect(doc.paths['/api/socket/providers'].get.security).to.deep.include({});
  });

  it('a stopped daemon: unavailable in the list, healthy false, 503 on cleanup, no crash', async () => {
    await dockerd.stop();
    await new Promise((r) => setTimeout(r, 2500)); // availability is cached briefly
    const list = (await request(svc.url).get('/api/socket/providers').expect(200)).body;
    expect(list.providers[0].available).to.equal(false);
    // why names the daemon's socket: for those who administer a host service only
    expect(list.providers[0].reason).to.equal('not available');
    expect(list.host_facts_hidden).to.equal(true);
    expect(list.available).to.deep.equal([]);
    const operatorList = (await request(svc.url).get('/api/socket/providers').set('Authorization', operator).expect(200)).body;
    // the socket file of the stopped daemon may linger: either way the reason names it
    expect(operatorList.providers[0].reason).to.be.a('string').and.include(dockerd.socketPath);
    const h = (await request(svc.url).get('/api/socket/container/health').expect(200)).body;
    expect(h.healthy).to.equal(false);
    expect(h.error).to.be.a('string');
    expect(JSON.stringify(h)).not.to.include(dockerd.socketPath);
    const c = await request(svc.url).post('/api/socket/container/cleanup').set('Authorization', operator).send({ max_age_minutes: 0 }).expect(503);
    expect(c.body.error.code).to.equal('unavailable');
    // the operator may run it, so reads why not
    expect(c.body.error.message).to.include(dockerd.socketPath);
    // a bad body is the caller's 400 whether the daemon is up or not: the args are checked first
    for (const body of [{ max_age_minutes: -1 }, { prefix: '.*' }, { surprise: 1 }]) {
      const bad = await request(svc.url).post('/api/socket/container/cleanup').set('Authorization', operator).send(body);
      expect(bad.status, JSON.stringify(body)).to.equal(400);
      expect(bad.body.error.code).to.equal('validation_failed');
    }
    await request(svc.url).get('/readyz').expect(200);
  });
});
