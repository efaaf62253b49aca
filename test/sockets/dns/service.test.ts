import { expect } from 'chai';
import request from 'supertest';
import { startService, basic, SYSTEM_KEY, type TestService } from '../../support/service.js';
import { startUnbound, type TestUnbound } from '../../support/unbound.js';
import { WsClient } from '../../gateway/helpers.js';
import { signInWithAuthenticatorApp, stepUpExpired } from '../../auth/helpers.js';
import { lookupError, resolverOf } from './helpers.js';

/**
 * The dns provider through the whole service, with a real Unbound: HTTP routes and ws
 * socket:request frames answer alike, with the service's permissions, step-up and audit trail.
 */
describe('dns provider through the service (HTTP and ws)', function () {
  this.timeout(60_000);
  let unbound: TestUnbound;
  let svc: TestService;
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };
  const operator = { Authorization: basic('dnsop', 'dnsop-password') };
  const reader = { Authorization: basic('dnsreader', 'dnsreader-password') };
  const resolver = () => resolverOf(unbound.port);

  before(async () => {
    unbound = await startUnbound();
    svc = await startService({
      env: {
        SERVICE_DNS_CONTROL_SOCKET: unbound.controlSocket,
        SERVICE_DNS_ZONES: 'Home.Arpa',
        SERVICE_HOST_SERVICE_TIMEOUT_MS: '1000',
        SERVICE_SYSTEM_API_KEY: SYSTEM_KEY,
        SERVICE_ADMIN_FORCE_SUPERADMIN: 'true',
      },
    });
    // host permissions: granted with the system key
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'dnsops', permissions: ['socket:dns:read', 'socket:dns:write'] })
      .expect(201);
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'dnsreaders', permissions: ['socket:dns:read'] })
      .expect(201);
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'dnsop', password: 'dnsop-password', groups: ['INT_USER', 'dnsops'] })
      .expect(201);
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'dnsreader', password: 'dnsreader-password', groups: ['INT_USER', 'dnsreaders'] })
      .expect(201);
  });
  after(async () => {
    await svc?.destroy();
    await unbound?.destroy();
  });

  const ask = async (ws: WsClient, operation: string, args: Record<string, unknown>) => {
    const id = `r-${Math.random().toString(36).slice(2)}`;
    ws.send({ event: 'socket:request', payload: { request_id: id, operation, args } });
    return (await ws.next('socket:response', (f) => f.payload.request_id === id)).payload;
  };

  it('health is open to anyone and lists the zones', async () => {
    const res = await api().get('/api/socket/dns/health').expect(200);
    expect(res.body).to.deep.include({ available: true, zones: ['home.arpa.'], reason: null });
    expect(res.body.version).to.match(/^1\.\d+/);
    const providers = (await api().get('/api/socket/providers').set(operator).expect(200)).body;
    expect(providers.available).to.include('dns');
  });

  it('adds, lists and removes over HTTP and ws alike; the records resolve', async () => {
    const viaHttp = await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'web.home.arpa', type: 'A', data: '192.168.77.80' }).expect(200);
    expect(viaHttp.body).to.deep.equal({ record: { name: 'web.home.arpa.', type: 'A', ttl: 3600, data: '192.168.77.80' } });
    const ws = await WsClient.connect(svc, { headers: operator });
    try {
      const viaWs = await ask(ws, 'dns:record_add', { name: 'web.home.arpa', type: 'TXT', data: 'served by ws', ttl: 300 });
      expect(viaWs.ok, JSON.stringify(viaWs.error)).to.equal(true);
      expect(viaWs.result).to.deep.equal({ record: { name: 'web.home.arpa.', type: 'TXT', ttl: 300, data: 'served by ws' } });
      const listedHttp = (await api().get('/api/socket/dns/records').query({ zone: 'home.arpa' }).set(reader).expect(200)).body;
      const listedWs = await ask(ws, 'dns:records', { zone: 'home.arpa.' });
      expect(listedWs.result).to.deep.equal(listedHttp);
      expect(listedHttp.records).to.deep.include.members([
        { name: 'web.home.arpa.', type: 'A', ttl: 3600, data: '192.168.77.80' },
        { name: 'web.home.arpa.', type: 'TXT', ttl: 300, data: 'served by ws' },
      ]);
      expect(await resolver().resolve4('web.home.arpa')).to.deep.equal(['192.168.77.80']);

      // a duplicate is 409 over HTTP and conflict over ws
      const dup = await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'web.home.arpa', type: 'A', data: '192.168.77.80' }).expect(409);
      expect(dup.body.error.code).to.equal('conflict');
      expect((await ask(ws, 'dns:record_add', { name: 'web.home.arpa', type: 'CNAME', data: 'x.home.arpa' })).error.code).to.equal('conflict');

      const removedWs = await ask(ws, 'dns:record_remove', { name: 'web.home.arpa', type: 'TXT' });
      expect(removedWs.result).to.deep.include({ removed: 1 });
      const removedHttp = await api().post('/api/socket/dns/record-remove').set(operator).send({ name: 'web.home.arpa' }).expect(200);
      expect(removedHttp.body).to.deep.include({ removed: 1 });
      expect(await lookupError(resolver().resolve4('web.home.arpa'))).to.equal('ENOTFOUND');
      expect((await api().post('/api/socket/dns/record-remove').set(operator).send({ name: 'web.home.arpa' }).expect(404)).body.error.code).to.equal(
        'not_found',
      );
      expect((await api().post('/api/socket/dns/flush').set(operator).send({ name: 'web.home.arpa' }).expect(200)).body).to.deep.equal({
        flushed: 'web.home.arpa.',
      });
    } finally {
      await ws.close();
    }
  });

  it('bad args: 400 naming the field over HTTP, invalid_args over ws; outside the zones 403 forbidden_zone', async () => {
    const res = await api()
      .post('/api/socket/dns/record-add')
      .set(operator)
      .send({ name: 'inj.home.arpa', type: 'TXT', data: 'a\nlocal_zone evil. static' })
      .expect(400);
    expect(res.body.error.code).to.equal('validation_failed');
    expect(res.body.error.details).to.deep.equal([{ field: 'data', message: 'must be one line (no line breaks)' }]);
    const junk = await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'inj.home.arpa', type: 'A', data: '192.0.2.1 extra' }).expect(400);
    expect(junk.body.error.details[0].field).to.equal('data');
    const label = await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'in j.home.arpa', type: 'A', data: '192.0.2.1' }).expect(400);
    expect(label.body.error.details[0].field).to.equal('name');
    // a read takes its args from the query string: a bad zone is 400 too
    expect((await api().get('/api/socket/dns/records').query({ zone: 'a..b' }).set(reader).expect(400)).body.error.details[0].field).to.equal('zone');
    const ws = await WsClient.connect(svc, { headers: operator });
    try {
      const r = await ask(ws, 'dns:record_add', { name: 'inj.home.arpa', type: 'TXT', data: 'say "hi" "there"' });
      expect(r.error.code).to.equal('invalid_args');
      expect(r.error.details).to.deep.equal([{ field: 'data', message: 'must not hold a double quote or a backslash' }]);
      // over ws a number is a number
      expect((await ask(ws, 'dns:record_add', { name: 'inj.home.arpa', type: 'A', data: '192.0.2.1', ttl: '60' })).error.details[0].field).to.equal('ttl');
    } finally {
      await ws.close();
    }
    const zone = await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'www.example.com', type: 'A', data: '192.0.2.1' }).expect(403);
    expect(zone.body.error.code).to.equal('forbidden_zone');
    expect(await unbound.control('list_local_data')).not.to.match(/inj\.home\.arpa|example\.com|evil/);
  });

  it('permissions: 401 anonymous, 403 without socket:dns:write (before the args are read), reads need socket:dns:read', async () => {
    await api().post('/api/socket/dns/record-add').send({ name: 'p.home.arpa', type: 'A', data: '192.0.2.1' }).expect(401);
    const refused = await api().post('/api/socket/dns/record-add').set(reader).send({ name: 'p.home.arpa', type: 'A', data: 'junk' }).expect(403);
    expect(refused.body.error.code).to.equal('forbidden');
    await api().post('/api/socket/dns/flush').set(reader).send({ name: 'p.home.arpa' }).expect(403);
    await api().get('/api/socket/dns/records').expect(401);
    const plain = { Authorization: basic('plain', 'plain-password') };
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'plain', password: 'plain-password', groups: ['INT_USER'] })
      .expect(201);
    await api().get('/api/socket/dns/records').set(plain).expect(403);
    const ws = await WsClient.connect(svc, { headers: reader });
    try {
      expect((await ask(ws, 'dns:record_remove', { name: 'p.home.arpa' })).error.code).to.equal('forbidden');
    } finally {
      await ws.close();
    }
  });

  it('a change is a socket.operation event with the record in its args', async () => {
    await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'Audited.home.arpa', type: 'AAAA', data: '2001:DB8::1' }).expect(200);
    await api().post('/api/socket/dns/record-remove').set(operator).send({ name: 'audited.home.arpa', type: 'AAAA', data: '2001:db8:0::1' }).expect(200);
    await svc.service.iam.audit.flush();
    const rows = await svc.service.db('audit_events').where({ action: 'socket.operation' }).whereIn('target_id', ['dns:record_add', 'dns:record_remove']);
    const details = (e: { details: unknown }) => (typeof e.details === 'string' ? JSON.parse(e.details) : e.details);
    const add = rows.find((e) => e.target_id === 'dns:record_add' && details(e).args?.name === 'audited.home.arpa.');
    expect(add, JSON.stringify(rows)).to.not.equal(undefined);
    expect(add.outcome).to.equal('success');
    expect(details(add).args).to.deep.equal({ name: 'audited.home.arpa.', type: 'AAAA', data: '2001:db8::1' });
    const remove = rows.find((e) => e.target_id === 'dns:record_remove' && details(e).args?.name === 'audited.home.arpa.');
    expect(details(remove).args).to.deep.equal({ name: 'audited.home.arpa.', type: 'AAAA', data: '2001:db8::1' });
    // a refusal of the zone is in the trail as denied
    await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'x.example.org', type: 'A', data: '192.0.2.1' }).expect(403);
    await svc.service.iam.audit.flush();
    const denied = await svc.service.db('audit_events').where({ action: 'socket.operation', target_id: 'dns:record_add', outcome: 'denied' });
    expect(denied.map((e) => details(e).args.name)).to.include('x.example.org.');
  });

  it('a web session with a second factor verifies it again before a change; a read needs no step-up', async () => {
    const { token, recovery } = await signInWithAuthenticatorApp(svc.url, 'admin', 'admin-test-password');
    const bearer = { Authorization: `Bearer ${token}` };
    await stepUpExpired(svc, token);

    const body = { name: 'stepup.home.arpa', type: 'A', data: '192.168.77.90' };
    const refused = await api().post('/api/socket/dns/record-add').set(bearer).send(body).expect(403);
    expect(refused.body.error.code).to.equal('step_up_required');
    expect(await lookupError(resolver().resolve4('stepup.home.arpa'))).to.equal('ENOTFOUND');
    await api().get('/api/socket/dns/records').set(bearer).expect(200);
    await api().post('/api/auth/step-up').set(bearer).send({ code: recovery[0] }).expect(204);
    await api().post('/api/socket/dns/record-add').set(bearer).send(body).expect(200);
    expect(await resolver().resolve4('stepup.home.arpa')).to.deep.equal(['192.168.77.90']);
    await api().post('/api/socket/dns/record-remove').set(bearer).send({ name: 'stepup.home.arpa' }).expect(200);
  });

  it('Unbound away: 503 unavailable at once, and the records back after it restarts', async () => {
    await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'survivor.home.arpa', type: 'A', data: '192.168.77.77' }).expect(200);
    await unbound.stop();
    try {
      const started = Date.now();
      const away = await api().post('/api/socket/dns/record-add').set(operator).send({ name: 'late.home.arpa', type: 'A', data: '192.168.77.78' }).expect(503);
      expect(away.body.error.code).to.equal('unavailable');
      await api().get('/api/socket/dns/records').set(reader).expect(503);
      expect(Date.now() - started).to.be.below(1000);
      expect((await api().get('/api/socket/dns/health').expect(200)).body).to.deep.equal({
        available: false,
        version: null,
        zones: ['home.arpa.'],
        reason: 'Unbound is not available',
        host_facts_hidden: true,
      });
      // where the socket is, only to those who administer dns
      expect((await api().get('/api/socket/dns/health').set(reader).expect(200)).body.reason).to.include(unbound.controlSocket);
    } finally {
      await unbound.start();
    }
    // the next check (at most a second later) finds Unbound back, without the records, and puts them back
    await new Promise((r) => setTimeout(r, 1100));
    expect((await api().get('/api/socket/dns/health').expect(200)).body).to.include({ available: true });
    expect(await resolver().resolve4('survivor.home.arpa')).to.deep.equal(['192.168.77.77']);
    await api().post('/api/socket/dns/record-remove').set(operator).send({ name: 'survivor.home.arpa' }).expect(200);
  });
});
