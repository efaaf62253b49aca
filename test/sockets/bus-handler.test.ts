import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { EventBus } from '../../src/bus/bus.js';
import type { SocketRequestPayload, SocketResponsePayload } from '../../src/bus/events.js';
import { SocketRequests, type SocketCaller } from '../../src/sockets/bus-handler.js';
import { ContainerProvider, RUNNER_LABEL } from '../../src/sockets/container-provider.js';
import { socketErrorToHttp } from '../../src/sockets/errors.js';
import { MountGuardian } from '../../src/sockets/mount-guardian.js';
import { SocketRegistry } from '../../src/sockets/registry.js';
import { startDockerd, type TestDockerd } from '../support/dockerd.js';
import { quietLogger } from './helpers.js';

let seq = 0;
const nextId = () => `req-${process.pid}-${++seq}`;

/** Sends one socket:request on the bus and waits for the response that carries its request_id. */
async function ask(bus: EventBus, req: Omit<SocketRequestPayload, 'request_id'> & { request_id?: string }): Promise<SocketResponsePayload> {
  const request_id = req.request_id ?? nextId();
  const answer = bus.waitFor('socket:response', { match: (r) => r.request_id === request_id, timeoutMs: 15_000 });
  bus.emit('socket:request', { ...req, request_id });
  return answer;
}

function callerWith(...permissions: string[]): SocketCaller {
  return { allows: (p) => permissions.includes(p) };
}

