import { expect } from 'chai';
import request from 'supertest';
import { startService, basic, SYSTEM_KEY, type TestService } from '../../support/service.js';
import { startSystemdUser, type SystemdUser } from '../../support/systemd-user.js';
import { WsClient } from '../../gateway/helpers.js';
import { signInWithAuthenticatorApp, stepUpExpired } from '../../auth/helpers.js';

const service = (description: string) => `[Unit]\nDescription=${description}\n\n[Service]\nExecStart=/bin/sleep 1000\n`;

/**
 * The init provider through the running service: SERVICE_INIT_BUS names a systemd user
 * manager's bus, SERVICE_INIT_UNITS the allow-list; HTTP under /api/socket/init and ws
 * socket:request frames answer the same, with the same permissions and the same audit trail.
 */
describe('init provider through the service (HTTP and ws)', function () {
  this.timeout(60_000);
  let systemd: SystemdUser;
  let svc: TestService;
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };
  const reader = { Authorization: basic('reader', 'reader-password') };
  const controller = { Authorization: basic('controller', 'controller-password') };
  const viewer = { Authorization: basic('viewer', 'viewer-password') };
  let n = 0;

  /** one socket:request over a ws connection of `username` */
  const overWs = async (username: string, operation: string, args: Record<string, unknown>) => {
    const ws = await WsClient.basic(svc, username, `${username}-password`);
    try {
      const request_id = `q${n++}`;
      ws.send({ event: 'socket:request', payload: { request_id, operation, args } });
      return (await ws.next('socket:response', (f) => f.payload.request_id === request_id)).payload;
    } finally {
      await ws.close();
    }
  };

  before(async () => {
    systemd = await startSystemdUser({
      'svc-test-a.service': service('Test unit A'),
      'svc-test-never.service': service('Test unit nobody loaded'),
      'other-off-list.service': service('A unit off the allow-list'),
    });
    svc = await startService({
      env: {
        SERVICE_INIT_BUS: systemd.address,
        SERVICE_INIT_UNITS: 'svc-test-*.service',
        SERVICE_HOST_SERVICE_TIMEOUT_MS: '3000',
        SERVICE_SYSTEM_API_KEY: SYSTEM_KEY,
        SERVICE_ADMIN_FORCE_SUPERADMIN: 'true',
      },
    });
    // host permissions: granted with the system key
    const users: Array<[string, string[]]> = [
      ['reader', ['socket:init:read']],
      ['controller', ['socket:init:read', 'socket:init:control']],
      ['viewer', []],
    ];
    for (const [username, extra] of users) {
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username, password: `${username}-password`, groups: ['INT_VIEWER'], extra_permissions: extra })
        .expect(201);
    }
  });
  after(async () => {
    await svc?.destroy();
    await systemd?.destroy();
  });

  it('is registered; its health is open to anyone', async () => {
    const list = (await api().get('/api/socket/providers').set(reader).expect(200)).body;
    expect(list.providers.find((p: { name: string }) => p.name === 'init')).to.include({ available: true, socket_path: systemd.address, reason: null });
    const health = (await api().get('/api/socket/init/health').expect(200)).body;
    expect(health).to.include({ available: true });
    expect(health.units_allowed).to.deep.equal(['svc-test-*.service']);
    expect(health.version).to.match(/^\d+/);
    const catalog = (await api().get('/api/permissions').set(sys).expect(200)).body;
    expect(JSON.stringify(catalog)).to.include('socket:init:control').and.to.include('socket:init:read');
  });

  it('units and unit_status: HTTP and ws answer the same', async () => {
    const http = (await api().get('/api/socket/init/units').set(reader).expect(200)).body;
    expect(http.units.map((u: { unit: string }) => u.unit)).to.deep.equal(['svc-test-a.service', 'svc-test-never.service']);
    const ws = await overWs('reader', 'init:units', {});
    expect(ws.ok, JSON.stringify(ws.error)).to.equal(true);
    expect(ws.result).to.deep.equal(http);

    const one = (await api().get('/api/socket/init/unit-status').query({ unit: 'svc-test-never.service' }).set(reader).expect(200)).body;
    expect(one.unit).to.deep.equal(http.units[1]);
    expect((await overWs('reader', 'init:unit_status', { unit: 'svc-test-never.service' })).result).to.deep.equal(one);
  });

  it('an action over HTTP and over ws changes the state unit_status reads back; each is a socket.operation event with the unit and the action', async () => {
    const unit = 'svc-test-a.service';
    const started = (await api().post('/api/socket/init/unit-action').set(controller).send({ unit, action: 'start' }).expect(200)).body;
    expect(started).to.include({ unit, action: 'start', active_state: 'active' });
    expect((await api().get('/api/socket/init/unit-status').query({ unit }).set(reader).expect(200)).body.unit).to.include({
      active_state: 'active',
      sub_state: 'running',
    });
    const stopped = await overWs('controller', 'init:unit_action', { unit, action: 'stop' });
    expect(stopped.ok, JSON.stringify(stopped.error)).to.equal(true);
    expect(stopped.result).to.include({ unit, action: 'stop', active_state: 'inactive' });
    expect((await overWs('reader', 'init:unit_status', { unit })).result.unit).to.include({ active_state: 'inactive', sub_state: 'dead' });

    // a reload the unit cannot do: 409, in the trail as a failure
    const reload = await api().post('/api/socket/init/unit-action').set(controller).send({ unit, action: 'reload' }).expect(409);
    expect(reload.body.error.code).to.equal('conflict');

    await svc.service.iam.audit.flush();
    const rows = await svc.service.db('audit_events').where({ action: 'socket.operation', target_id: 'init:unit_action' });
    const events = rows.map((r) => ({
      outcome: r.outcome,
      user: r.actor_username,
      details: typeof r.details === 'string' ? JSON.parse(r.details) : r.details,
    }));
    expect(events).to.have.deep.members([
      { outcome: 'success', user: 'controller', details: { args: { unit, action: 'start' } } },
      { outcome: 'success', user: 'controller', details: { args: { unit, action: 'stop' } } },
      { outcome: 'failure', user: 'controller', details: { args: { unit, action: 'reload' }, error: 'conflict' } },
    ]);
  });

  it('403 without socket:init:control (or socket:init:read), 401 without a credential', async () => {
    const refused = await api().post('/api/socket/init/unit-action').set(reader).send({ unit: 'svc-test-a.service', action: 'start' }).expect(403);
    expect(refused.body.error.code).to.equal('forbidden');
    expect(refused.body.error.message).to.include('socket:init:control');
    const ws = await overWs('reader', 'init:unit_action', { unit: 'svc-test-a.service', action: 'start' });
    expect(ws.error).to.deep.equal({ code: 'forbidden', message: 'missing permission socket:init:control' });
    expect((await api().get('/api/socket/init/units').set(viewer).expect(403)).body.error.message).to.include('socket:init:read');
    await api().get('/api/socket/init/units').expect(401);
    await api().post('/api/socket/init/unit-action').send({ unit: 'svc-test-a.service', action: 'start' }).expect(401);
    // the unit was never started
    expect((await api().get('/api/socket/init/unit-status').query({ unit: 'svc-test-a.service' }).set(reader).expect(200)).body.unit.active_state).to.equal(
      'inactive',
    );
  });

  it('400 naming the field; not_allowed (403) off the allow-list; not_found (404) for a unit the manager does not know', async () => {
    const field = (body: { error: { details: Array<{ field: string }> } }) => body.error.details.map((d) => d.field);
    expect(field((await api().get('/api/socket/init/unit-status').query({ unit: '../etc/passwd' }).set(reader).expect(400)).body)).to.deep.equal(['unit']);
    expect(field((await api().get('/api/socket/init/unit-status').set(reader).expect(400)).body)).to.deep.equal(['unit']);
    const bad = await api().post('/api/socket/init/unit-action').set(controller).send({ unit: 'svc-test-a', action: 'start' }).expect(400);
    expect(bad.body.error.code).to.equal('validation_failed');
    expect(field(bad.body)).to.deep.equal(['unit']);
    expect(
      field((await api().post('/api/socket/init/unit-action').set(controller).send({ unit: 'svc-test-a.service', action: 'kill' }).expect(400)).body),
    ).to.deep.equal(['action']);
    const ws = await overWs('controller', 'init:unit_action', { unit: 'svc test.service', action: 'start' });
    expect(ws.error.code).to.equal('invalid_args');
    expect(ws.error.details.map((d: { field: string }) => d.field)).to.deep.equal(['unit']);

    const off = await api().post('/api/socket/init/unit-action').set(controller).send({ unit: 'other-off-list.service', action: 'start' }).expect(403);
    expect(off.body.error.code).to.equal('not_allowed');
    expect((await api().get('/api/socket/init/unit-status').query({ unit: 'other-off-list.service' }).set(reader).expect(403)).body.error.code).to.equal(
      'not_allowed',
    );
    // a refusal of the allow-list is in the trail, denied, with the unit and the action
    await svc.service.iam.audit.flush();
    const denied = await svc.service.db('audit_events').where({ action: 'socket.operation', target_id: 'init:unit_action', outcome: 'denied' });
    const args = denied.map((r) => (typeof r.details === 'string' ? JSON.parse(r.details) : r.details).args);
    expect(args).to.deep.include({ unit: 'other-off-list.service', action: 'start' });
    expect((await api().get('/api/socket/init/unit-status').query({ unit: 'svc-test-gone.service' }).set(reader).expect(404)).body.error.code).to.equal(
      'not_found',
    );
  });

  it('a web session with a second factor verifies it again before a unit action (a read needs no step-up)', async () => {
    const { token, recovery } = await signInWithAuthenticatorApp(svc.url, 'admin', 'admin-test-password');
    const session = { Authorization: `Bearer ${token}` };
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'unit-operators', permissions: ['socket:init:read', 'socket:init:control'] })
      .expect(201);
    const adminId = (await api().get('/api/me').set(session).expect(200)).body.id;
    await api()
      .patch(`/api/users/${adminId}`)
      .set(sys)
      .send({ groups: ['INT_ADMIN', 'unit-operators'] })
      .expect(200);
    // the sign-in's verification is older than the window
    await stepUpExpired(svc, token);

    await api().get('/api/socket/init/units').set(session).expect(200);
    const unit = 'svc-test-a.service';
    const refused = await api().post('/api/socket/init/unit-action').set(session).send({ unit, action: 'start' }).expect(403);
    expect(refused.body.error.code).to.equal('step_up_required');
    expect((await api().get('/api/socket/init/unit-status').query({ unit }).set(reader).expect(200)).body.unit.active_state).to.equal('inactive');
    await api().post('/api/auth/step-up').set(session).send({ code: recovery[0] }).expect(204);
    const ok = await api().post('/api/socket/init/unit-action').set(session).send({ unit, action: 'start' }).expect(200);
    expect(ok.body).to.include({ active_state: 'active' });
    await api().post('/api/socket/init/unit-action').set(session).send({ unit, action: 'stop' }).expect(200);
  });

  it('the manager gone: 503 unavailable at once, health says so; it answers again once a new manager is up', async () => {
    await systemd.stop();
    const started = Date.now();
    const down = await api().get('/api/socket/init/units').set(reader).expect(503);
    expect(down.body.error.code).to.equal('unavailable');
    expect((await api().get('/api/socket/init/health').expect(200)).body).to.include({ available: false, version: null });
    expect(Date.now() - started).to.be.below(2000);
    await systemd.start();
    const deadline = Date.now() + 5000;
    for (;;) {
      const res = await api().get('/api/socket/init/units').set(reader);
      if (res.status === 200) break;
      if (Date.now() > deadline) throw new Error(`still ${res.status} after the manager came back`);
      await new Promise((r) => setTimeout(r, 100));
    }
  });
});
