import { expect } from 'chai';
import request from 'supertest';
import { startContainerd, type TestContainerd } from '../../support/containerd.js';
import { basic, startService, SYSTEM_KEY, type TestService } from '../../support/service.js';
import { WsClient } from '../../gateway/helpers.js';
import { signInWithAuthenticatorApp, stepUpExpired } from '../../auth/helpers.js';
import { containerdEntry, CT_DELETE, CT_LIST, NS_CREATE, NS_LIST, providersFile, VERSION } from './helpers.js';

const perm = (method: string) => `socket:grpc:containerd:${method}`;

/**
 * A gRPC daemon through the running service, containerd real: HTTP and ws answer the same, the
 * method's permission holds (granted like any host permission), a bad request names its field,
 * a change needs step-up and is in the audit trail, a daemon away is 503 and back at once.
 */
describe('gRPC provider through the service (real containerd)', function () {
  this.timeout(60_000);
  let containerd: TestContainerd;
  let cfg: ReturnType<typeof providersFile>;
  let svc: TestService;
  let reader: string;
  let writer: string;
  let nobody: string;
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };

  before(async () => {
    containerd = await startContainerd();
    cfg = providersFile([containerdEntry(containerd.socketPath)]);
    svc = await startService({
      env: {
        SERVICE_GRPC_PROVIDERS: cfg.file,
        SERVICE_SYSTEM_API_KEY: SYSTEM_KEY,
        SERVICE_HOST_SERVICE_TIMEOUT_MS: '2000',
        SERVICE_ADMIN_FORCE_SUPERADMIN: 'true',
      },
    });
    // a method's permission is a host permission: granted with the system key
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'ctd-readers', permissions: [perm(VERSION), perm(NS_LIST), perm(CT_LIST)] })
      .expect(201);
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'ctd-writers', permissions: [perm(VERSION), perm(NS_CREATE)] })
      .expect(201);
    for (const [name, groups] of [
      ['reader', ['INT_VIEWER', 'ctd-readers']],
      ['writer', ['INT_VIEWER', 'ctd-writers']],
      ['nobody', ['INT_VIEWER']],
    ] as const) {
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: name, password: `${name}-password`, groups })
        .expect(201);
    }
    reader = basic('reader', 'reader-password');
    writer = basic('writer', 'writer-password');
    nobody = basic('nobody', 'nobody-password');
  });
  after(async () => {
    await svc?.destroy();
    cfg?.remove();
    await containerd?.stop();
  });

  /** one socket:request over ws as `auth`, its socket:response payload */
  const overWs = async (auth: string | Record<string, string>, operation: string, args: Record<string, unknown>) => {
    const headers = typeof auth === 'string' ? { Authorization: auth } : auth;
    const ws = await WsClient.connect(svc, { headers });
    try {
      const id = `r-${Math.random().toString(36).slice(2)}`;
      ws.send({ event: 'socket:request', payload: { request_id: id, operation, args } });
      return (await ws.next('socket:response', (f) => f.payload.request_id === id)).payload;
    } finally {
      await ws.close();
    }
  };
  const callHttp = (auth: string | null, body: Record<string, unknown>) => {
    const req = api().post('/api/socket/containerd/call');
    if (auth) req.set('Authorization', auth);
    return req.send(body);
  };

  it('is registered from the file, its health open to anyone, its permissions in the catalog', async () => {
    const health = (await api().get('/api/socket/containerd/health').expect(200)).body;
    expect(health.available).to.equal(true);
    expect(health.methods).to.include.members([VERSION, NS_LIST, NS_CREATE, CT_LIST]);
    const providers = (await api().get('/api/socket/providers').set(sys).expect(200)).body;
    expect(providers.providers.find((p: { name: string }) => p.name === 'containerd')).to.include({ available: true, socket_path: containerd.socketPath });
    const catalog = (await api().get('/api/permissions').set('Authorization', reader).expect(200)).body.permissions.map((p: { id: string }) => p.id);
    expect(catalog).to.include.members([perm(VERSION), perm(NS_CREATE), perm(CT_LIST)]);
    const doc = (await api().get('/openapi.json').expect(200)).body;
    expect(doc.paths['/api/socket/containerd/call'].post).to.be.an('object');
    expect(doc.paths['/api/socket/containerd/health'].get).to.be.an('object');
  });

  it('HTTP POST /api/socket/containerd/call and the ws frame answer the same', async () => {
    const http = (await callHttp(reader, { method: VERSION, request: {} }).expect(200)).body;
    expect(http).to.deep.equal({ response: { version: containerd.version.version, revision: containerd.version.revision } });
    const ws = await overWs(reader, 'containerd:call', { method: VERSION, request: {} });
    expect(ws.ok, JSON.stringify(ws.error)).to.equal(true);
    expect(ws.result).to.deep.equal(http);

    await containerd.ctr('namespaces', 'create', 'svc-ns');
    const listed = (await callHttp(reader, { method: NS_LIST }).expect(200)).body;
    expect(listed.response.namespaces.map((n: { name: string }) => n.name)).to.include('svc-ns');
    expect((await overWs(reader, 'containerd:call', { method: NS_LIST })).result).to.deep.equal(listed);
    const containers = (await callHttp(reader, { method: CT_LIST, metadata: { 'containerd-namespace': 'svc-ns' } }).expect(200)).body;
    expect(containers).to.deep.equal({ response: { containers: [] } });
  });

  it("a caller without the method's permission: 403 naming it (ws forbidden); anonymous 401", async () => {
    const denied = await callHttp(nobody, { method: VERSION }).expect(403);
    expect(denied.body.error.code).to.equal('forbidden');
    expect(denied.body.error.message).to.contain(perm(VERSION));
    const ws = await overWs(nobody, 'containerd:call', { method: VERSION });
    expect(ws.error.code).to.equal('forbidden');
    expect(ws.error.message).to.contain(perm(VERSION));
    // reads of one method do not open another
    expect((await callHttp(reader, { method: NS_CREATE, request: { namespace: { name: 'x' } } }).expect(403)).body.error.message).to.contain(perm(NS_CREATE));
    await callHttp(null, { method: VERSION }).expect(401);
    // the system key holds every permission
    expect((await api().post('/api/socket/containerd/call').set(sys).send({ method: VERSION }).expect(200)).body.response.version).to.equal(
      containerd.version.version,
    );
  });

  it('a method off the list is 403 not_allowed; a malformed one, an unknown field and bad metadata are 400 naming the field', async () => {
    const off = await callHttp(reader, { method: CT_DELETE, request: { id: 'x' }, metadata: { 'containerd-namespace': 'svc-ns' } }).expect(403);
    expect(off.body.error.code).to.equal('not_allowed');
    expect((await overWs(reader, 'containerd:call', { method: CT_DELETE, request: { id: 'x' } })).error.code).to.equal('not_allowed');

    const cases: Array<[Record<string, unknown>, string[]]> = [
      [{ method: 'Version' }, ['method']],
      [{}, ['method']],
      [{ method: VERSION, request: { bogus: 1 } }, ['request.bogus']],
      [{ method: NS_LIST, request: { filters: 'not-a-list' } }, ['request.filters']],
      [{ method: CT_LIST, metadata: { 'containerd-namespace': 'No Such/Namespace' } }, ['metadata.containerd-namespace']],
      [{ method: CT_LIST, metadata: { 'x-tenant': 'a' } }, ['metadata.x-tenant']],
      [{ method: VERSION, extra: true }, ['extra']],
    ];
    for (const [body, fields] of cases) {
      const res = await callHttp(reader, body).expect(400);
      expect(
        res.body.error.details.map((d: { field: string }) => d.field),
        JSON.stringify(body),
      ).to.deep.equal(fields);
      const ws = await overWs(reader, 'containerd:call', body);
      expect(ws.error.code, JSON.stringify(body)).to.equal('invalid_args');
      expect(
        ws.error.details.map((d: { field: string }) => d.field),
        JSON.stringify(body),
      ).to.deep.equal(fields);
    }
  });

  it('a change method: forbidden to a reader, done for a writer, in the audit trail by field names only; a read is not', async () => {
    const create = { method: NS_CREATE, request: { namespace: { name: 'made-by-grpc', labels: { secret_label: 'hunter2-value' } } } };
    await callHttp(reader, create).expect(403);
    const madeRes = await callHttp(writer, create);
    expect(madeRes.status, JSON.stringify(madeRes.body)).to.equal(200);
    const made = madeRes.body;
    expect(made.response.namespace).to.deep.equal({ name: 'made-by-grpc', labels: { secret_label: 'hunter2-value' } });
    expect(await containerd.ctr('namespaces', 'ls', '-q')).to.contain('made-by-grpc');
    const again = await overWs(writer, 'containerd:call', create);
    expect(again.error.code).to.equal('conflict');

    await svc.service.iam.audit.flush();
    const rows = await svc.service.db('audit_events').where({ action: 'socket.operation', target_id: 'containerd:call' }).orderBy('seq');
    const events = rows.map((r) => ({ ...r, details: typeof r.details === 'string' ? JSON.parse(r.details) : r.details }));
    const done = events.find((e) => e.outcome === 'success');
    expect(done, JSON.stringify(events)).to.not.equal(undefined);
    expect(done.actor_username).to.equal('writer');
    expect(done.details.args).to.deep.equal({ method: NS_CREATE, request_fields: ['namespace'], metadata: [] });
    expect(events.some((e) => e.outcome === 'denied' && e.actor_username === 'reader' && e.details.args?.method === NS_CREATE)).to.equal(true);
    expect(events.some((e) => e.outcome === 'failure' && e.actor_username === 'writer' && e.details.error === 'conflict')).to.equal(true);
    // a read that went through is not in the trail; no request value is anywhere in it
    expect(events.some((e) => e.outcome === 'success' && e.details.args?.method === VERSION)).to.equal(false);
    const table = JSON.stringify(rows);
    expect(table).not.to.contain('hunter2-value');
    expect(table).not.to.contain('made-by-grpc');
  });

  it('a web session with a second factor: a change method needs step-up, a read method does not', async () => {
    const { token, recovery } = await signInWithAuthenticatorApp(svc.url, 'admin', 'admin-test-password');
    const session = { Authorization: `Bearer ${token}` };
    // the verification moved out of the window, as 16 minutes passing would
    await stepUpExpired(svc, token);

    const create = { method: NS_CREATE, request: { namespace: { name: 'stepped-up' } } };
    const refused = await api().post('/api/socket/containerd/call').set(session).send(create).expect(403);
    expect(refused.body.error.code).to.equal('step_up_required');
    expect((await overWs(session, 'containerd:call', create)).error.code).to.equal('step_up_required');
    expect(await containerd.ctr('namespaces', 'ls', '-q')).not.to.contain('stepped-up');
    // a read method goes through without it
    await api().post('/api/socket/containerd/call').set(session).send({ method: VERSION }).expect(200);

    await api().post('/api/auth/step-up').set(session).send({ code: recovery[0] }).expect(204);
    await api().post('/api/socket/containerd/call').set(session).send(create).expect(200);
    expect(await containerd.ctr('namespaces', 'ls', '-q')).to.contain('stepped-up');
  });

  it('containerd stopped: 503 unavailable at once, over HTTP and ws; answered again once it is back', async () => {
    await containerd.halt();
    try {
      const started = Date.now();
      const res = await callHttp(reader, { method: VERSION }).expect(503);
      expect(res.body.error.code).to.equal('unavailable');
      expect((await overWs(reader, 'containerd:call', { method: VERSION })).error.code).to.equal('unavailable');
      expect(Date.now() - started).to.be.below(1500);
      const health = (await api().get('/api/socket/containerd/health').expect(200)).body;
      expect(health.available).to.equal(false);
    } finally {
      await containerd.start();
    }
    const back = (await callHttp(reader, { method: VERSION }).expect(200)).body;
    expect(back.response.version).to.equal(containerd.version.version);
  });
});
