import { expect } from 'chai';
import { Validator } from '@seriousme/openapi-schema-validator';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import knex from 'knex';
import request from 'supertest';
import { startService, adminAuth, basic, type TestService } from '../support/service.js';
import { eventually, dbIdle } from './helpers.js';

/** The two example plugins of plugins/, loaded from the repository folder as `npm start` does. */
const PLUGINS_DIR = fileURLToPath(new URL('../../plugins', import.meta.url));
const PG_SOCKET = process.env.TEST_PG_SOCKET || '/var/run/postgresql/.s.PGSQL.5432';
const SECRET = 'forwarder-test-secret-0123456789';

interface Received {
  headers: http.IncomingHttpHeaders;
  raw: string;
  at: number;
}

/** A local HTTP receiver; `plan` holds the statuses of the next answers (then 200). */
class Receiver {
  readonly received: Received[] = [];
  plan: number[] = [];
  private server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      this.received.push({ headers: req.headers, raw: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      res.statusCode = this.plan.length ? this.plan.shift()! : 200;
      res.end('{}');
    });
  });
  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hooks/service?token=receiver-side`;
  }
  reset(plan: number[] = []) {
    this.received.length = 0;
    this.plan = plan;
  }
  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

describe('example plugins', () => {
  let svc: TestService;
  const receiver = new Receiver();
  let receiverUrl: string;
  const viewer = basic('viewer', 'viewer-password-1');
  const envKey = 'SERVICE_PLUGIN_OUTBOUND_FORWARDER_TIMEOUT_MS';

  before(async () => {
    if (!fs.existsSync(PG_SOCKET) || !fs.statSync(PG_SOCKET).isSocket()) {
      throw new Error(`the pg-socket example needs PostgreSQL's UNIX socket at ${PG_SOCKET} (start PostgreSQL, or set TEST_PG_SOCKET)`);
    }
    receiverUrl = await receiver.start();
    // a setting from the environment is locked against the settings API; the admin is a
    // superadmin, who may let the forwarder reach the local receiver (allow_private_destinations)
    svc = await startService({ env: { SERVICE_PLUGINS_DIR: PLUGINS_DIR, [envKey]: '2000', SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    if (PG_SOCKET !== '/var/run/postgresql/.s.PGSQL.5432') {
      await request(svc.url).patch('/api/plugins/pg-socket/settings').set('Authorization', adminAuth()).send({ socket_path: PG_SOCKET }).expect(200);
    }
    await svc.service.iam.ledger.applyAll();
    await request(svc.url)
      .post('/api/users')
      .set('Authorization', adminAuth())
      .send({ username: 'viewer', password: 'viewer-password-1', groups: ['INT_VIEWER'] })
      .expect(201);
  });
  after(async () => {
    if (svc) {
      await dbIdle(svc.service.db);
      await svc.destroy();
    }
    await receiver.close();
  });

  const admin = () => adminAuth();
  const status = async () => (await request(svc.url).get('/api/plugins/outbound-forwarder/status').set('Authorization', admin()).expect(200)).body;
  const notify = async (title: string) =>
    (
      await request(svc.url)
        .post('/api/notifications')
        .set('Authorization', admin())
        .send({ title, message: `${title} body` })
        .expect(202)
    ).body;
  const configure = async (changes: Record<string, string | null>) =>
    (await request(svc.url).patch('/api/plugins/outbound-forwarder/settings').set('Authorization', admin()).send(changes).expect(200)).body;

  describe('outbound forwarder', () => {
    it('starts idle and harmless without a url', async () => {
      const p = (await request(svc.url).get('/api/plugins').set('Authorization', admin()).expect(200)).body.plugins;
      expect(p.find((x: any) => x.id === 'outbound-forwarder')).to.include({ state: 'loaded', error: null });
      expect(await status()).to.include({ configured: false, target: null, delivered: 0 });
      // status needs the plugin's own deliveries.read (the observer role maps it to INT_ADMIN)
      const res = await request(svc.url).get('/api/plugins/outbound-forwarder/status').set('Authorization', viewer).expect(403);
      expect(res.body.error.message).to.equal('missing permission plugin:outbound-forwarder:deliveries.read');
      await request(svc.url).post('/api/plugins/outbound-forwarder/test').set('Authorization', admin()).expect(409);
      // the document says what the server does: status needs deliveries.read, test answers 202 or 409
      const paths = (await request(svc.url).get('/openapi.json').expect(200)).body.paths;
      expect(paths['/api/plugins/outbound-forwarder/status'].get['x-permission']).to.equal('plugin:outbound-forwarder:deliveries.read');
      expect(paths['/api/plugins/outbound-forwarder/test'].post.responses).to.include.keys('202', '409').and.not.have.property('200');
      // with the plugin's routes in it, the document is still valid OpenAPI 3.1
      const validator = new Validator();
      const result = await validator.validate((await request(svc.url).get('/openapi.json').expect(200)).body);
      expect(result.valid, JSON.stringify(result.errors)).to.equal(true);
    });

    it("settings: secrets masked, environment values locked, unknown keys refused, values the plugin's rules refuse never stored", async () => {
      const patch = (changes: Record<string, string | null>) =>
        request(svc.url).patch('/api/plugins/outbound-forwarder/settings').set('Authorization', admin()).send(changes);
      await patch({ nope: 'x' }).expect(400);
      const locked = await patch({ timeout_ms: '5' }).expect(409);
      expect(locked.body.error.message).to.contain('timeout_ms');
      // named as every refusal names a field
      expect(locked.body.error.details).to.deep.equal([
        { field: 'timeout_ms', message: 'is set in the environment (SERVICE_PLUGIN_OUTBOUND_FORWARDER_TIMEOUT_MS)' },
      ]);
      await request(svc.url).patch('/api/plugins/outbound-forwarder/settings').set('Authorization', viewer).send({ url: receiverUrl }).expect(403);

      // a value out of the plugin's range: 400 naming it, nothing stored, the plugin runs on
      for (const max_attempts of ['999', '0']) {
        const refused = await patch({ url: receiverUrl, secret: SECRET, max_attempts }).expect(400);
        expect(refused.body.error.details, max_attempts).to.deep.equal([
          { field: 'max_attempts', message: max_attempts === '0' ? 'must be greater than or equal to 1' : 'must be less than or equal to 20' },
        ]);
        expect(JSON.stringify(refused.body)).not.to.contain(SECRET);
      }
      // a url without the secret that signs its deliveries
      const unsigned = await patch({ url: receiverUrl }).expect(400);
      expect(unsigned.body.error.details).to.deep.equal([{ field: 'secret', message: 'is required when url is set: deliveries are always signed' }]);
      const settings = (await request(svc.url).get('/api/plugins/outbound-forwarder/settings').set('Authorization', admin()).expect(200)).body.settings;
      expect(settings.filter((x: { source: string }) => x.source === 'store')).to.deep.equal([]);
      const plugin = (await request(svc.url).get('/api/plugins').set('Authorization', admin()).expect(200)).body.plugins.find(
        (x: any) => x.id === 'outbound-forwarder',
      );
      expect(plugin).to.include({ state: 'loaded', error: null });
      expect(await status()).to.include({ configured: false });

      await configure({ url: receiverUrl, secret: SECRET, allow_private_destinations: 'true' });
      const ok = await configure({ max_attempts: '4', backoff_ms: '40' });
      expect(ok.plugin).to.include({ state: 'loaded', error: null });
      const byKey = Object.fromEntries(ok.settings.map((s: any) => [s.key, s]));
      expect(byKey.secret).to.include({ value: null, configured: true, secret: true, source: 'store' });
      expect(byKey.url).to.include({ value: receiverUrl, source: 'store', locked: false });
      expect(byKey.timeout_ms).to.include({ value: '2000', source: 'env', locked: true });
      const listed = JSON.stringify((await request(svc.url).get('/api/plugins/outbound-forwarder/settings').set('Authorization', admin()).expect(200)).body);
      expect(listed).not.to.contain(SECRET);
      // the status shows the receiver's origin only, never its path or query
      expect(await status()).to.include({ configured: true, target: new URL(receiverUrl).origin });
    });

    it('POSTs a real notification as signed JSON', async () => {
      receiver.reset();
      const created = await notify('Deploy finished');
      const got = await eventually(() => {
        expect(receiver.received.length).to.equal(1);
        return receiver.received[0];
      });
      expect(got.headers['content-type']).to.equal('application/json');
      expect(got.headers['x-service-event']).to.equal('notification.outbound');
      const expected = 'sha256=' + crypto.createHmac('sha256', SECRET).update(got.raw).digest('hex');
      const given = String(got.headers['x-service-signature-256']);
      expect(given.length).to.equal(expected.length);
      expect(crypto.timingSafeEqual(Buffer.from(given), Buffer.from(expected))).to.equal(true);
      const body = JSON.parse(got.raw);
      expect(body.event).to.equal('notification.outbound');
      expect(body.delivery_id).to.equal(got.headers['x-service-delivery']);
      expect(body.notification).to.include({
        id: created.id,
        seq: created.seq,
        title: 'Deploy finished',
        message: 'Deploy finished body',
        level: 'info',
        user: null,
      });
      await eventually(async () => expect(await status()).to.include({ delivered: 1, pending: 0 }));
    });

    it('retries with backoff when the receiver fails twice, with the same delivery id', async () => {
      receiver.reset([503, 502]);
      await notify('Flaky receiver');
      await eventually(() => expect(receiver.received.length).to.equal(3));
      const ids = new Set(receiver.received.map((r) => r.headers['x-service-delivery']));
      expect(ids.size).to.equal(1);
      const [a, b, c] = receiver.received.map((r) => r.at);
      expect(b - a).to.be.at.least(35); // backoff_ms 40, then doubled
      expect(c - b).to.be.at.least(75);
      await eventually(async () => expect(await status()).to.include({ delivered: 2, retries: 2, failed: 0, pending: 0 }));
    });

    it('gives up after max_attempts; a permanent error is not retried', async () => {
      receiver.reset([500, 500, 500, 500, 500, 500]);
      await notify('Dead receiver');
      await eventually(async () => expect(await status()).to.include({ failed: 1, pending: 0, last_error: 'HTTP 500' }), 8000);
      await new Promise((r) => setTimeout(r, 400));
      expect(receiver.received.length).to.equal(4);

      receiver.reset([400]);
      await notify('Rejected');
      await eventually(async () => expect(await status()).to.include({ failed: 2, pending: 0, last_error: 'HTTP 400' }));
      expect(receiver.received.length).to.equal(1);
    });

    it('a receiver that is down counts as failed after the bound', async () => {
      const closed = http.createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const port = (closed.address() as AddressInfo).port;
      await new Promise<void>((resolve) => closed.close(() => resolve()));
      await configure({ url: `http://127.0.0.1:${port}/gone`, secret: SECRET, max_attempts: '2', backoff_ms: '10' });
      await request(svc.url).post('/api/plugins/outbound-forwarder/test').set('Authorization', admin()).expect(202);
      await eventually(async () => expect(await status()).to.include({ failed: 1, pending: 0, retries: 1, last_error: 'ECONNREFUSED' }));
      await configure({ url: receiverUrl, secret: SECRET, max_attempts: '4', backoff_ms: '40' });
    });

    it('a disabled forwarder sends nothing', async () => {
      await request(svc.url).post('/api/plugins/outbound-forwarder/disable').set('Authorization', admin()).expect(200);
      receiver.reset();
      await notify('Nobody forwards this');
      await new Promise((r) => setTimeout(r, 300));
      expect(receiver.received.length).to.equal(0);
      await request(svc.url).get('/api/plugins/outbound-forwarder/status').set('Authorization', admin()).expect(404);
      await request(svc.url).post('/api/plugins/outbound-forwarder/enable').set('Authorization', admin()).expect(200);
      await notify('Forwarded again');
      await eventually(() => expect(receiver.received.length).to.equal(1));
    });
  });

  describe('pg-socket', () => {
    const ask = async (operation: string, args?: Record<string, unknown>) => {
      const request_id = `test-${crypto.randomUUID()}`;
      const answer = svc.service.bus.waitFor('socket:response', { match: (r) => r.request_id === request_id, timeoutMs: 10_000 });
      svc.service.bus.emit('socket:request', { request_id, operation, ...(args ? { args } : {}) });
      return answer;
    };

    it('registers the socket provider its manifest declares', async () => {
      const p = (await request(svc.url).get('/api/plugins').set('Authorization', admin()).expect(200)).body.plugins.find((x: any) => x.id === 'pg-socket');
      expect(p).to.include({ state: 'loaded', error: null });
      expect(p.socket_providers).to.deep.equal({ provides: ['pgsql'], uses: [], registered: ['pgsql'] });
      // where the socket lives is shown to those who administer a host service (anonymous: '')
      const providers = (await request(svc.url).get('/api/socket/providers').set('Authorization', admin()).expect(200)).body.providers;
      expect(providers.find((x: any) => x.name === 'pgsql')).to.deep.include({ plugin: 'pg-socket', socket_path: PG_SOCKET, available: true });
      const anonymous = (await request(svc.url).get('/api/socket/providers').expect(200)).body.providers;
      expect(anonymous.find((x: any) => x.name === 'pgsql')).to.deep.include({ plugin: 'pg-socket', socket_path: '', available: true });
      // a reader holds the plugin's own permission (plugin:pg-socket:api:read): that administers no host service
      const read = (await request(svc.url).get('/api/socket/providers').set('Authorization', viewer).expect(200)).body;
      expect(read.host_facts_hidden).to.equal(true);
      expect(read.providers.map((x: any) => x.socket_path)).to.deep.equal(read.providers.map(() => ''));
    });

    it('serves pgsql:health and pgsql:server_info through socket:request', async () => {
      const health = await ask('pgsql:health');
      expect(health).to.include({ ok: true, provider: 'pgsql', error: null });
      expect(health.result).to.include({ healthy: true, reachable: true, socket_path: PG_SOCKET });
      expect((health.result as any).ssl_supported).to.be.a('boolean');

      const info = await ask('pgsql:server_info');
      expect(info.ok, JSON.stringify(info.error)).to.equal(true);
      const result = info.result as any;
      expect(result.auth).to.be.a('string');
      if (result.accepted) {
        // the server let the role in without a password: its version is the one PostgreSQL reports
        const db = knex({
          client: 'pg',
          connection: { host: PG_SOCKET.replace(/\/[^/]+$/, ''), user: 'postgres', database: 'postgres' },
          pool: { min: 0, max: 1 },
        });
        try {
          const row = (await db.raw('SHOW server_version')).rows[0];
          expect(result.parameters.server_version).to.equal(row.server_version);
        } finally {
          await db.destroy();
        }
      } else {
        expect(result.auth).not.to.equal('ok');
      }
      const bad = await ask('pgsql:server_info', { database: 'x; drop' });
      expect(bad.error?.code).to.equal('invalid_args');
      expect((await ask('pgsql:nope')).error?.code).to.equal('unknown_operation');
    });

    it('its operations are HTTP routes of core, with the same permissions, documented while it runs', async () => {
      // health declares no permission: over HTTP a plugin's operation then needs a signed-in
      // caller (only core's reads are open to anyone), as a ws connection does
      await request(svc.url).get('/api/socket/pgsql/health').expect(401);
      const res = await request(svc.url).get('/api/socket/pgsql/health').set('Authorization', viewer).expect(200);
      expect(res.body).to.include({ healthy: true, socket_path: PG_SOCKET });
      // server_info needs plugin:pg-socket:api:read: 401 without a credential, 403 without it
      await request(svc.url).get('/api/socket/pgsql/server-info').expect(401);
      const info = await request(svc.url).get('/api/socket/pgsql/server-info').set('Authorization', viewer).query({ database: 'postgres' }).expect(200);
      expect(info.body).to.include({ socket_path: PG_SOCKET, database: 'postgres' });
      const bad = await request(svc.url).get('/api/socket/pgsql/server-info').set('Authorization', viewer).query({ database: 'x; drop' }).expect(400);
      expect(bad.body.error.details[0].field).to.equal('database');
      await request(svc.url)
        .post('/api/groups')
        .set('Authorization', admin())
        .send({ name: 'dashonly', permissions: ['feature:dashboard.view'] })
        .expect(201);
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', admin())
        .send({ username: 'dash', password: 'dash-password-1', groups: ['dashonly'] })
        .expect(201);
      await request(svc.url).get('/api/socket/pgsql/server-info').set('Authorization', basic('dash', 'dash-password-1')).expect(403);
      // whether it is alive is anyone's; where its socket lives is not
      const hidden = (await request(svc.url).get('/api/socket/pgsql/health').set('Authorization', basic('dash', 'dash-password-1')).expect(200)).body;
      expect(hidden).to.include({ healthy: true, socket_path: '', host_paths_hidden: true });
      // only what the operation declares: its method, and no route for an operation without `http`
      const wrongMethod = await request(svc.url).post('/api/socket/pgsql/health').set('Authorization', admin()).send({}).expect(405);
      expect(wrongMethod.headers.allow).to.equal('GET');
      await request(svc.url).get('/api/socket/pgsql/nope').expect(404);

      const documented = async () => (await request(svc.url).get('/openapi.json').expect(200)).body.paths;
      const paths = await documented();
      expect(paths['/api/socket/pgsql/health'].get).to.deep.include({ tags: ['socket-management'] });
      expect(paths['/api/socket/pgsql/server-info'].get.parameters.map((p: any) => p.name)).to.deep.equal(['database']);
      // a stopped plugin's provider is gone: its routes answer 404 and leave the document
      await request(svc.url).post('/api/plugins/pg-socket/disable').set('Authorization', admin()).expect(200);
      try {
        await request(svc.url).get('/api/socket/pgsql/health').expect(404);
        expect(await documented()).not.to.have.property('/api/socket/pgsql/health');
      } finally {
        await request(svc.url).post('/api/plugins/pg-socket/enable').set('Authorization', admin()).expect(200);
      }
      expect(await documented()).to.have.property('/api/socket/pgsql/health');
    });

    it('its socket path is a host path: a plain administrator may not point the probes elsewhere (403 naming it)', async () => {
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', admin())
        .send({ username: 'plainadmin', password: 'plain-admin-password-1', groups: ['INT_ADMIN'] })
        .expect(201);
      const refused = await request(svc.url)
        .patch('/api/plugins/pg-socket/settings')
        .set('Authorization', basic('plainadmin', 'plain-admin-password-1'))
        .send({ socket_path: '/run/docker.sock' })
        .expect(403);
      expect(JSON.stringify(refused.body.error)).to.include('socket_path');
      const settings = (await request(svc.url).get('/api/plugins/pg-socket/settings').set('Authorization', admin()).expect(200)).body;
      expect(JSON.stringify(settings)).not.to.include('/run/docker.sock');
    });

    it('reports a missing socket instead of failing', async () => {
      const changed = (
        await request(svc.url)
          .patch('/api/plugins/pg-socket/settings')
          .set('Authorization', admin())
          .send({ socket_path: '/nonexistent/.s.PGSQL.5432' })
          .expect(200)
      ).body;
      expect(changed.plugin).to.include({ state: 'loaded' });
      const health = await ask('pgsql:health');
      expect(health.ok).to.equal(true);
      expect(health.result).to.include({ healthy: false, reachable: false, error: 'ENOENT' });
      expect((await ask('pgsql:server_info')).error?.code).to.equal('unavailable');
      const providers = (await request(svc.url).get('/api/socket/providers').expect(200)).body.providers;
      expect(providers.find((x: any) => x.name === 'pgsql')).to.include({ available: false });
      const original = PG_SOCKET === '/var/run/postgresql/.s.PGSQL.5432' ? null : PG_SOCKET;
      await request(svc.url).patch('/api/plugins/pg-socket/settings').set('Authorization', admin()).send({ socket_path: original }).expect(200);
      expect((await ask('pgsql:health')).result).to.include({ healthy: true });
    });
  });
});
