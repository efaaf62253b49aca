import fs from 'node:fs';
import { execFile } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { ContainerProvider } from '../../src/sockets/container-provider.js';
import { SocketError } from '../../src/sockets/errors.js';
import type { TestDockerd } from '../support/dockerd.js';
import { eventually, expectSocketError, quietLogger } from './helpers.js';
import { unmountUnder } from '../support/dockerd.js';
import { containerSuite, gone, names } from './docker-helpers.js';

const run = promisify(execFile);

/** Spawn mount sources chosen by a hostile caller, against a real dockerd. */
describe('sockets/container-provider: spawn mount sources (hostile runners)', function () {
  this.timeout(60_000);
  const suite = containerSuite();
  let dockerd: TestDockerd;
  let provider: ContainerProvider;
  let workDir: string;
  before(() => ({ dockerd, provider, workDir } = suite));

  const HOST_SECRET = 'host-secret-that-no-runner-may-read';
  let managed: string;
  let outside: string;

  before(async () => {
    managed = path.join(workDir, 'managed');
    outside = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'host-')));
    await fsp.writeFile(path.join(outside, 'marker'), HOST_SECRET);
  });
  after(async () => {
    await fsp.rm(outside, { recursive: true, force: true });
  });

  /** Runs a runner that prints /m/marker; its output, or the refusal. */
  async function probe(name: string, source: string): Promise<{ out: string } | { refused: string }> {
    let id: string;
    try {
      // it stays until the test ends: a runner that exits is removed, and its output with it
      ({ id } = await provider.spawn({
        image: dockerd.image,
        name,
        mounts: [{ source, target: '/m' }],
        command: ['sh', '-c', 'cat /m/marker; echo; echo probe-done; sleep 600'],
      }));
    } catch (err) {
      if (err instanceof SocketError && ['forbidden', 'invalid_args'].includes(err.code)) return { refused: err.message };
      throw err;
    }
    const c = dockerd.docker.getContainer(id);
    let out = '';
    await eventually(async () => (out = (await c.logs({ stdout: true, stderr: true })).toString('utf8')).includes('probe-done'));
    return { out };
  }

  it('a runner swapping a symlink in its read-write mount never gets a host path mounted into another runner', async function () {
    this.timeout(120_000);
    const shared = path.join(managed, 'shared');
    const inside = path.join(shared, 'inside');
    await fsp.mkdir(inside, { recursive: true });
    await fsp.writeFile(path.join(inside, 'marker'), 'inside');
    // the attacker: flips /w/link between a path inside the managed dir and a host path, as fast as it can
    const swapper = await provider.spawn({
      image: dockerd.image,
      name: 'runner-swapper',
      mounts: [{ source: shared, target: '/w', read_only: false }],
      command: ['sh', '-c', `while true; do ln -sfn ${outside} /w/link; ln -sfn ${inside} /w/link; done`],
    });
    expect((await dockerd.docker.getContainer(swapper.id).inspect()).Mounts[0]).to.include({ Source: shared, RW: true });
    await eventually(() => fs.existsSync(path.join(shared, 'link')) || fs.lstatSync(path.join(shared, 'link'), { throwIfNoEntry: false }) !== undefined);

    const outcomes = [];
    for (let i = 0; i < 25; i++) {
      outcomes.push(await probe(`runner-probe-${i}`, path.join(shared, i % 2 ? 'link' : 'inside')));
    }
    const leaked = outcomes.filter((o) => 'out' in o && o.out.includes(HOST_SECRET));
    expect(leaked, 'spawns that mounted the host path').to.deep.equal([]);
    // nothing below a directory a runner may write is mounted at all while that runner exists
    for (const o of outcomes) expect(o).to.have.property('refused');
    expect(outcomes.some((o) => 'refused' in o && /which a container may write/.test(o.refused))).to.equal(true);
  });

  it('mounts the real path it checked, read-only unless asked, once no runner can write above it', async () => {
    const jobs = path.join(managed, 'jobs');
    await fsp.mkdir(jobs, { recursive: true });
    await fsp.writeFile(path.join(jobs, 'marker'), 'job-input');
    await fsp.rm(path.join(managed, 'job-link'), { force: true });
    await fsp.symlink(jobs, path.join(managed, 'job-link'));
    const { id } = await provider.spawn({
      image: dockerd.image,
      name: 'runner-real',
      mounts: [{ source: path.join(managed, 'job-link'), target: '/m' }],
      command: ['sleep', '600'],
    });
    const info = await dockerd.docker.getContainer(id).inspect();
    expect(info.Mounts).to.have.length(1);
    // the daemon got the resolved path, not the link: nothing is resolved a second time
    expect(info.Mounts[0]).to.include({ Source: jobs, Destination: '/m', RW: false });

    // a link re-pointed to a host path afterwards is refused by its real path
    await fsp.rm(path.join(managed, 'job-link'));
    await fsp.symlink(outside, path.join(managed, 'job-link'));
    const refused = await probe('runner-relinked', path.join(managed, 'job-link'));
    expect(refused)
      .to.have.property('refused')
      .that.matches(/outside the managed directories/);
  });

  it('never mounts the data dir, what holds it, or what lies in it outside its managed folder, whatever the roots say', async () => {
    const hostRoot = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'root-')));
    try {
      const dataDir = path.join(hostRoot, 'data');
      await fsp.mkdir(path.join(dataDir, 'managed', 'ok'), { recursive: true });
      await fsp.writeFile(path.join(dataDir, 'secret.key'), 'k', { mode: 0o600 });
      await fsp.mkdir(path.join(hostRoot, 'other'));
      await fsp.symlink(dataDir, path.join(hostRoot, 'other', 'to-data'));
      // SERVICE_MANAGED_DIRS names the directory that holds the data dir
      const wide = new ContainerProvider({ socketPath: dockerd.socketPath, dataDir, mountRoots: [hostRoot] }, quietLogger());
      for (const source of [
        hostRoot,
        dataDir,
        path.join(dataDir, 'secret.key'),
        path.join(hostRoot, 'other', 'to-data'),
        path.join(hostRoot, 'other', 'to-data', 'managed', '..'),
      ]) {
        const err = await expectSocketError(
          wide.spawn({ image: dockerd.image, name: 'runner-d', mounts: [{ source, target: '/m' }] }),
          source.endsWith('..') ? 'invalid_args' : 'forbidden',
        );
        expect(err.message, source).to.match(/data directory|normalized/);
      }
      expect(await names(dockerd.docker)).to.deep.equal([]);
      for (const source of [path.join(dataDir, 'managed', 'ok'), path.join(hostRoot, 'other')]) {
        const { id } = await wide.spawn({
          image: dockerd.image,
          name: `runner-ok-${path.basename(source)}`,
          mounts: [{ source, target: '/m' }],
          command: ['sleep', '600'],
        });
        expect((await dockerd.docker.getContainer(id).inspect()).Mounts[0]).to.include({ Source: source, RW: false });
      }
    } finally {
      await fsp.rm(hostRoot, { recursive: true, force: true });
    }
  });
  it('a runner is never started again: no restart policy, and it is removed when it exits', async () => {
    const { id } = await provider.spawn({ image: dockerd.image, name: 'runner-once', command: ['sleep', '600'] });
    const c = dockerd.docker.getContainer(id);
    const info = await c.inspect();
    expect(info.HostConfig.RestartPolicy).to.include({ Name: 'no' });
    expect(info.HostConfig.AutoRemove).to.equal(true);
    await c.kill();
    await gone(dockerd.docker, 'runner-once');
    // so nobody can start it again with its old mount sources, whatever they lead to now
    const err = (await c.start().then(
      () => null,
      (e: unknown) => e,
    )) as { statusCode?: number } | null;
    expect(err?.statusCode).to.equal(404);
  });

  it("a read-write mount never holds or lies below another runner's mount, nor any mount below a read-write one", async () => {
    const p = path.join(managed, 'p');
    const q = path.join(p, 'q');
    const sibling = path.join(managed, 'sibling');
    await fsp.mkdir(path.join(q, 'r'), { recursive: true });
    await fsp.mkdir(path.join(sibling, 'x'), { recursive: true });
    const spawn = (name: string, source: string, read_only: boolean) =>
      provider.spawn({ image: dockerd.image, name, mounts: [{ source, target: '/m', read_only }], command: ['sleep', '600'] });

    // runner A reads q; runner B would write p, swap q for a link to / and wait for A to start again
    await spawn('runner-a', q, true);
    const holds = await expectSocketError(spawn('runner-b', p, false), 'forbidden');
    expect(holds.message).to.equal(
      `mounts[0].source is read-write and holds ${q}, which a container mounts (the runner could re-point what that container mounts)`,
    );
    const below = await expectSocketError(spawn('runner-b', path.join(q, 'r'), false), 'forbidden');
    expect(below.message).to.equal(`mounts[0].source is read-write and lies below ${q}, which a runner mounts (the runner could swap what that runner sees)`);
    await expectSocketError(spawn('runner-b', q, false), 'forbidden');
    // read-only beside, above and on top of it: nobody can change anything
    await spawn('runner-c', p, true);
    await spawn('runner-d', q, true);

    // a read-write runner elsewhere; then nothing may be mounted below it or above it
    await spawn('runner-w', sibling, false);
    const under = await expectSocketError(spawn('runner-e', path.join(sibling, 'x'), true), 'forbidden');
    expect(under.message).to.match(/lies below .*sibling, which a container may write/);
    const above = await expectSocketError(spawn('runner-e', managed, true), 'forbidden');
    expect(above.message).to.equal(`mounts[0].source holds ${sibling}, which a container may write (it could re-point what lies below)`);

    // once the readers are gone, p may be written
    for (const name of ['runner-a', 'runner-c', 'runner-d']) await dockerd.docker.getContainer(name).kill();
    for (const name of ['runner-a', 'runner-c', 'runner-d']) await gone(dockerd.docker, name);
    const { id } = await spawn('runner-b', p, false);
    expect((await dockerd.docker.getContainer(id).inspect()).Mounts[0]).to.include({ Source: p, RW: true });
    await expectSocketError(spawn('runner-a', q, true), 'forbidden');
    expect(await names(dockerd.docker)).to.deep.equal(['runner-b', 'runner-w']);
  });

  it("another container's read-only mount: a read-write runner may not hold it, and may lie below it", async () => {
    const shared = path.join(managed, 'foreign');
    await fsp.mkdir(path.join(shared, 'in', 'deeper'), { recursive: true });
    // not made by this service: a host monitor, say, reading a directory
    const foreign = await dockerd.docker.createContainer({
      name: 'monitor',
      Image: dockerd.image,
      Cmd: ['sleep', '600'],
      HostConfig: { NetworkMode: 'none', Mounts: [{ Type: 'bind', Source: path.join(shared, 'in'), Target: '/in', ReadOnly: true }] },
    });
    await foreign.start();
    const spawn = (name: string, source: string) =>
      provider.spawn({ image: dockerd.image, name, mounts: [{ source, target: '/m', read_only: false }], command: ['sleep', '600'] });
    const err = await expectSocketError(spawn('runner-f', shared), 'forbidden');
    expect(err.message).to.match(/is read-write and holds .*foreign\/in, which a container mounts/);
    await spawn('runner-f', path.join(shared, 'in', 'deeper'));
  });

  describe('under another name: bind mounts and hard links', () => {
    let hostRoot: string;
    let dataDir: string;
    let own: ContainerProvider;
    const mountPoints: string[] = [];

    before(async () => {
      hostRoot = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'alias-')));
      dataDir = path.join(hostRoot, 'data');
      const m = path.join(dataDir, 'managed');
      for (const d of [path.join(m, 'ok'), path.join(m, 'p', 'q', 'r'), path.join(dataDir, 'private')]) await fsp.mkdir(d, { recursive: true });
      await fsp.writeFile(path.join(dataDir, 'secret.key'), 'k', { mode: 0o600 });
      await fsp.writeFile(path.join(dataDir, 'private', 'token'), 't', { mode: 0o600 });
      await fsp.link(path.join(dataDir, 'secret.key'), path.join(m, 'key-link'));
      // the data dir, the directory holding it, a folder of it, a managed folder: each under a second name
      for (const [source, name] of [
        [dataDir, 'alias'],
        [hostRoot, 'up'],
        [path.join(dataDir, 'private'), 'priv'],
        [path.join(m, 'p'), 'p-alias'],
      ]) {
        await fsp.mkdir(path.join(m, name));
        try {
          await run('mount', ['--bind', source, path.join(m, name)]);
        } catch (err) {
          throw new Error(`mount failed (these tests need root with CAP_SYS_ADMIN): ${(err as Error).message}`, { cause: err });
        }
        mountPoints.push(path.join(m, name));
      }
      own = new ContainerProvider({ socketPath: dockerd.socketPath, dataDir }, quietLogger());
    });
    after(async () => {
      if (!hostRoot) return;
      for (const point of mountPoints.reverse()) await run('umount', [point]).catch(() => undefined);
      await unmountUnder(hostRoot);
      await fsp.rm(hostRoot, { recursive: true, force: true });
    });

    it('refuses a bind mount of the data dir (or of what holds it, or of a folder of it) and a hard link of secret.key, as it refuses the data dir', async () => {
      const m = path.join(dataDir, 'managed');
      const spawn = (source: string) =>
        own.spawn({ image: dockerd.image, name: 'runner-alias', mounts: [{ source, target: '/m' }], command: ['sleep', '600'] });
      const itself = (await expectSocketError(spawn(dataDir), 'forbidden')).message;
      const inData = (await expectSocketError(spawn(path.join(dataDir, 'secret.key')), 'forbidden')).message;
      expect(itself).to.equal('mounts[0].source is the data directory or contains it');
      expect(inData).to.equal('mounts[0].source lies in the data directory outside its managed folder');
      const cases: Array<[string, string]> = [
        [path.join(m, 'alias'), itself],
        [path.join(m, 'up'), itself],
        [path.join(m, 'up', 'data'), itself],
        [path.join(m, 'alias', 'secret.key'), inData],
        [path.join(m, 'alias', 'private'), inData],
        [path.join(m, 'priv'), inData],
        [path.join(m, 'key-link'), inData],
      ];
      for (const [source, message] of cases) {
        const err = await expectSocketError(spawn(source), 'forbidden');
        expect(err.message, source).to.equal(message);
      }
      expect(await names(dockerd.docker)).to.deep.equal([]);
      // the managed folder reached through the alias is still the managed folder
      const ok = path.join(m, 'alias', 'managed', 'ok');
      const { id } = await own.spawn({ image: dockerd.image, name: 'runner-through', mounts: [{ source: ok, target: '/m' }], command: ['sleep', '600'] });
      expect((await dockerd.docker.getContainer(id).inspect()).Mounts[0]).to.include({ Source: ok, RW: false });
    });

    it("compares runner mounts by inode too: a read-write mount of a second name of a runner's source is refused", async () => {
      const m = path.join(dataDir, 'managed');
      const spawn = (name: string, source: string, read_only: boolean) =>
        own.spawn({ image: dockerd.image, name, mounts: [{ source, target: '/m', read_only }], command: ['sleep', '600'] });
      await spawn('runner-a', path.join(m, 'p', 'q'), true);
      // p-alias is p: it holds q, although no path says so
      const holds = await expectSocketError(spawn('runner-b', path.join(m, 'p-alias'), false), 'forbidden');
      expect(holds.message).to.match(/is read-write and holds .*\/p\/q, which a container mounts/);
      const below = await expectSocketError(spawn('runner-b', path.join(m, 'p-alias', 'q', 'r'), false), 'forbidden');
      expect(below.message).to.match(/is read-write and lies below .*\/p\/q, which a runner mounts/);
      await spawn('runner-w', path.join(m, 'p-alias', 'q', 'r'), true);
      expect(await names(dockerd.docker)).to.deep.equal(['runner-a', 'runner-w']);
    });
  });
});
