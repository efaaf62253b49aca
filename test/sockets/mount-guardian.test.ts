import { execFile } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { MountGuardian } from '../../src/sockets/mount-guardian.js';
import { isInside } from '../../src/sockets/paths.js';
import { unmountUnder } from '../support/dockerd.js';
import { expectSocketError } from './helpers.js';

const run = promisify(execFile);

async function modeOf(p: string): Promise<string> {
  return ((await fsp.lstat(p)).mode & 0o7777).toString(8).padStart(4, '0');
}

describe('sockets/mount-guardian', () => {
  let base: string; // holds everything of this test
  let managed: string; // the managed dir
  let outside: string; // a sibling that is not managed
  let lookalike: string; // <managed>2: shares the name prefix, not the segment
  let guardian: MountGuardian;

  before(async () => {
    base = await fsp.realpath(await fsp.mkdtemp(path.join(os.tmpdir(), 'mg-')));
    managed = path.join(base, 'data');
    outside = path.join(base, 'etc');
    lookalike = path.join(base, 'data2');
    for (const d of [managed, outside, lookalike, path.join(managed, 'sub')]) await fsp.mkdir(d, { recursive: true });
    await fsp.writeFile(path.join(outside, 'victim'), 'x', { mode: 0o600 });
    await fsp.chmod(path.join(outside, 'victim'), 0o600);
    await fsp.symlink(outside, path.join(managed, 'escape'));
    await fsp.symlink(path.join(managed, 'sub'), path.join(managed, 'inner-link'));
    // the managed dir itself is reached through a symlink: comparisons use real paths
    await fsp.symlink(managed, path.join(base, 'data-link'));
    guardian = new MountGuardian({ managedDirs: [path.join(base, 'data-link')], dataDir: path.join(base, 'service-data') });
  });

  after(async () => {
    if (!base) return;
    await unmountUnder(base);
    await fsp.rm(base, { recursive: true, force: true });
  });

  describe('check (read-only)', () => {
    it('reports an existing managed dir', async () => {
      await fsp.chmod(path.join(managed, 'sub'), 0o750);
      const res = await guardian.check([path.join(managed, 'sub')]);
      expect(res.healthy).to.equal(true);
      expect(res.mounts[path.join(managed, 'sub')]).to.deep.equal({
        exists: true,
        writable: true,
        is_mount_point: false,
        owner_uid: process.getuid!(),
        mode: '0750',
        error: null,
      });
    });

    it('changes nothing on the paths it inspects', async () => {
      const target = path.join(managed, 'sub');
      await fsp.chmod(target, 0o700);
      const before = await fsp.stat(target);
      await guardian.check([target, managed]);
      const after = await fsp.stat(target);
      expect(after.mode).to.equal(before.mode);
      expect(after.uid).to.equal(before.uid);
      expect(after.ctimeMs).to.equal(before.ctimeMs);
    });

    it('detects a tmpfs and a bind mount as mount points', async () => {
      const tmpfs = path.join(managed, 'tmpfs');
      const bind = path.join(managed, 'bind');
      await fsp.mkdir(tmpfs, { recursive: true });
      await fsp.mkdir(bind, { recursive: true });
      try {
        await run('mount', ['-t', 'tmpfs', '-o', 'size=1m,mode=0755', 'tmpfs', tmpfs]);
        await run('mount', ['--bind', path.join(managed, 'sub'), bind]);
      } catch (err) {
        throw new Error(`mount failed (these tests need root with CAP_SYS_ADMIN): ${(err as Error).message}`, { cause: err });
      }
      try {
        const res = await guardian.check([tmpfs, bind, path.join(managed, 'sub')]);
        expect(res.mounts[tmpfs]).to.include({ exists: true, is_mount_point: true, mode: '0755', error: null });
        expect(res.mounts[bind].is_mount_point).to.equal(true);
        expect(res.mounts[path.join(managed, 'sub')].is_mount_point).to.equal(false);
      } finally {
        await run('umount', [bind]).catch(() => undefined);
        await run('umount', [tmpfs]).catch(() => undefined);
      }
    });

    it('reports paths outside the managed dirs as not_managed without inspecting them', async () => {
      const paths = [
        outside,
        lookalike, // /…/data2 is not inside /…/data
        path.join(managed, 'escape'), // symlink out
        path.join(managed, 'escape', 'victim'),
        `${managed}/sub/../../etc`, // ../ out
        `${managed}/missing/../../etc`,
        `${managed}/escape/../etc`, // lexically inside, really /…/etc: the kernel resolves the symlink first
        '/',
        '/etc/passwd',
      ];
      const res = await guardian.check(paths);
      expect(res.healthy).to.equal(false);
      for (const p of paths) {
        expect(res.mounts[p], p).to.deep.equal({
          exists: null,
          writable: null,
          is_mount_point: null,
          owner_uid: null,
          mode: null,
          error: 'not_managed',
        });
      }
    });

    it('follows symlinks that stay inside, and "../" that stays inside', async () => {
      const res = await guardian.check([
        path.join(managed, 'inner-link'),
        `${managed}/sub/..`,
        `${managed}/escape/../data/sub`,
        path.join(base, 'data-link', 'sub'),
      ]);
      expect(res.healthy).to.equal(true);
      for (const m of Object.values(res.mounts)) expect(m.error).to.equal(null);
    });

    it('reports a missing dir, a file and a relative path', async () => {
      await fsp.writeFile(path.join(managed, 'file'), 'x');
      const res = await guardian.check([path.join(managed, 'nope'), path.join(managed, 'file'), 'data/sub']);
      expect(res.healthy).to.equal(false);
      expect(res.mounts[path.join(managed, 'nope')]).to.include({ exists: false, error: 'not_found' });
      expect(res.mounts[path.join(managed, 'file')]).to.include({ exists: true, error: 'not_a_directory' });
      expect(res.mounts['data/sub'].error).to.equal('invalid_path');
    });

    it('refuses a malformed path list', async () => {
      await expectSocketError(guardian.check([]), 'invalid_args');
      await expectSocketError(guardian.check([''] as string[]), 'invalid_args');
      await expectSocketError(guardian.check([42] as unknown as string[]), 'invalid_args');
      await expectSocketError(guardian.check(Array.from({ length: 65 }, (_, i) => `/p${i}`)), 'invalid_args');
    });
  });

  describe('repair', () => {
    let tree: string;

    beforeEach(async () => {
      tree = path.join(managed, 'tree');
      await fsp.rm(tree, { recursive: true, force: true });
      await fsp.mkdir(path.join(tree, 'a', 'b'), { recursive: true });
      await fsp.writeFile(path.join(tree, 'a', 'data.txt'), 'x');
      await fsp.writeFile(path.join(tree, 'a', 'b', 'run.sh'), '#!/bin/sh\n');
      await fsp.symlink(path.join(outside, 'victim'), path.join(tree, 'a', 'to-victim'));
      await fsp.symlink(outside, path.join(tree, 'a', 'to-outside-dir'));
      await run('mkfifo', [path.join(tree, 'a', 'pipe')]);
      await fsp.chmod(path.join(tree, 'a', 'data.txt'), 0o640);
      await fsp.chmod(path.join(tree, 'a', 'b', 'run.sh'), 0o750);
      await fsp.chmod(path.join(tree, 'a', 'b'), 0o700);
      await fsp.chmod(path.join(tree, 'a'), 0o700);
      await fsp.chmod(tree, 0o700);
      await fsp.chmod(path.join(outside, 'victim'), 0o600);
      await fsp.chmod(outside, 0o700);
    });

    it('chmods recursively with a string mode, never through a symlink', async () => {
      const res = await guardian.repair(tree, { mode: '0755' });
      expect(res).to.deep.equal({ status: 'repaired', target_dir: tree, changed: 5, failed: 0, skipped: 0 });
      expect(await modeOf(tree)).to.equal('0755');
      expect(await modeOf(path.join(tree, 'a'))).to.equal('0755');
      expect(await modeOf(path.join(tree, 'a', 'b'))).to.equal('0755');
      expect(await modeOf(path.join(tree, 'a', 'data.txt'))).to.equal('0644'); // no execute bit added to data
      expect(await modeOf(path.join(tree, 'a', 'b', 'run.sh'))).to.equal('0755');
      // symlink targets outside are untouched
      expect(await modeOf(path.join(outside, 'victim'))).to.equal('0600');
      expect(await modeOf(outside)).to.equal('0700');
      // a second run has nothing left to change
      expect((await guardian.repair(tree, { mode: '0755' })).changed).to.equal(0);
    });

    it('takes three-digit modes and a target reached through an inside symlink', async () => {
      await fsp.symlink(tree, path.join(managed, 'tree-link')).catch(() => undefined);
      const res = await guardian.repair(path.join(managed, 'tree-link'), { mode: '750' });
      expect(res.target_dir).to.equal(tree);
      expect(await modeOf(path.join(tree, 'a', 'b'))).to.equal('0750');
      expect(await modeOf(path.join(tree, 'a', 'data.txt'))).to.equal('0640');
    });

    it('chowns when asked, and not the symlink targets', async () => {
      const res = await guardian.repair(tree, { mode: '0755', owner_uid: 4321, owner_gid: 4321 });
      expect(res.changed).to.equal(5);
      for (const p of [tree, path.join(tree, 'a'), path.join(tree, 'a', 'data.txt'), path.join(tree, 'a', 'b', 'run.sh')]) {
        const st = await fsp.lstat(p);
        expect([st.uid, st.gid], p).to.deep.equal([4321, 4321]);
      }
      expect((await fsp.stat(path.join(outside, 'victim'))).uid).to.equal(process.getuid!());
      expect((await fsp.lstat(path.join(tree, 'a', 'to-victim'))).uid).to.equal(process.getuid!());
      // the FIFO is neither opened (no hang) nor changed
      expect((await fsp.lstat(path.join(tree, 'a', 'pipe'))).uid).to.equal(process.getuid!());
    });

    it('refuses bad modes and bad owners as invalid_args', async () => {
      for (const mode of ['999', 'abc', '75', '07555', '-755', '0o755', '']) {
        await expectSocketError(guardian.repair(tree, { mode }), 'invalid_args');
      }
      await expectSocketError(guardian.repair(tree, { mode: 755 as unknown as string }), 'invalid_args');
      await expectSocketError(guardian.repair(tree, { owner_uid: -1 }), 'invalid_args');
      await expectSocketError(guardian.repair(tree, { owner_uid: 1.5 }), 'invalid_args');
      await expectSocketError(guardian.repair('relative/tree'), 'invalid_args');
      await fsp.writeFile(path.join(managed, 'plain-file'), 'x');
      await expectSocketError(guardian.repair(path.join(managed, 'plain-file')), 'invalid_args');
      expect(await modeOf(tree)).to.equal('0700');
    });

    it('refuses targets outside the managed dirs as forbidden (symlinks, ../, look-alike prefix)', async () => {
      for (const target of [
        outside,
        lookalike,
        path.join(managed, 'escape'),
        path.join(tree, 'a', 'to-outside-dir'),
        `${managed}/sub/../../etc`,
        `${managed}/escape/../etc`,
        path.join(outside, 'missing'), // missing outside: forbidden, not not_found
        '/',
      ]) {
        await expectSocketError(guardian.repair(target, { mode: '0777' }), 'forbidden');
      }
      expect(await modeOf(outside)).to.equal('0700');
      expect(await modeOf(path.join(outside, 'victim'))).to.equal('0600');
    });

    it('leaves private files alone unless asked, and never touches a file with another hard link', async () => {
      const priv = path.join(tree, 'a', 'id_rsa');
      await fsp.writeFile(priv, 'k', { mode: 0o600 });
      await fsp.chmod(priv, 0o600);
      // a hard link from inside the tree to a file outside it: changing one name changes the other
      await fsp.writeFile(path.join(outside, 'linked'), 'x');
      await fsp.chmod(path.join(outside, 'linked'), 0o644);
      await fsp.link(path.join(outside, 'linked'), path.join(tree, 'a', 'hardlink'));
      const res = await guardian.repair(tree, { mode: '0777', owner_uid: 4321, owner_gid: 4321 });
      expect(res.skipped).to.equal(2);
      expect(await modeOf(priv)).to.equal('0600');
      expect((await fsp.stat(priv)).uid).to.equal(process.getuid!());
      expect(await modeOf(path.join(outside, 'linked'))).to.equal('0644');
      expect((await fsp.stat(path.join(outside, 'linked'))).uid).to.equal(process.getuid!());

      const asked = await guardian.repair(tree, { mode: '0750', include_private_files: true });
      expect(asked.skipped).to.equal(1); // the hard link, still
      expect(await modeOf(priv)).to.equal('0640');
      expect(await modeOf(path.join(outside, 'linked'))).to.equal('0644');
      await fsp.rm(path.join(outside, 'linked'));
    });

    it('never follows a symlink swapped in while it walks (bounded race)', async function () {
      this.timeout(30_000);
      const victim = path.join(outside, 'victim');
      const swap = path.join(tree, 'a', 'swap');
      const swapDir = path.join(tree, 'a', 'swapdir');
      let running = true;
      // swaps a file and a directory of the tree for links to a host file and a host directory
      const swapper = (async () => {
        for (let i = 0; running; i++) {
          await fsp.rm(swap, { force: true });
          await fsp.rm(swapDir, { recursive: true, force: true });
          if (i % 2) {
            await fsp.symlink(victim, swap);
            await fsp.symlink(outside, swapDir);
          } else {
            await fsp.writeFile(swap, 'x', { mode: 0o644 });
            await fsp.mkdir(swapDir);
          }
          await new Promise((r) => setImmediate(r));
        }
      })();
      try {
        for (let i = 0; i < 200; i++) await guardian.repair(tree, { mode: i % 2 ? '0777' : '0755', owner_uid: 4000 + i, include_private_files: true });
      } finally {
        running = false;
        await swapper;
      }
      expect(await modeOf(victim)).to.equal('0600');
      expect(await modeOf(outside)).to.equal('0700');
      expect((await fsp.stat(victim)).uid).to.equal(process.getuid!());
      expect((await fsp.stat(outside)).uid).to.equal(process.getuid!());
    });

    it('never repairs the data dir, a directory holding it, or what lies in it outside its managed folder', async () => {
      const root = path.join(base, 'wide');
      const dataDir = path.join(root, 'srv-data');
      await fsp.mkdir(path.join(dataDir, 'managed', 'jobs'), { recursive: true });
      await fsp.mkdir(path.join(dataDir, 'plugins'), { recursive: true });
      await fsp.writeFile(path.join(dataDir, 'secret.key'), 'k', { mode: 0o600 });
      await fsp.chmod(path.join(dataDir, 'secret.key'), 0o600);
      await fsp.mkdir(path.join(root, 'other'), { recursive: true });
      await fsp.symlink(dataDir, path.join(root, 'other', 'to-data'));
      // SERVICE_MANAGED_DIRS names the directory holding the data dir: still refused
      const wide = new MountGuardian({ managedDirs: [root], dataDir });
      for (const target of [root, dataDir, path.join(dataDir, 'plugins'), path.join(root, 'other', 'to-data')]) {
        const err = await expectSocketError(wide.repair(target, { mode: '0777', include_private_files: true }), 'forbidden');
        expect(err.message, target).to.match(/data directory/);
      }
      expect(await modeOf(path.join(dataDir, 'secret.key'))).to.equal('0600');
      expect((await wide.repair(path.join(dataDir, 'managed', 'jobs'), { mode: '0750' })).changed).to.equal(1);
      const other = await wide.repair(path.join(root, 'other'), { mode: '0750' });
      expect(other.changed).to.equal(1); // the link to the data dir is not followed
      expect(await modeOf(dataDir)).not.to.equal('0750');
      const check = await wide.check([dataDir, root, path.join(dataDir, 'managed', 'jobs')]);
      expect(check.mounts[dataDir].error).to.equal('not_managed');
      expect(check.mounts[root].error).to.equal('not_managed');
      expect(check.mounts[path.join(dataDir, 'managed', 'jobs')].error).to.equal(null);
    });

    describe('the data dir under another name', () => {
      let dataDir: string;
      let m: string;
      let aliased: MountGuardian;
      const points: string[] = [];

      before(async () => {
        dataDir = path.join(base, 'aliased-data');
        m = path.join(dataDir, 'managed');
        for (const d of [path.join(m, 'jobs'), path.join(dataDir, 'private')]) await fsp.mkdir(d, { recursive: true });
        for (const f of [path.join(dataDir, 'secret.key'), path.join(dataDir, 'private', 'token')]) {
          await fsp.writeFile(f, 'k');
          await fsp.chmod(f, 0o600);
        }
        await fsp.chmod(path.join(dataDir, 'private'), 0o700);
        await fsp.chmod(dataDir, 0o700);
        await fsp.link(path.join(dataDir, 'secret.key'), path.join(m, 'key-link'));
        for (const [source, name] of [
          [dataDir, 'alias'],
          [path.join(dataDir, 'private'), 'priv'],
        ]) {
          await fsp.mkdir(path.join(m, name));
          await run('mount', ['--bind', source, path.join(m, name)]);
          points.push(path.join(m, name));
        }
        aliased = new MountGuardian({ managedDirs: [m], dataDir });
      });
      after(async () => {
        for (const point of points.reverse()) await run('umount', [point]).catch(() => undefined);
      });

      it('refuses to repair or inspect a bind mount of the data dir or of a folder in it, and leaves them alone when it walks', async () => {
        for (const target of [path.join(m, 'alias'), path.join(m, 'alias', 'private'), path.join(m, 'priv')]) {
          const err = await expectSocketError(aliased.repair(target, { mode: '0777', include_private_files: true }), 'forbidden');
          expect(err.message, target).to.match(/data directory/);
        }
        const check = await aliased.check([path.join(m, 'alias'), path.join(m, 'priv'), path.join(m, 'key-link'), path.join(m, 'jobs')]);
        expect(check.mounts[path.join(m, 'alias')].error).to.equal('not_managed');
        expect(check.mounts[path.join(m, 'priv')].error).to.equal('not_managed');
        expect(check.mounts[path.join(m, 'key-link')].error).to.equal('not_managed');
        expect(check.mounts[path.join(m, 'jobs')].error).to.equal(null);
        // the managed folder holds them: it is repaired, they are not
        const res = await aliased.repair(m, { mode: '0777', include_private_files: true });
        expect(res.changed).to.equal(2); // managed and jobs
        for (const p of [dataDir, path.join(dataDir, 'private')]) expect(await modeOf(p), p).to.equal('0700');
        for (const p of [path.join(dataDir, 'secret.key'), path.join(dataDir, 'private', 'token')]) expect(await modeOf(p), p).to.equal('0600');
      });
    });

    it('reports a missing managed dir as not_found', async () => {
      await expectSocketError(guardian.repair(path.join(managed, 'nope')), 'not_found');
      await expectSocketError(guardian.repair(path.join(managed, 'nope', 'deeper')), 'not_found');
    });
  });

  it('compares paths on segment boundaries', () => {
    expect(isInside('/data', '/data')).to.equal(true);
    expect(isInside('/data/x', '/data')).to.equal(true);
    expect(isInside('/data2', '/data')).to.equal(false);
    expect(isInside('/data2/x', '/data/')).to.equal(false);
    expect(isInside('/anything', '/')).to.equal(true);
  });
});
