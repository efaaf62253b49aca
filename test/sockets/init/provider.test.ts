import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { expect } from 'chai';
import type * as DbusNext from 'dbus-next';
import { SocketRegistry } from '../../../src/sockets/registry.js';
import { SocketRequests, TRUSTED_CALLER } from '../../../src/sockets/bus-handler.js';
import { InitProvider } from '../../../src/sockets/init/index.js';
import { MANAGER, MANAGER_PATH, ManagerBus } from '../../../src/sockets/init/manager.js';
import { startSystemdUser, type SystemdUser } from '../../support/systemd-user.js';
import { eventually, expectSocketError, quietLogger } from '../helpers.js';

const dbus = createRequire(import.meta.url)('dbus-next') as typeof DbusNext;

const service = (description: string, extra = '') => `[Unit]\nDescription=${description}\n\n[Service]\nExecStart=/bin/sleep 1000\n${extra}`;

/**
 * The init provider against a real systemd: a user manager (`systemd --user`) on a private bus,
 * with units written by the test. The allow-list is `svc-test-*.service`.
 */
describe('init provider (systemd --user on a private bus)', function () {
  this.timeout(30_000);
  let systemd: SystemdUser;
  let registry: SocketRegistry;
  let provider: InitProvider;
  let requests: SocketRequests;
  let n = 0;
  /** one operation through the registry's request path (args validated as over the bus) */
  const ask = (operation: string, args: Record<string, unknown> = {}) => requests.handle({ request_id: `r${n++}`, operation, args }, TRUSTED_CALLER);
  const status = async (unit: string) => (await provider.unitStatus(unit)).unit;

  before(async () => {
    systemd = await startSystemdUser({
      // it wants a unit that does not exist: the manager holds that name as not-found
      'svc-test-a.service': service('Test unit A').replace('[Unit]\n', '[Unit]\nWants=svc-test-ghost.service\n'),
      'svc-test-reloadable.service': service('Test unit that reloads', 'ExecReload=/bin/true\n'),
      'svc-test-never.service': service('Test unit nobody loaded'),
      // its start fails: the job's result is "failed"
      'svc-test-broken.service': '[Unit]\nDescription=Test unit whose start fails\n\n[Service]\nType=oneshot\nExecStart=/bin/false\n',
      'other-off-list.service': service('A unit off the allow-list'),
    });
    // an allowed name that is an alias of a unit off the list, and a masked unit
    fs.symlinkSync(path.join(systemd.unitDir, 'other-off-list.service'), path.join(systemd.unitDir, 'svc-test-alias.service'));
    fs.symlinkSync('/dev/null', path.join(systemd.unitDir, 'svc-test-masked.service'));
    registry = new SocketRegistry({ logger: quietLogger() });
    provider = registry.register(InitProvider, { owner: 'core', options: { bus: systemd.address, units: ['svc-test-*.service'], timeoutMs: 3000 } });
    requests = new SocketRequests({ registry, logger: quietLogger() });
  });
  after(async () => {
    await registry?.close();
    await systemd?.destroy();
  });

  it("health: available, the manager's version and the globs", async () => {
    const r = await ask('init:health');
    expect(r.ok, JSON.stringify(r.error)).to.equal(true);
    expect(r.result).to.deep.include({ available: true, units_allowed: ['svc-test-*.service'] });
    expect((r.result as { version: string }).version).to.match(/^\d+/);
  });

  it('lists the allowed units, loaded or not, and nothing else (not an alias of a unit off the list)', async () => {
    await provider.unitAction('svc-test-a.service', 'start');
    const r = await ask('init:units');
    expect(r.ok, JSON.stringify(r.error)).to.equal(true);
    const units = (r.result as { units: Array<Record<string, unknown>> }).units;
    expect(units.map((u) => u.unit)).to.deep.equal([
      'svc-test-a.service',
      'svc-test-broken.service',
      'svc-test-masked.service',
      'svc-test-never.service',
      'svc-test-reloadable.service',
    ]);
    expect(units[0]).to.deep.equal({
      unit: 'svc-test-a.service',
      description: 'Test unit A',
      load_state: 'loaded',
      active_state: 'active',
      sub_state: 'running',
      unit_file_state: 'static',
    });
    expect(units[2]).to.include({ unit: 'svc-test-masked.service', load_state: 'masked', active_state: 'inactive', unit_file_state: 'masked' });
    expect(units[3]).to.deep.equal({
      unit: 'svc-test-never.service',
      description: 'Test unit nobody loaded',
      load_state: 'loaded',
      active_state: 'inactive',
      sub_state: 'dead',
      unit_file_state: 'static',
    });
    // the manager does hold the wanted name that has no unit behind it; the list leaves it out
    const manager = new ManagerBus(systemd.address, 3000);
    try {
      const [held] = await manager.call(MANAGER_PATH, MANAGER, 'ListUnitsByPatterns', 'asas', [[], ['svc-test-ghost.service']]);
      expect((held as string[][]).map((row) => [row[0], row[2]])).to.deep.equal([['svc-test-ghost.service', 'not-found']]);
    } finally {
      manager.close();
    }
    await provider.unitAction('svc-test-a.service', 'stop');
  });

  it('start, restart and stop change the ActiveState that unit_status reads back', async () => {
    const unit = 'svc-test-a.service';
    expect(await status(unit)).to.include({ active_state: 'inactive', sub_state: 'dead' });
    const started = await ask('init:unit_action', { unit, action: 'start' });
    expect(started.ok, JSON.stringify(started.error)).to.equal(true);
    expect(started.result).to.include({ unit, action: 'start', active_state: 'active' });
    expect((started.result as { job: string }).job).to.match(/^\/org\/freedesktop\/systemd1\/job\/\d+$/);
    const read = await ask('init:unit_status', { unit });
    expect(read.result).to.deep.equal({
      unit: { unit, description: 'Test unit A', load_state: 'loaded', active_state: 'active', sub_state: 'running', unit_file_state: 'static' },
    });

    const before = await provider.unitAction(unit, 'restart');
    expect(before).to.include({ unit, action: 'restart', active_state: 'active' });
    expect(before.job).not.to.equal((started.result as { job: string }).job);
    expect(await status(unit)).to.include({ active_state: 'active', sub_state: 'running' });

    const stopped = await ask('init:unit_action', { unit, action: 'stop' });
    expect(stopped.result).to.include({ unit, action: 'stop', active_state: 'inactive' });
    expect(await status(unit)).to.include({ active_state: 'inactive', sub_state: 'dead' });
  });

  it('reload: a conflict for a unit without ExecReload, done for one with it', async () => {
    await provider.unitAction('svc-test-a.service', 'start');
    const refused = await ask('init:unit_action', { unit: 'svc-test-a.service', action: 'reload' });
    expect(refused.ok).to.equal(false);
    expect(refused.error!.code).to.equal('conflict');
    expect(refused.error!.message).to.match(/reload svc-test-a\.service: .*reload.*not applicable/i);
    await provider.unitAction('svc-test-a.service', 'stop');

    // one that could reload, stopped: the job is queued and ends "invalid" (systemctl: not active, cannot reload)
    const inactive = await ask('init:unit_action', { unit: 'svc-test-reloadable.service', action: 'reload' });
    expect(inactive.ok).to.equal(false);
    expect(inactive.error).to.deep.equal({
      code: 'conflict',
      message: 'reload svc-test-reloadable.service: the unit is not active, so it cannot reload (job result "invalid", the unit is inactive)',
    });

    await provider.unitAction('svc-test-reloadable.service', 'start');
    const reloaded = await ask('init:unit_action', { unit: 'svc-test-reloadable.service', action: 'reload' });
    expect(reloaded.ok, JSON.stringify(reloaded.error)).to.equal(true);
    expect(reloaded.result).to.include({ unit: 'svc-test-reloadable.service', action: 'reload', active_state: 'active' });
    await provider.unitAction('svc-test-reloadable.service', 'stop');
  });

  it('a start whose job fails is failed, with the result and the state the unit is left in', async () => {
    const r = await ask('init:unit_action', { unit: 'svc-test-broken.service', action: 'start' });
    expect(r.ok).to.equal(false);
    expect(r.error).to.deep.equal({ code: 'failed', message: 'start svc-test-broken.service: the job failed (job result "failed", the unit is failed)' });
    expect(await status('svc-test-broken.service')).to.include({ active_state: 'failed' });
  });

  it("a job's result is the manager's own JobRemoved: one sent by anyone else on the bus is not believed", async () => {
    const manager = new ManagerBus(systemd.address, 3000);
    const forger = dbus.sessionBus({ busAddress: systemd.address });
    const forgerUp = new Promise((resolve) => forger.once('connect', resolve));
    try {
      const [job] = await manager.call(MANAGER_PATH, MANAGER, 'StartUnit', 'ss', ['svc-test-a.service', 'replace']);
      const real = String(job);
      await eventually(async () => manager.jobResult(real) === 'done', 3000);
      // another connection sends JobRemoved straight to every name on the bus (the manager's match rule does not stop that)
      await forgerUp;
      const daemon = { destination: 'org.freedesktop.DBus', path: '/org/freedesktop/DBus', interface: 'org.freedesktop.DBus' };
      const names = ((await forger.call(new dbus.Message({ ...daemon, member: 'ListNames' })))!.body[0] as string[]).filter((n) => n.startsWith(':'));
      const forged = (destination: string, path: string, result: string) =>
        new dbus.Message({
          type: 4,
          destination,
          path,
          interface: MANAGER,
          member: 'JobRemoved',
          signature: 'uoss',
          body: [1, real, 'svc-test-a.service', result],
        });
      for (const name of names) {
        forger.send(forged(name, '/fake', 'failed'));
        forger.send(forged(name, MANAGER_PATH, 'failed'));
      }
      // a round trip after them: what was sent first has arrived
      await manager.property(MANAGER_PATH, MANAGER, 'Version');
      await new Promise((r) => setTimeout(r, 100));
      expect(manager.jobResult(real)).to.equal('done');
    } finally {
      forger.disconnect();
      manager.close();
      await provider.unitAction('svc-test-a.service', 'stop');
    }
  });

  it("after the manager re-executes (an upgrade: a new name on the bus), a job's result is still its own", async () => {
    await provider.unitStatus('svc-test-a.service');
    const other = new ManagerBus(systemd.address, 3000);
    try {
      // the manager answers, then leaves the bus and joins it again under a new unique name
      await other.call(MANAGER_PATH, MANAGER, 'Reexecute').catch(() => undefined);
    } finally {
      other.close();
    }
    await eventually(
      async () =>
        provider.unitStatus('svc-test-a.service').then(
          () => true,
          () => false,
        ),
      10_000,
    );
    const r = await ask('init:unit_action', { unit: 'svc-test-broken.service', action: 'start' });
    expect(r.ok).to.equal(false);
    expect(r.error).to.deep.include({ code: 'failed' });
  });

  it('a unit off the allow-list is not_allowed, whether it exists or not, and so is an allowed alias of one', async () => {
    for (const unit of ['other-off-list.service', 'nothing-here.service', 'svc-test-a.socket']) {
      for (const r of [await ask('init:unit_status', { unit }), await ask('init:unit_action', { unit, action: 'start' })]) {
        expect(r.error, unit).to.deep.include({ code: 'not_allowed' });
        expect(r.error!.message).to.include(unit);
      }
    }
    const alias = await ask('init:unit_action', { unit: 'svc-test-alias.service', action: 'start' });
    expect(alias.error).to.deep.include({ code: 'not_allowed' });
    expect(alias.error!.message).to.include('other-off-list.service');
    await expectSocketError(provider.unitStatus('other-off-list.service'), 'not_allowed');
    // the unit behind the alias was never started (read by a provider that may see it)
    const wider = new InitProvider({ bus: systemd.address, units: ['other-*.service'], timeoutMs: 3000 });
    try {
      expect((await wider.unitStatus('other-off-list.service')).unit).to.include({ active_state: 'inactive' });
    } finally {
      await wider.close();
    }
  });

  it('a masked unit is read, and refuses to start: a conflict', async () => {
    expect(await status('svc-test-masked.service')).to.include({ load_state: 'masked', unit_file_state: 'masked' });
    const r = await ask('init:unit_action', { unit: 'svc-test-masked.service', action: 'start' });
    expect(r.error?.code, JSON.stringify(r)).to.equal('conflict');
    expect(r.error!.message).to.match(/masked/i);
  });

  it('an allowed name the manager does not know is not_found', async () => {
    const r = await ask('init:unit_status', { unit: 'svc-test-missing.service' });
    expect(r.error).to.deep.include({ code: 'not_found' });
    const a = await ask('init:unit_action', { unit: 'svc-test-missing.service', action: 'start' });
    expect(a.error).to.deep.include({ code: 'not_found' });
  });

  it("a name outside systemd's unit name grammar is invalid_args naming unit; a bad action names action", async () => {
    const bad = [
      'svc-test-a',
      'svc test.service',
      '../svc-test-a.service',
      'svc-test-a.exe',
      'svc-test-@.service',
      '.service',
      `svc-test-${'x'.repeat(250)}.service`,
      '',
      7,
    ];
    for (const unit of bad) {
      for (const r of [await ask('init:unit_status', { unit }), await ask('init:unit_action', { unit, action: 'start' })]) {
        expect(r.error?.code, String(unit)).to.equal('invalid_args');
        expect((r.error!.details as Array<{ field: string }>).map((d) => d.field)).to.deep.equal(['unit']);
      }
    }
    const r = await ask('init:unit_action', { unit: 'svc-test-a.service', action: 'kill' });
    expect(r.error?.code).to.equal('invalid_args');
    expect((r.error!.details as Array<{ field: string }>).map((d) => d.field)).to.deep.equal(['action']);
    // nothing else of the manager is reachable
    for (const operation of ['init:call', 'init:list_jobs', 'init:set_property']) expect((await ask(operation)).error?.code).to.equal('unknown_operation');
  });

  it('a bus that is not there, or that never answers, is unavailable: at once, or when the timeout runs out', async () => {
    const dir = fs.mkdtempSync(path.join('/tmp', 'svc-init-bus-'));
    // reads what it is sent and never answers
    const silent = net.createServer((socket) => socket.resume());
    await new Promise<void>((resolve) => silent.listen(path.join(dir, 'silent'), resolve));
    // a timeout far above what a first call costs on a slow machine: "at once" is well before it
    const absent = new InitProvider({ bus: `unix:path=${path.join(dir, 'absent')}`, units: ['svc-test-*.service'], timeoutMs: 3000 });
    const mute = new InitProvider({ bus: `unix:path=${path.join(dir, 'silent')}`, units: ['svc-test-*.service'], timeoutMs: 400 });
    try {
      let started = Date.now();
      const gone = await expectSocketError(absent.units(), 'unavailable');
      expect(gone.message).to.match(/ENOENT/);
      expect(Date.now() - started).to.be.below(1000);
      expect(await absent.health_check()).to.deep.equal({ available: false, version: null, units_allowed: ['svc-test-*.service'] });
      expect(absent.unavailable_reason).to.include('unavailable');
      started = Date.now();
      const stalled = await expectSocketError(mute.unitStatus('svc-test-a.service'), 'unavailable');
      expect(stalled.message).to.include('no answer within 400 ms');
      expect(Date.now() - started).to.be.within(350, 1500);
    } finally {
      await absent.close();
      await mute.close();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the manager gone: unavailable at once; the same provider works again when a new one is up at the same address', async () => {
    await systemd.stop();
    const started = Date.now();
    const down = await ask('init:units');
    expect(down.error?.code, JSON.stringify(down)).to.equal('unavailable');
    const action = await provider.unitAction('svc-test-a.service', 'start').catch((err) => err);
    expect(action.code).to.equal('unavailable');
    const health = await ask('init:health');
    expect(health.result).to.deep.include({ available: false, version: null });
    expect(Date.now() - started).to.be.below(1500);

    await systemd.start();
    await eventually(async () => (await ask('init:units')).ok, 5000);
    expect((await ask('init:health')).result).to.deep.include({ available: true });
    const again = await provider.unitAction('svc-test-a.service', 'start');
    expect(again.active_state).to.equal('active');
    await provider.unitAction('svc-test-a.service', 'stop');
  });
});
