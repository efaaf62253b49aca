import fs from 'node:fs';
import { execFile } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { ContainerProvider, RUNNER_LABEL, containerIdFromProc, hostPathFor } from '../../src/sockets/container-provider.js';
import { containerSuite, names, output, sleeper } from './docker-helpers.js';
import { startDockerd, type TestDockerd } from '../support/dockerd.js';
import { expectSocketError, quietLogger } from './helpers.js';

const run = promisify(execFile);

describe('sockets/container-provider (real dockerd)', function () {
  this.timeout(60_000);
  const suite = containerSuite();
  const logs = suite.logs;
  let dockerd: TestDockerd;
  let provider: ContainerProvider;
  let workDir: string;
  before(() => ({ dockerd, provider, workDir } = suite));

  it('is available and reports daemon health with counts', async () => {
    expect(await provider.isAvailable()).to.equal(true);
    const before = await provider.health_check();
    expect(before).to.deep.include({ healthy: true, containers_running: 0, containers_total: 0, images: 1 });
    const daemon = before.daemon as { version: string; api_version: string };
    expect(daemon.version).to.match(/^\d+\.\d+/);
    expect(daemon.api_version).to.match(/^1\.\d+$/);
    expect(before).not.to.have.property('error');

    await sleeper(dockerd.docker, dockerd.image, 'runner-h1');
    await sleeper(dockerd.docker, dockerd.image, 'other-h2', false);
    const after = await provider.health_check();
    expect(after).to.deep.include({ healthy: true, containers_running: 1, containers_total: 2, images: 1 });
  });

  it('spawns a runner without network, with env, labels and a read-only bind mount; env values are not logged', async () => {
    const hostDir = path.join(workDir, 'managed', 'spawn-src');
    await fsp.mkdir(hostDir, { recursive: true });
    const secret = 's3cr3t-value-that-must-not-be-logged';
    const spawned = await provider.spawn({
      image: dockerd.image,
      name: 'runner-spawn1',
      env: { JOB_TOKEN: secret, EMPTY: '' },
      mounts: [{ source: hostDir, target: '/job', read_only: true }],
      command: ['sleep', '600'],
      labels: { 'job.id': '42' },
    });
    expect(spawned.name).to.equal('runner-spawn1');
    expect(spawned.id).to.match(/^[0-9a-f]{64}$/);

    const info = await dockerd.docker.getContainer(spawned.id).inspect();
    expect(info.State.Running).to.equal(true);
    expect(info.HostConfig.NetworkMode).to.equal('none');
    expect(info.HostConfig.Privileged).to.equal(false);
    expect(Object.keys(info.NetworkSettings.Networks)).to.deep.equal(['none']);
    expect(info.Config.Env).to.include(`JOB_TOKEN=${secret}`);
    expect(info.Config.Labels).to.include({ 'job.id': '42', [RUNNER_LABEL]: 'true' });
    expect(info.Mounts).to.have.length(1);
    expect(info.Mounts[0]).to.include({ Type: 'bind', Source: hostDir, Destination: '/job', RW: false });

    expect(logs.text()).to.include('runner-spawn1');
    expect(logs.text()).not.to.include(secret);
  });

  it("a runner's name taken is the daemon's 409, a conflict (not a failure of the daemon)", async () => {
    await provider.spawn({ image: dockerd.image, name: 'runner-dup', command: ['sleep', '600'] });
    const taken = await expectSocketError(provider.spawn({ image: dockerd.image, name: 'runner-dup', command: ['sleep', '600'] }), 'conflict');
    expect(taken.message).to.match(/runner-dup.*already in use/);
    expect(taken.details).to.deep.equal({ status: 409 });
  });

  it('passes a requested network to the daemon (and only then leaves "none")', async () => {
    // no network is created here: the daemon refusing an unknown one shows the request reached it
    const err = await expectSocketError(
      provider.spawn({ image: dockerd.image, name: 'runner-net', command: ['sleep', '600'], network: 'jobnet' }),
      'not_found',
    );
    expect(err.message).to.match(/jobnet/);
    expect(await names(dockerd.docker)).to.deep.equal([]);
  });

  it('refuses spawn requests that break the rules', async () => {
    const base = { image: dockerd.image, command: ['true'] };
    // a link to the folder holding the daemon socket must not get past the guard
    const linkToSocketDir = path.join(workDir, 'sock-link');
    fs.symlinkSync(dockerd.dir, linkToSocketDir);
    const bad: Array<Record<string, unknown>> = [
      { ...base, name: 'worker-1' }, // lacks the runner prefix
      { ...base, name: 'runner-x', network: 'host' },
      { ...base, name: 'runner-x', mounts: [{ source: `${workDir}/../etc`, target: '/e' }] },
      { ...base, name: 'runner-x', mounts: [{ source: 'relative', target: '/e' }] },
      { ...base, name: 'runner-x', mounts: [{ source: path.join(workDir, 'managed', 'does-not-exist'), target: '/m' }] },
      { ...base, name: 'runner-x', env: { 'BAD-KEY': 'v' } },
      { ...base, name: 'runner-x', env: { N: 5 } },
      { ...base, name: 'runner-x', privileged: true },
      { name: 'runner-x' },
    ];
    for (const request of bad) {
      await expectSocketError(provider.spawn(request as never), 'invalid_args');
    }
    // outside the mount roots, or the daemon socket (even when a root holds it): forbidden
    const socketRoot = new ContainerProvider({ socketPath: dockerd.socketPath, dataDir: workDir, mountRoots: [dockerd.dir] }, quietLogger());
    const refused: Array<[ContainerProvider, string]> = [
      [provider, '/'],
      [provider, path.join(workDir, 'does-not-exist')],
      [provider, dockerd.dir],
      [provider, linkToSocketDir],
      [socketRoot, dockerd.socketPath],
      [socketRoot, dockerd.dir], // holds the socket
      [socketRoot, linkToSocketDir],
    ];
    for (const [p, source] of refused) {
      const err = await expectSocketError(p.spawn({ ...base, name: 'runner-x', mounts: [{ source, target: '/m' }] }), 'forbidden');
      expect(err.details, source).to.deep.equal([{ field: 'mounts[0].source', message: err.message.replace(/^mounts\[0\]\.source /, '') }]);
    }
    expect(await names(dockerd.docker)).to.deep.equal([]);

    // an image the daemon does not have: its 404, not a failure of the daemon
    const missing = await expectSocketError(provider.spawn({ image: 'no-such-image:1', name: 'runner-noimg' }), 'not_found');
    expect(missing.message).to.match(/no such image|not found|pull access/i);
  });

  it('lists its own runners by prefix', async () => {
    await sleeper(dockerd.docker, dockerd.image, 'runner-a');
    await sleeper(dockerd.docker, dockerd.image, 'runner-b', false);
    await sleeper(dockerd.docker, dockerd.image, 'other-c');
    await sleeper(dockerd.docker, dockerd.image, 'runner-foreign', true, false); // not made by this service
    const runners = await provider.runners();
    expect(runners.map((r) => r.name).sort()).to.deep.equal(['runner-a', 'runner-b']);
    const a = runners.find((r) => r.name === 'runner-a')!;
    expect(a.state).to.equal('running');
    expect(a.image).to.equal(dockerd.image);
    expect(a.id).to.match(/^[0-9a-f]{64}$/);
    expect(Date.parse(a.created_at)).to.be.closeTo(Date.now(), 120_000);
    expect(runners.find((r) => r.name === 'runner-b')!.state).to.equal('created');
    expect((await provider.runners('other-')).map((r) => r.name)).to.deep.equal(['other-c']);
    await expectSocketError(provider.runners(''), 'invalid_args');
  });

  describe('cleanup_stale', () => {
    beforeEach(async () => {
      await sleeper(dockerd.docker, dockerd.image, 'runner-old1');
      await sleeper(dockerd.docker, dockerd.image, 'runner-old2', false);
      await sleeper(dockerd.docker, dockerd.image, 'keep-me');
      await sleeper(dockerd.docker, dockerd.image, 'xrunner-not-prefixed', false);
      await sleeper(dockerd.docker, dockerd.image, 'runnerX', false);
      await sleeper(dockerd.docker, dockerd.image, 'runner-foreign', true, false);
    });

    it('dry run reports what would go and removes nothing', async () => {
      const result = await provider.cleanup_stale('runner-', 0, { dry_run: true });
      expect(result.dry_run).to.equal(true);
      expect(result.removed.map((r) => r.name).sort()).to.deep.equal(['runner-old1', 'runner-old2']);
      expect(result.errors).to.deep.equal([]);
      expect(await names(dockerd.docker)).to.have.length(6);
    });

    it('keeps containers younger than max_age_minutes', async () => {
      const result = await provider.cleanup_stale('runner-', 60);
      expect(result.removed).to.deep.equal([]);
      expect(await names(dockerd.docker)).to.have.length(6);
    });

    it('with max age 0 removes only its own prefixed containers, running ones included', async () => {
      const result = await provider.cleanup_stale('runner-', 0);
      expect(result.dry_run).to.equal(false);
      expect(result.removed.map((r) => r.name).sort()).to.deep.equal(['runner-old1', 'runner-old2']);
      expect(result.errors).to.deep.equal([]);
      expect(await names(dockerd.docker)).to.deep.equal(['keep-me', 'runner-foreign', 'runnerX', 'xrunner-not-prefixed']);
    });

    it('never removes a container it did not create, whatever the prefix (a prod database with its volume stays)', async () => {
      const db = await dockerd.docker.createContainer({
        name: 'prod-database',
        Image: dockerd.image,
        Cmd: ['sleep', '600'],
        HostConfig: { NetworkMode: 'none', Mounts: [{ Type: 'volume', Source: 'prod-data', Target: '/var/lib/db' }] },
      });
      await db.start();
      const result = await provider.cleanup_stale('prod', 0);
      expect(result).to.deep.equal({ dry_run: false, removed: [], errors: [] });
      expect((await db.inspect()).State.Running).to.equal(true);
      expect((await dockerd.docker.listVolumes()).Volumes.map((v) => v.Name)).to.include('prod-data');
    });

    it('treats the prefix literally: "." is not a wildcard', async () => {
      await sleeper(dockerd.docker, dockerd.image, 'run.er-literal', false);
      const result = await provider.cleanup_stale('run.er-', 0);
      expect(result.removed.map((r) => r.name)).to.deep.equal(['run.er-literal']);
      expect(await names(dockerd.docker)).to.include.members(['runner-old1', 'runner-old2']);
    });

    it('refuses an empty prefix, regex characters and bad ages', async () => {
      for (const prefix of ['', '.*', 'runner-.*', '^runner', 'runner-(a|b)', '-runner', 'run ner', 'runner/']) {
        await expectSocketError(provider.cleanup_stale(prefix, 0), 'invalid_args');
      }
      for (const age of [-1, Number.NaN, Number.POSITIVE_INFINITY, '5' as unknown as number]) {
        await expectSocketError(provider.cleanup_stale('runner-', age), 'invalid_args');
      }
      expect(await names(dockerd.docker)).to.have.length(6);
    });

    it('reports a failed removal in errors, never in removed', async () => {
      const victim = await dockerd.docker.getContainer('runner-old1').inspect();
      // an immutable file in the container's directory makes the daemon's removal fail
      const pinned = path.join(dockerd.dir, 'root', 'containers', victim.Id, 'hostname');
      await run('chattr', ['+i', pinned]);
      try {
        const result = await provider.cleanup_stale('runner-', 0);
        expect(result.removed.map((r) => r.name)).to.deep.equal(['runner-old2']);
        expect(result.errors).to.have.length(1);
        expect(result.errors[0]).to.include({ id: victim.Id, name: 'runner-old1' });
        expect(result.errors[0].error).to.match(/remove failed/);
      } finally {
        await run('chattr', ['-i', pinned]);
      }
    });
  });

  describe('mounts', () => {
    let hostDir: string;
    let runnerId: string;

    beforeEach(async () => {
      hostDir = await fsp.mkdtemp(path.join(workDir, 'bind-'));
      const c = await dockerd.docker.createContainer({
        name: 'runner-mounted',
        Image: dockerd.image,
        Cmd: ['sleep', '600'],
        HostConfig: {
          NetworkMode: 'none',
          Mounts: [
            { Type: 'bind', Source: hostDir, Target: '/srv/data' },
            { Type: 'bind', Source: path.join(hostDir), Target: '/srv/data/nested', ReadOnly: true },
          ],
        },
      });
      await c.start();
      runnerId = c.id;
    });

    it('get_mounts maps running containers to {destination: source}', async () => {
      await sleeper(dockerd.docker, dockerd.image, 'runner-stopped', false);
      const { mounts } = await provider.get_mounts();
      expect(Object.keys(mounts)).to.deep.equal([runnerId]);
      expect(mounts[runnerId]).to.deep.equal({ '/srv/data': hostDir, '/srv/data/nested': hostDir });
    });

    it('resolve_mounts and detect_storage_root give host paths when the service runs in that container', async () => {
      const inContainer = new ContainerProvider({ socketPath: dockerd.socketPath, dataDir: '/srv/data/db', selfContainerId: runnerId }, quietLogger());
      const r = await inContainer.resolve_mounts(['/srv/data/jobs/1', '/srv/data', '/srv/data/nested/x', '/srv/database', '/opt/app']);
      expect(r.in_container).to.equal(true);
      expect(r.container_id).to.equal(runnerId);
      expect(r.resolved).to.deep.equal({
        '/srv/data/jobs/1': `${hostDir}/jobs/1`,
        '/srv/data': hostDir,
        '/srv/data/nested/x': `${hostDir}/x`,
        '/srv/database': null, // not inside /srv/data: segment boundary
        '/opt/app': null,
      });
      expect(await inContainer.detect_storage_root()).to.equal(`${hostDir}/db`);
    });

    it('on the host (not in a container) resolves to null', async () => {
      const onHost = new ContainerProvider({ socketPath: dockerd.socketPath, dataDir: workDir, selfContainerId: null }, quietLogger());
      expect(await onHost.detect_storage_root()).to.equal(null);
      const r = await onHost.resolve_mounts(['/srv/data']);
      expect(r).to.deep.equal({ in_container: false, container_id: null, resolved: { '/srv/data': null } });
      // detection on this machine: whatever it finds is not a container of this private daemon
      expect(await provider.detect_storage_root()).to.equal(null);
    });

    it('finds its own container id from /proc as seen inside a real container', async () => {
      const cg = await output(dockerd.docker, dockerd.image, ['cat', '/proc/self/cgroup']);
      const mi = await output(dockerd.docker, dockerd.image, ['cat', '/proc/self/mountinfo']);
      expect(containerIdFromProc(cg.out, '')).to.equal(cg.id);
      // cgroup v2 hosts show only "0::/": the daemon's bind-mounted hostname file gives the id away
      expect(containerIdFromProc('0::/\n', mi.out)).to.equal(mi.id);
      expect(containerIdFromProc('0::/\n', await fsp.readFile('/proc/self/mountinfo', 'utf8').then((t) => t.replace(/\/containers\//g, '/x/')))).to.equal(null);
      expect(hostPathFor('/a/b', [{ source: '/h', destination: '/' }])).to.equal('/h/a/b');
    });
  });

  describe('when the daemon stops', () => {
    let own: TestDockerd;
    let fragile: ContainerProvider;

    before(async () => {
      own = await startDockerd();
      fragile = new ContainerProvider({ socketPath: own.socketPath, availabilityTtlMs: 0, requestTimeoutMs: 5000 }, quietLogger());
    });
    after(async () => {
      await own?.stop();
    });

    it('reports unavailable and healthy false instead of crashing', async () => {
      expect(await fragile.isAvailable()).to.equal(true);
      expect((await fragile.health_check()).healthy).to.equal(true);
      await own.stop();

      expect(await fragile.isAvailable()).to.equal(false);
      expect(fragile.is_available).to.equal(false);
      const health = await fragile.health_check();
      expect(health).to.deep.include({ healthy: false, containers_running: null, containers_total: null, images: null });
      expect(health.error).to.match(/unreachable/);
      await expectSocketError(fragile.cleanup_stale('runner-', 0), 'unavailable');
      await expectSocketError(fragile.get_mounts(), 'unavailable');
      await expectSocketError(fragile.runners(), 'unavailable');
      await expectSocketError(fragile.spawn({ image: 'x', name: 'runner-x' }), 'unavailable');
    });
  });
});
