import fs from 'node:fs';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { ContainerProvider } from '../../src/sockets/container-provider.js';
import { SocketError } from '../../src/sockets/errors.js';
import type { TestDockerd } from '../support/dockerd.js';
import { eventually, expectSocketError, quietLogger } from './helpers.js';
import { containerSuite, names } from './docker-helpers.js';

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
      ({ id } = await provider.spawn({ image: dockerd.image, name, mounts: [{ source, target: '/m' }], command: ['cat', '/m/marker'] }));
    } catch (err) {
      if (err instanceof SocketError && ['forbidden', 'invalid_args'].includes(err.code)) return { refused: err.message };
      throw err;
    }
    const c = dockerd.docker.getContainer(id);
    await c.wait();
    return { out: (await c.logs({ stdout: true, stderr: true })).toString('utf8') };
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
    const { id } = await provider.spawn({ image: dockerd.image, name: 'runner-real', mounts: [{ source: path.join(managed, 'job-link'), target: '/m' }], command: ['sleep', '600'] });
    const info = await dockerd.docker.getContainer(id).inspect();
    expect(info.Mounts).to.have.length(1);
    // the daemon got the resolved path, not the link: nothing is resolved a second time
    expect(info.Mounts[0]).to.include({ Source: jobs, Destination: '/m', RW: false });

    // a link re-pointed to a host path afterwards is refused by its real path
    await fsp.rm(path.join(managed, 'job-link'));
    await fsp.symlink(outside, path.join(managed, 'job-link'));
    const refused = await probe('runner-relinked', path.join(managed, 'job-link'));
    expect(refused).to.have.property('refused').that.matches(/outside the managed directories/);
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
      for (const source of [hostRoot, dataDir, path.join(dataDir, 'secret.key'), path.join(hostRoot, 'other', 'to-data'), path.join(hostRoot, 'other', 'to-data', 'managed', '..')]) {
        const err = await expectSocketError(wide.spawn({ image: dockerd.image, name: 'runner-d', mounts: [{ source, target: '/m' }] }), source.endsWith('..') ? 'invalid_args' : 'forbidden');
        expect(err.message, source).to.match(/data directory|normalized/);
      }
      expect(await names(dockerd.docker)).to.deep.equal([]);
      for (const source of [path.join(dataDir, 'managed', 'ok'), path.join(hostRoot, 'other')]) {
        const { id } = await wide.spawn({ image: dockerd.image, name: `runner-ok-${path.basename(source)}`, mounts: [{ source, target: '/m' }], command: ['true'] });
        expect((await dockerd.docker.getContainer(id).inspect()).Mounts[0]).to.include({ Source: source, RW: false });
      }
    } finally {
      await fsp.rm(hostRoot, { recursive: true, force: true });
    }
  });
});