describe('sockets/bus-handler (real dockerd)', function () {
  this.timeout(60_000);
  let dockerd: TestDockerd;
  let bus: EventBus;
  let registry: SocketRegistry;
  let requests: SocketRequests;
  let dataDir: string;
  let managed: string;
  let responses: SocketResponsePayload[];

  before(async () => {
    dockerd = await startDockerd();
    dataDir = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'bh-')));
    managed = path.join(dataDir, 'managed');
    await fsp.mkdir(managed);
    const logger = quietLogger();
    bus = new EventBus(logger);
    registry = new SocketRegistry({ logger });
    registry.register(ContainerProvider, {
      owner: 'core',
      options: { socketPath: dockerd.socketPath, runnerPrefix: 'brun-', dataDir, selfContainerId: null },
    });
    requests = new SocketRequests({ registry, mountGuardian: new MountGuardian({ managedDirs: [managed], dataDir, logger }), logger });
    requests.attachBus(bus);
    responses = [];
    bus.on('socket:response', (r) => {
      responses.push(r);
    });
  });

  after(async () => {
    bus?.removeAll();
    await dockerd?.stop();
    if (dataDir) await fsp.rm(dataDir, { recursive: true, force: true });
  });

  afterEach(async () => {
    for (const c of await dockerd.docker.listContainers({ all: true })) await dockerd.docker.getContainer(c.Id).remove({ force: true });
  });

  it('provider:list', async () => {
    const r = await ask(bus, { operation: 'provider:list' });
    expect(r).to.deep.include({ operation: 'provider:list', provider: null, ok: true, error: null });
    const result = r.result as { providers: Array<{ name: string; available: boolean; plugin: string | null }>; available: string[]; total: number };
    expect(result.total).to.equal(1);
    expect(result.available).to.deep.equal(['container']);
    expect(result.providers[0]).to.include({ name: 'container', available: true, plugin: null, socket_path: dockerd.socketPath });
  });

  it('registry-level operations accept a provider that can do what is asked: provider:list narrows to it, mounts:* name it', async () => {
    const r = await ask(bus, { operation: 'provider:list', provider: 'container' });
    expect(r).to.deep.include({ operation: 'provider:list', provider: 'container', ok: true, error: null });
    expect((r.result as { providers: Array<{ name: string }> }).providers.map((p) => p.name)).to.deep.equal(['container']);
    const check = await ask(bus, { operation: 'mounts:check', provider: 'container', args: { paths: [managed] } });
    expect(check).to.deep.include({ operation: 'mounts:check', provider: 'container', ok: true, error: null });
    // the container provider does not repair permissions (the guardian does, on the host): naming it is refused
    const repair = await ask(bus, { operation: 'mounts:repair', provider: 'container', args: { target_dir: managed } });
    expect(repair.error).to.deep.include({ code: 'invalid_args', message: 'provider: container does not declare can_repair_permissions' });
  });

  it('container:health, container:mounts, container:storage_root, container:runners', async () => {
    const health = await ask(bus, { operation: 'container:health', provider: 'container' });
    expect(health).to.deep.include({ ok: true, provider: 'container', error: null });
    expect(health.result).to.deep.include({ healthy: true, containers_total: 0 });

    const mounts = await ask(bus, { operation: 'container:mounts' });
    expect(mounts.provider).to.equal('container');
    expect(mounts.result).to.deep.equal({ mounts: {} });

    const root = await ask(bus, { operation: 'container:storage_root', args: {} });
    expect(root.result).to.deep.equal({ storage_root: null });

    await dockerd.docker.createContainer({
      name: 'brun-1',
      Image: dockerd.image,
      Labels: { [RUNNER_LABEL]: 'true' },
      Cmd: ['true'],
      HostConfig: { NetworkMode: 'none' },
    });
    await dockerd.docker.createContainer({ name: 'brun-not-ours', Image: dockerd.image, Cmd: ['true'], HostConfig: { NetworkMode: 'none' } });
    const runners = await ask(bus, { operation: 'container:runners' });
    expect((runners.result as { runners: Array<{ name: string }> }).runners.map((r) => r.name)).to.deep.equal(['brun-1']);
  });

  it('container:resolve_mounts', async () => {
    const r = await ask(bus, { operation: 'container:resolve_mounts', args: { targets: ['/srv/data'] } });
    expect(r.ok).to.equal(true);
    expect(r.result).to.deep.equal({ in_container: false, container_id: null, resolved: { '/srv/data': null } });
    const missing = await ask(bus, { operation: 'container:resolve_mounts' });
    expect(missing.error?.code).to.equal('invalid_args');
    const relative = await ask(bus, { operation: 'container:resolve_mounts', args: { targets: ['srv/data'] } });
    expect(relative.error?.code).to.equal('invalid_args');
  });

  it('container:spawn then container:cleanup (dry run, then for real)', async () => {
    const spawned = await ask(bus, {
      operation: 'container:spawn',
      args: { image: dockerd.image, name: 'brun-job', command: ['sleep', '600'], env: { TOKEN: 'x' } },
    });
    expect(spawned.ok, JSON.stringify(spawned.error)).to.equal(true);
    const { id } = spawned.result as { id: string; name: string };
    expect((await dockerd.docker.getContainer(id).inspect()).HostConfig.NetworkMode).to.equal('none');
    await dockerd.docker.createContainer({ name: 'keep', Image: dockerd.image, Cmd: ['true'], HostConfig: { NetworkMode: 'none' } });
    await dockerd.docker.createContainer({ name: 'brun-not-ours', Image: dockerd.image, Cmd: ['true'], HostConfig: { NetworkMode: 'none' } });

    const dry = await ask(bus, { operation: 'container:cleanup', args: { max_age_minutes: 0, dry_run: true } });
    expect(dry.result).to.deep.equal({ dry_run: true, removed: [{ id, name: 'brun-job' }], errors: [] });
    expect(await dockerd.docker.listContainers({ all: true })).to.have.length(3);

    // defaults: the provider's runner prefix, 60 minutes: a fresh runner stays
    const young = await ask(bus, { operation: 'container:cleanup' });
    expect(young.result).to.deep.equal({ dry_run: false, removed: [], errors: [] });

    const real = await ask(bus, { operation: 'container:cleanup', args: { prefix: 'brun-', max_age_minutes: 0 } });
    expect(real.result).to.deep.equal({ dry_run: false, removed: [{ id, name: 'brun-job' }], errors: [] });
    expect((await dockerd.docker.listContainers({ all: true })).map((c) => c.Names[0]).sort()).to.deep.equal(['/brun-not-ours', '/keep']);
  });

  it('mounts:check and mounts:repair', async () => {
    const jobs = path.join(managed, 'jobs');
    await fsp.mkdir(jobs, { mode: 0o700 });
    const check = await ask(bus, { operation: 'mounts:check', args: { paths: [jobs, '/etc', dataDir] } });
    expect(check.ok).to.equal(true);
    const res = check.result as { healthy: boolean; mounts: Record<string, { mode: string | null; error: string | null }> };
    expect(res.healthy).to.equal(false);
    expect(res.mounts[jobs]).to.include({ mode: '0700', error: null });
    expect(res.mounts['/etc'].error).to.equal('not_managed');
    expect(res.mounts[dataDir].error).to.equal('not_managed');

    const repaired = await ask(bus, { operation: 'mounts:repair', args: { target_dir: jobs, mode: '0755' } });
    expect(repaired.result).to.deep.include({ status: 'repaired', target_dir: jobs, changed: 1 });
    const forbidden = await ask(bus, { operation: 'mounts:repair', args: { target_dir: '/etc' } });
    expect(forbidden.error?.code).to.equal('forbidden');
    const missing = await ask(bus, { operation: 'mounts:repair', args: { target_dir: path.join(managed, 'nope') } });
    expect(missing.error?.code).to.equal('not_found');
    const badMode = await ask(bus, { operation: 'mounts:repair', args: { target_dir: jobs, mode: 755 } });
    expect(badMode.error).to.deep.include({ code: 'invalid_args', details: [{ field: 'mode', message: 'must be a string' }] });
  });

  it('a read-write mount needs its own permission on top of spawn', async () => {
    const src = path.join(managed, 'rw-src');
    await fsp.mkdir(src, { recursive: true });
    const args = (read_only: boolean) => ({
      image: dockerd.image,
      name: `brun-rw-${read_only}`,
      command: ['sleep', '600'],
      mounts: [{ source: src, target: '/w', read_only }],
    });
    const spawner = callerWith('socket:container:spawn');
    const denied = await requests.handle({ request_id: 'rw1', operation: 'container:spawn', args: args(false) }, spawner);
    expect(denied.error).to.deep.equal({ code: 'forbidden', message: 'missing permission socket:container:mount_rw' });
    expect(await dockerd.docker.listContainers({ all: true })).to.deep.equal([]);
    const ro = await requests.handle({ request_id: 'rw2', operation: 'container:spawn', args: args(true) }, spawner);
    expect(ro.ok, JSON.stringify(ro.error)).to.equal(true);
    // read-only is also the default when the request says nothing
    const dflt = await requests.handle(
      { request_id: 'rw3', operation: 'container:spawn', args: { ...args(true), name: 'brun-default', mounts: [{ source: src, target: '/w' }] } },
      spawner,
    );
    const info = await dockerd.docker.getContainer((dflt.result as { id: string }).id).inspect();
    expect(info.Mounts[0]).to.include({ Source: src, RW: false });
    // a read-write mount never shares its source with another runner's mount
    for (const c of await dockerd.docker.listContainers({ all: true })) await dockerd.docker.getContainer(c.Id).remove({ force: true });
    const rw = await requests.handle(
      { request_id: 'rw4', operation: 'container:spawn', args: args(false) },
      callerWith('socket:container:spawn', 'socket:container:mount_rw'),
    );
    expect(rw.ok, JSON.stringify(rw.error)).to.equal(true);
    expect((await dockerd.docker.getContainer((rw.result as { id: string }).id).inspect()).Mounts[0]).to.include({ Source: src, RW: true });
  });

  it('correlates concurrent requests by request_id and answers each exactly once', async () => {
    const ids = ['a', 'b', 'c'].map((s) => `${nextId()}-${s}`);
    const ops = ['container:health', 'provider:list', 'container:nope'];
    const before = responses.length;
    const answers = await Promise.all(ids.map((request_id, i) => ask(bus, { request_id, operation: ops[i] })));
    answers.forEach((a, i) => {
      expect(a.request_id).to.equal(ids[i]);
      expect(a.operation).to.equal(ops[i]);
    });
    expect(answers.map((a) => a.ok)).to.deep.equal([true, true, false]);
    await new Promise((r) => setTimeout(r, 50));
    expect(
      responses
        .slice(before)
        .map((r) => r.request_id)
        .sort(),
    ).to.deep.equal([...ids].sort());
  });

  it('answers unknown providers and operations with their codes', async () => {
    const cases: Array<[Omit<SocketRequestPayload, 'request_id'>, string]> = [
      [{ operation: 'dhcp:leases' }, 'unknown_provider'],
      [{ operation: 'container:health', provider: 'nope' }, 'unknown_provider'],
      [{ operation: 'container:frobnicate' }, 'unknown_operation'],
      [{ operation: 'container:constructor' }, 'unknown_operation'],
      [{ operation: 'container:__proto__' }, 'unknown_operation'],
      [{ operation: 'garbage' }, 'unknown_operation'],
      [{ operation: 'provider:list', provider: 'nope' }, 'unknown_provider'],
      [{ operation: 'mounts:check', provider: 'nope', args: { paths: ['/'] } }, 'unknown_provider'],
    ];
    for (const [req, code] of cases) {
      const r = await ask(bus, req);
      expect(r.ok, JSON.stringify(req)).to.equal(false);
      expect(r.error?.code, JSON.stringify(req)).to.equal(code);
      expect(r.result).to.equal(null);
    }
  });

  it('answers malformed requests and bad args with invalid_args', async () => {
    const cases: Array<Record<string, unknown>> = [
      { operation: 'container:cleanup', args: { prefix: '' } },
      { operation: 'container:cleanup', args: { prefix: 'brun-.*' } },
      { operation: 'container:cleanup', args: { prefix: '^brun' } },
      { operation: 'container:cleanup', args: { prefix: 'a|b' } },
      { operation: 'container:cleanup', args: { max_age_minutes: -1 } },
      { operation: 'container:cleanup', args: { max_age_minutes: 'abc' } },
      { operation: 'container:cleanup', args: { max_age_minutes: '5' } },
      { operation: 'container:cleanup', args: { dry_run: 'yes' } },
      { operation: 'container:cleanup', args: { unexpected: true } },
      { operation: 'container:cleanup', args: ['not', 'an', 'object'] },
      { operation: 'container:spawn', args: { image: dockerd.image } },
      { operation: 'container:spawn', args: { image: dockerd.image, name: 'other-name' } },
      { operation: 'container:health', args: { extra: 1 } },
      { operation: 42 },
      { operation: 'container:health', provider: '' },
    ];
    for (const req of cases) {
      const r = await ask(bus, req as never);
      expect(r.error?.code, JSON.stringify(req)).to.equal('invalid_args');
    }
    // no request_id: still answered (with an empty id), nothing thrown
    const anonymous = bus.waitFor('socket:response', { match: (r) => r.request_id === '', timeoutMs: 5000 });
    bus.emit('socket:request', { operation: 'provider:list' } as never);
    expect((await anonymous).error?.code).to.equal('invalid_args');
    expect(await dockerd.docker.listContainers({ all: true })).to.deep.equal([]);
  });

  it('checks the caller permission for mutating operations (ws/HTTP path)', async () => {
    const handle = requests.handle;
    const read = await handle({ request_id: 'r1', operation: 'container:health' }, null);
    expect(read.ok).to.equal(true);
    const list = await handle({ request_id: 'r2', operation: 'provider:list' }, callerWith());
    expect(list.ok).to.equal(true);

    const anonCleanup = await handle({ request_id: 'r3', operation: 'container:cleanup', args: { dry_run: true } }, null);
    expect(anonCleanup.error).to.deep.equal({ code: 'forbidden', message: 'missing permission socket:container:cleanup' });
    const cleaner = callerWith('socket:container:cleanup');
    expect((await handle({ request_id: 'r4', operation: 'container:cleanup', args: { dry_run: true } }, cleaner)).ok).to.equal(true);
    const spawn = await handle({ request_id: 'r5', operation: 'container:spawn', args: { image: dockerd.image, name: 'brun-x' } }, cleaner);
    expect(spawn.error?.code).to.equal('forbidden');
    const repair = await handle({ request_id: 'r6', operation: 'mounts:repair', args: { target_dir: managed } }, cleaner);
    expect(repair.error?.code).to.equal('forbidden');
    const throwing: SocketCaller = {
      allows: () => {
        throw new Error('boom');
      },
    };
    expect((await handle({ request_id: 'r7', operation: 'container:cleanup' }, throwing)).error?.code).to.equal('forbidden');
    expect(await dockerd.docker.listContainers({ all: true })).to.deep.equal([]);

    expect(socketErrorToHttp({ code: 'forbidden', message: 'x' }).status).to.equal(403);
    expect(socketErrorToHttp({ code: 'invalid_args', message: 'x' }).status).to.equal(400);
    expect(socketErrorToHttp({ code: 'unavailable', message: 'x' }).status).to.equal(503);
  });

  describe('when the daemon is down', () => {
    let down: TestDockerd;
    let localBus: EventBus;

    before(async () => {
      down = await startDockerd();
      const logger = quietLogger();
      localBus = new EventBus(logger);
      const reg = new SocketRegistry({ logger });
      reg.register(ContainerProvider, { owner: 'core', options: { socketPath: down.socketPath, availabilityTtlMs: 0 } });
      new SocketRequests({ registry: reg, logger }).attachBus(localBus);
      await down.stop();
    });
    after(async () => {
      localBus?.removeAll();
      await down?.stop();
    });

    it('answers unavailable, and health with healthy false', async () => {
      const cleanup = await ask(localBus, { operation: 'container:cleanup', args: { max_age_minutes: 0 } });
      expect(cleanup).to.deep.include({ ok: false, provider: 'container' });
      expect(cleanup.error?.code).to.equal('unavailable');
      const health = await ask(localBus, { operation: 'container:health' });
      expect(health.ok).to.equal(true);
      expect(health.result).to.deep.include({ healthy: false });
      const list = await ask(localBus, { operation: 'provider:list' });
      expect((list.result as { available: string[] }).available).to.deep.equal([]);
      const check = await ask(localBus, { operation: 'mounts:check', args: { paths: ['/'] } });
      expect(check.error?.code).to.equal('unknown_provider'); // no guardian configured on this bus
    });
  });
});
