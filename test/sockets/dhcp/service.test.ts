import { expect } from 'chai';
import request from 'supertest';
import { startKea, type TestKea } from '../../support/kea.js';
import { basic, startService, SYSTEM_KEY, type TestService } from '../../support/service.js';
import { WsClient } from '../../gateway/helpers.js';
import { signInWithAuthenticatorApp, stepUpExpired } from '../../auth/helpers.js';

/**
 * The dhcp provider through the running service, Kea real: HTTP and ws answer the same, the
 * field of a refusal is named, the permissions hold, a change is in the audit trail.
 */
describe('dhcp through the service (real Kea)', function () {
  this.timeout(60_000);
  let kea: TestKea;
  let svc: TestService;
  let reader: string;
  let writer: string;
  const api = () => request(svc.url);

  before(async () => {
    kea = await startKea();
    svc = await startService({
      env: { SERVICE_DHCP_CONTROL_SOCKET: kea.socketPath, SERVICE_SYSTEM_API_KEY: SYSTEM_KEY, SERVICE_HOST_SERVICE_TIMEOUT_MS: '2000' },
    });
    // host permissions: granted by the system key
    const sys = { 'X-API-Key': SYSTEM_KEY };
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'dhcp-readers', permissions: ['socket:dhcp:read'] })
      .expect(201);
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'dhcp-writers', permissions: ['socket:dhcp:read', 'socket:dhcp:write'] })
      .expect(201);
    for (const [name, group] of [
      ['reader', 'dhcp-readers'],
      ['writer', 'dhcp-writers'],
      ['stepper', 'dhcp-writers'],
    ]) {
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: name, password: `${name}-password`, groups: ['INT_VIEWER', group] })
        .expect(201);
    }
    reader = basic('reader', 'reader-password');
    writer = basic('writer', 'writer-password');
    expect((await kea.command('lease4-add', { 'ip-address': '192.0.2.150', 'hw-address': '0a:00:00:00:00:01', hostname: 'laptop.home.arpa' })).result).to.equal(
      0,
    );
  });
  after(async () => {
    await svc?.destroy();
    await kea?.stop();
  });

  /** one socket:request over ws as `auth`, its socket:response payload */
  const overWs = async (auth: string, operation: string, args: Record<string, unknown>) => {
    const ws = await WsClient.connect(svc, { headers: { Authorization: auth } });
    try {
      const id = `r-${Math.random().toString(36).slice(2)}`;
      ws.send({ event: 'socket:request', payload: { request_id: id, operation, args } });
      return (await ws.next('socket:response', (f) => f.payload.request_id === id)).payload;
    } finally {
      await ws.close();
    }
  };

  it('health is open to anyone; leases and reservations answer the same over HTTP and ws', async () => {
    const health = (await api().get('/api/socket/dhcp/health').expect(200)).body;
    expect(health).to.deep.equal({
      available: true,
      version: '2.2.0',
      subnets: [
        { id: 1, subnet: '192.0.2.0/24' },
        { id: 2, subnet: '198.51.100.0/24' },
      ],
    });
    const http = (
      await api().get('/api/socket/dhcp/leases').query({ subnet_id: '1', hw_address: '0A:00:00:00:00:01' }).set('Authorization', reader).expect(200)
    ).body;
    expect(http.leases.map((l: any) => l.ip_address)).to.deep.equal(['192.0.2.150']);
    const ws = await overWs(reader, 'dhcp:leases', { subnet_id: 1, hw_address: '0A:00:00:00:00:01' });
    expect(ws.ok, JSON.stringify(ws.error)).to.equal(true);
    expect(ws.result).to.deep.equal(http);
    // over ws a number is a number
    const text = await overWs(reader, 'dhcp:leases', { subnet_id: '1' });
    expect(text.error.code).to.equal('invalid_args');
    expect(text.error.details.map((d: any) => d.field)).to.deep.equal(['subnet_id']);
    expect((await api().get('/api/socket/dhcp/reservations').set('Authorization', reader).expect(200)).body).to.deep.equal({ reservations: [] });
    expect((await overWs(reader, 'dhcp:reservations', {})).result).to.deep.equal({ reservations: [] });
    // reads need the read permission
    await api().get('/api/socket/dhcp/leases').expect(401);
  });

  it('a reservation: added and removed by a writer, 403 for a reader, each change in the audit trail', async () => {
    const args = { subnet_id: 1, hw_address: '02:AA:00:00:00:01', ip_address: '192.0.2.10', hostname: 'printer' };
    const denied = await api().post('/api/socket/dhcp/reservation-add').set('Authorization', reader).send(args).expect(403);
    expect(denied.body.error.message).to.contain('socket:dhcp:write');
    const deniedWs = await overWs(reader, 'dhcp:reservation_add', args);
    expect(deniedWs.error.code).to.equal('forbidden');

    const added = (await api().post('/api/socket/dhcp/reservation-add').set('Authorization', writer).send(args).expect(200)).body;
    const printer = { subnet_id: 1, hw_address: '02:aa:00:00:00:01', ip_address: '192.0.2.10', hostname: 'printer.home.arpa', dns: false };
    expect(added).to.deep.equal({ reservation: printer });
    expect((await api().get('/api/socket/dhcp/reservations').query({ subnet_id: '1' }).set('Authorization', reader).expect(200)).body).to.deep.equal({
      reservations: [printer],
    });
    // ws: the same operation, the same answer, the same refusal of a taken address
    const again = await overWs(writer, 'dhcp:reservation_add', { ...args, hw_address: '02:aa:00:00:00:02' });
    expect(again.error.code).to.equal('conflict');
    expect(again.error.details).to.deep.equal([{ field: 'ip_address', message: '192.0.2.10 is already reserved in subnet 1' }]);
    const conflict = await api()
      .post('/api/socket/dhcp/reservation-add')
      .set('Authorization', writer)
      .send({ ...args, hw_address: '02:aa:00:00:00:02' })
      .expect(409);
    expect(conflict.body.error.details).to.deep.equal(again.error.details);

    const removedWs = await overWs(writer, 'dhcp:reservation_remove', { subnet_id: 1, hw_address: '02:aa:00:00:00:01' });
    expect(removedWs.result).to.deep.equal({ removed: true, reservation: printer, records_removed: 0 });
    await api().post('/api/socket/dhcp/reservation-remove').set('Authorization', writer).send({ subnet_id: 1, hw_address: '02:aa:00:00:00:01' }).expect(404);

    await svc.service.iam.audit.flush();
    const rows = await svc.service.db('audit_events').where({ action: 'socket.operation' }).orderBy('seq');
    const events = rows.map((r) => ({ ...r, details: typeof r.details === 'string' ? JSON.parse(r.details) : r.details }));
    const add = events.find((e) => e.target_id === 'dhcp:reservation_add' && e.outcome === 'success');
    expect(add, JSON.stringify(events)).to.not.equal(undefined);
    expect(add.actor_username).to.equal('writer');
    // the validated args: the address in Kea's form, the default of dns
    expect(add.details.args).to.deep.equal({ subnet_id: 1, hw_address: '02:aa:00:00:00:01', ip_address: '192.0.2.10', hostname: 'printer', dns: false });
    expect(events.some((e) => e.target_id === 'dhcp:reservation_add' && e.outcome === 'denied' && e.actor_username === 'reader')).to.equal(true);
    expect(events.some((e) => e.target_id === 'dhcp:reservation_add' && e.outcome === 'failure' && e.details.error === 'conflict')).to.equal(true);
    const remove = events.find((e) => e.target_id === 'dhcp:reservation_remove' && e.outcome === 'success');
    expect(remove.details.args).to.deep.equal({ subnet_id: 1, hw_address: '02:aa:00:00:00:01' });
  });

  it('bad input: 400 naming the field (over ws invalid_args naming it); an unknown subnet 404; a name outside the zones 403', async () => {
    const base = { subnet_id: 1, hw_address: '02:aa:00:00:01:01', ip_address: '192.0.2.11' };
    for (const [body, field] of [
      [{ ...base, ip_address: '192.0.2.256' }, 'ip_address'],
      [{ ...base, ip_address: '198.51.100.11' }, 'ip_address'],
      [{ ...base, hw_address: 'printer' }, 'hw_address'],
      [{ ...base, hostname: '-bad-' }, 'hostname'],
      [{ ...base, subnet_id: 0 }, 'subnet_id'],
      [{ ...base, dns: true }, 'hostname'],
      [{ ...base, hostname: 'x', dns: true }, 'dns'],
      [{ ...base, surprise: 1 }, 'surprise'],
    ] as const) {
      const res = await api().post('/api/socket/dhcp/reservation-add').set('Authorization', writer).send(body);
      expect(res.status, JSON.stringify(body)).to.equal(400);
      expect(res.body.error.code).to.equal('validation_failed');
      expect(
        res.body.error.details.map((d: any) => d.field),
        JSON.stringify(body),
      ).to.deep.equal([field]);
      const ws = await overWs(writer, 'dhcp:reservation_add', body);
      expect(ws.error.code).to.equal('invalid_args');
      expect(ws.error.details.map((d: any) => d.field)).to.deep.equal([field]);
    }
    const leases = await api().get('/api/socket/dhcp/leases').query({ ip_address: 'nope' }).set('Authorization', reader).expect(400);
    expect(leases.body.error.details.map((d: any) => d.field)).to.deep.equal(['ip_address']);
    const none = await api()
      .post('/api/socket/dhcp/reservation-add')
      .set('Authorization', writer)
      .send({ ...base, subnet_id: 99 })
      .expect(404);
    expect(none.body.error.code).to.equal('not_found');
    const zone = await api()
      .post('/api/socket/dhcp/reservation-add')
      .set('Authorization', writer)
      .send({ ...base, hostname: 'www.example.com' })
      .expect(403);
    expect(zone.body.error.code).to.equal('forbidden_zone');
    await api().post('/api/socket/dhcp/lease-release').set('Authorization', writer).send({ ip_address: '192.0.2.99' }).expect(404);
    expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations).to.deep.equal([]);
  });

  it('an address with a leading zero in an octet (which Kea refuses) is 400 naming the field, never 502', async () => {
    const expectField = (res: request.Response) => {
      expect(res.status, JSON.stringify(res.body)).to.equal(400);
      expect(res.body.error.details).to.deep.equal([
        { field: 'ip_address', message: 'must be an IPv4 address like 192.0.2.10 (four decimal octets without leading zeros)' },
      ]);
    };
    expectField(await api().get('/api/socket/dhcp/leases').query({ ip_address: '192.0.2.050' }).set('Authorization', reader));
    expectField(await api().post('/api/socket/dhcp/lease-release').set('Authorization', writer).send({ ip_address: '192.0.02.150' }));
    expectField(
      await api()
        .post('/api/socket/dhcp/reservation-add')
        .set('Authorization', writer)
        .send({ subnet_id: 1, hw_address: '02:aa:00:00:01:09', ip_address: '192.0.2.011' }),
    );
    const ws = await overWs(writer, 'dhcp:reservation_add', { subnet_id: 1, hw_address: '02:aa:00:00:01:09', ip_address: '192.0.2.011' });
    expect(ws.error.code).to.equal('invalid_args');
    expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[0].reservations).to.deep.equal([]);
    // the lease Kea holds is still there
    expect((await kea.command('lease4-get', { 'ip-address': '192.0.2.150' })).result).to.equal(0);
  });

  it('a change from a web session with a second factor needs step-up; a read does not', async () => {
    // the account enrols an authenticator app, then signs in with both factors; its verification is then older than the window
    const { token, recovery } = await signInWithAuthenticatorApp(svc.url, 'stepper', 'stepper-password');
    const bearer = `Bearer ${token}`;
    await stepUpExpired(svc, token);

    const args = { subnet_id: 2, hw_address: '02:aa:00:00:03:01', ip_address: '198.51.100.30' };
    const refused = await api().post('/api/socket/dhcp/reservation-add').set('Authorization', bearer).send(args).expect(403);
    expect(refused.body.error.code).to.equal('step_up_required');
    expect((await overWs(bearer, 'dhcp:reservation_add', args)).error.code).to.equal('step_up_required');
    expect((await kea.command('config-get')).arguments.Dhcp4.subnet4[1].reservations).to.deep.equal([]);
    await api().get('/api/socket/dhcp/reservations').set('Authorization', bearer).expect(200);

    await api().post('/api/auth/step-up').set('Authorization', bearer).send({ code: recovery[0] }).expect(204);
    await api().post('/api/socket/dhcp/reservation-add').set('Authorization', bearer).send(args).expect(200);
    await api().post('/api/socket/dhcp/reservation-remove').set('Authorization', bearer).send({ subnet_id: 2, hw_address: args.hw_address }).expect(200);
  });

  it('Kea stopped: 503 unavailable within a second and health says so; back by itself when Kea is', async () => {
    await kea.halt();
    try {
      const started = Date.now();
      const res = await api().get('/api/socket/dhcp/leases').set('Authorization', reader).expect(503);
      expect(res.body.error.code).to.equal('unavailable');
      expect(Date.now() - started).to.be.below(1000);
      const ws = await overWs(writer, 'dhcp:reservation_add', { subnet_id: 1, hw_address: '02:aa:00:00:02:01', ip_address: '192.0.2.12' });
      expect(ws.error.code).to.equal('unavailable');
      const health = (await api().get('/api/socket/dhcp/health').expect(200)).body;
      // where Kea's socket lives is not told to anyone
      expect(health).to.deep.equal({ available: false, version: null, subnets: [], reason: 'Kea is not available', host_facts_hidden: true });
      const told = (await api().get('/api/socket/dhcp/health').set('Authorization', reader).expect(200)).body;
      expect(told.reason).to.equal(`Kea is not running: no control socket at ${kea.socketPath}`);
      const providers = (await api().get('/api/socket/providers').set('Authorization', writer).expect(200)).body;
      expect(providers.providers.find((p: any) => p.name === 'dhcp')).to.include({ available: false });
    } finally {
      await kea.start();
    }
    const back = await api().post('/api/socket/dhcp/lease-release').set('Authorization', writer).send({ ip_address: '192.0.2.150' }).expect(200);
    expect(back.body).to.deep.equal({ released: true, ip_address: '192.0.2.150' });
  });
});
