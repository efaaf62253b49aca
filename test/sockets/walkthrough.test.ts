import { expect } from 'chai';
import fs from 'node:fs';
import path from 'node:path';
import request from 'supertest';
import { startDockerd, TEST_IMAGE, type TestDockerd } from '../support/dockerd.js';
import { adminAuth, basic, startService, testEnv, type TestService } from '../support/service.js';
import { cli } from '../cli/helpers.js';
import { eventually } from './helpers.js';

/**
 * docs/sockets.md, "From a fresh install to a first container", as a new user follows it: the
 * bootstrap admin is refused the host and told where to read; an account of one's own becomes a
 * superadmin with the CLI (the bootstrap admin's flag is the environment's), gives a group the
 * permissions, and a member of it starts a container over HTTP.
 */
describe('sockets: the walk from a fresh install to a first container (docs/sockets.md)', function () {
  this.timeout(60_000);
  let dockerd: TestDockerd;
  let svc: TestService;

  before(async () => {
    dockerd = await startDockerd();
    // the permission cache short, as an operator would wait for it (the CLI is another process)
    svc = await startService({ env: { SERVICE_CONTAINER_SOCKET: dockerd.socketPath, SERVICE_PERMISSION_CACHE_TTL_MS: '200' } });
  });
  after(async () => {
    await svc?.destroy();
    await dockerd?.stop();
  });

  it('refuses the bootstrap admin, names the way; after `user promote` of an own account the group is made and its member runs a container', async () => {
    const group = { name: 'operators', permissions: ['socket:container:spawn', 'socket:dns:read', 'socket:dns:write', 'socket:init:control'] };
    const refused = await request(svc.url).post('/api/groups').set('Authorization', adminAuth()).send(group).expect(403);
    expect(refused.body.error.message).to.include('docs/sockets.md');
    expect(refused.body.error.details).to.deep.include({ docs: 'docs/sockets.md#who-may-grant-what' });
    // the anchor the answer names is a heading of the document
    const doc = fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'sockets.md'), 'utf8');
    expect(doc).to.match(/^## Who may grant what$/m);

    // the bootstrap admin's flag follows SERVICE_ADMIN_FORCE_SUPERADMIN at every start: the CLI says so instead of a change the next start undoes
    const env = testEnv(svc.dataDir, svc.databaseUrl ?? null);
    const undone = await cli(env, ['user', 'promote', 'admin']);
    expect(undone.code).to.equal(1);
    expect(undone.stderr).to.include('SERVICE_ADMIN_FORCE_SUPERADMIN').and.include('make another account superadmin');
    const created = await cli(env, ['user', 'create', 'dana', '--group', 'INT_ADMIN', '--password-stdin'], 'dana-superadmin-password\n');
    expect(created.code, created.stderr).to.equal(0);
    const promoted = await cli(env, ['user', 'promote', 'dana']);
    expect(promoted.code, promoted.stderr).to.equal(0);
    const dana = basic('dana', 'dana-superadmin-password');
    await eventually(async () => (await request(svc.url).post('/api/groups').set('Authorization', dana).send(group)).status === 201, 5000);
    await request(svc.url)
      .post('/api/users')
      .set('Authorization', dana)
      .send({ username: 'olga', password: 'olga-operator-password', groups: ['INT_USER', 'operators'] })
      .expect(201);
    const olga = basic('olga', 'olga-operator-password');

    // the arguments are documented: the API document names the required ones
    const openapi = (await request(svc.url).get('/openapi.json').expect(200)).body;
    expect(openapi.paths['/api/socket/container/spawn'].post.requestBody.content['application/json'].schema.required).to.include.members(['image', 'name']);

    const work = path.join(svc.dataDir, 'managed', 'work');
    fs.mkdirSync(work, { recursive: true });
    const spawned = await request(svc.url)
      .post('/api/socket/container/spawn')
      .set('Authorization', olga)
      .send({ image: TEST_IMAGE, name: 'runner-hello', command: ['sleep', '30'], mounts: [{ source: work, target: '/work' }] })
      .expect(200);
    expect(spawned.body.name).to.equal('runner-hello');
    const runners = await request(svc.url).get('/api/socket/container/runners').set('Authorization', olga).expect(200);
    expect(runners.body.runners.map((r: { name: string }) => r.name)).to.include('runner-hello');
    const inspect = await dockerd.docker.getContainer('runner-hello').inspect();
    expect(inspect.Mounts.map((m) => ({ source: m.Source, rw: m.RW }))).to.deep.equal([{ source: fs.realpathSync(work), rw: false }]);

    // the trail has it, as the member's
    type Event = { target?: { id?: string }; outcome: string; actor: { username: string } };
    let spawn: Event | undefined;
    // the trail's writes are batched: the event is there within moments
    await eventually(async () => {
      const trail = await request(svc.url).get('/api/audit').query({ action: 'socket.operation' }).set('Authorization', adminAuth()).expect(200);
      spawn = (trail.body.events as Event[]).find((e) => e.target?.id === 'container:spawn');
      return Boolean(spawn);
    });
    expect(spawn).to.deep.include({ outcome: 'success' });
    expect(spawn!.actor.username).to.equal('olga');
  });
});
