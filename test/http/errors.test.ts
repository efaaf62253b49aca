import { expect } from 'chai';
import request from 'supertest';
import Router from '@koa/router';
import http from 'node:http';
import { createHttpApp, mountRouters } from '../../src/http/app.js';
import { jsonBody } from '../../src/http/body.js';
import { createLogger } from '../../src/log.js';
import { startService, adminAuth, type TestService } from '../support/service.js';

describe('HTTP error bodies', () => {
  let svc: TestService;
  before(async () => {
    svc = await startService();
  });
  after(async () => svc.destroy());

  const shape = (body: any, code: string) => {
    expect(body).to.have.keys('error');
    expect(body.error.code).to.equal(code);
    expect(body.error.message).to.be.a('string').and.not.be.empty;
  };

  it('404 for an unknown route', async () => {
    const res = await request(svc.url).get('/api/does-not-exist').expect(404);
    shape(res.body, 'not_found');
  });

  it('400 for malformed JSON, naming the body', async () => {
    const res = await request(svc.url)
      .post('/api/me/api-keys')
      .set('Authorization', adminAuth())
      .set('Content-Type', 'application/json')
      .send('{"label": ')
      .expect(400);
    shape(res.body, 'validation_failed');
    expect(res.body.error.details[0].field).to.equal('body');
  });

  it('400 naming the invalid field', async () => {
    const res = await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).send({ label: '', scopes: 'x' }).expect(400);
    shape(res.body, 'validation_failed');
    const fields = res.body.error.details.map((d: any) => d.field);
    expect(fields).to.include.members(['label', 'scopes']);
  });

  it('413 for a body over 1 MiB', async () => {
    const big = JSON.stringify({ label: 'x'.repeat(1024 * 1024 + 10) });
    const res = await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).set('Content-Type', 'application/json').send(big).expect(413);
    shape(res.body, 'payload_too_large');
  });

  it('401 with WWW-Authenticate', async () => {
    const res = await request(svc.url).get('/api/me').expect(401);
    shape(res.body, 'unauthorized');
    expect(res.headers['www-authenticate']).to.match(/Bearer, Basic realm="service"/);
  });

  it('every response carries a request id, echoing a sane incoming one', async () => {
    const a = await request(svc.url).get('/healthz').expect(200);
    expect(a.headers['x-request-id']).to.match(/^[0-9a-f-]{36}$/);
    const b = await request(svc.url).get('/healthz').set('X-Request-Id', 'abc-123').expect(200);
    expect(b.headers['x-request-id']).to.equal('abc-123');
    const c = await request(svc.url).get('/healthz').set('X-Request-Id', 'bad id\twith spaces').expect(200);
    expect(c.headers['x-request-id']).not.to.equal('bad id\twith spaces');
  });

  it('500 without internals for an unexpected exception, logged with the request id', async () => {
    const lines: string[] = [];
    const log = createLogger('info', { write: (s: string) => void lines.push(s) } as any);
    const app = createHttpApp({ log, state: { iamReady: true, bootComplete: true, bootError: null, stopping: false }, keys: ['k'] });
    const r = new Router();
    r.get('/boom', () => {
      throw new Error('secret internal detail at /srv/app.ts:42');
    });
    r.post('/echo', (ctx) => {
      ctx.body = jsonBody(ctx);
    });
    mountRouters(app, [r]);
    const server = http.createServer(app.callback());
    const res = await request(server).get('/boom').expect(500);
    shape(res.body, 'internal');
    expect(JSON.stringify(res.body)).not.to.contain('secret internal detail');
    const logged = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'unhandled error');
    expect(logged.request_id).to.equal(res.headers['x-request-id']);
    const echo = await request(server).post('/echo').send({ a: 1 }).expect(200);
    expect(echo.body).to.deep.equal({ a: 1 });
    const wrongType = await request(server).post('/echo').set('Content-Type', 'text/plain').send('hi').expect(415);
    shape(wrongType.body, 'unsupported_media_type');
  });
});

describe('metrics', () => {
  let svc: TestService;
  before(async () => {
    svc = await startService();
  });
  after(async () => svc.destroy());

  it('GET /metrics serves Prometheus text with route patterns, not raw ids', async () => {
    await request(svc.url).get('/api/users/00000000-0000-4000-8000-000000000000').set('Authorization', adminAuth()).expect(404);
    await request(svc.url).get('/api/users').expect(401);
    const res = await request(svc.url).get('/metrics').expect(200);
    // a thrown error is measured with the status it was answered with
    expect(res.text).to.match(/http_request_duration_seconds_count\{method="GET",route="\/api\/users",status="401"\} 1/);
    expect(res.headers['content-type']).to.match(/text\/plain/);
    expect(res.text).to.contain('http_request_duration_seconds_bucket');
    expect(res.text).to.contain('route="/api/users/:id"');
    expect(res.text).not.to.contain('00000000-0000-4000-8000-000000000000');
    expect(res.text).to.match(/^ws_connections 0$/m);
  });

  it('answers HEAD on the health probes and /metrics as GET, without a body (a monitor may probe with it)', async () => {
    for (const path of ['/healthz', '/readyz', '/metrics']) {
      const get = await request(svc.url).get(path).expect(200);
      const head = await request(svc.url).head(path).expect(200);
      expect(head.headers['content-type'], path).to.equal(get.headers['content-type']);
      expect(head.text ?? '', path).to.equal('');
    }
  });

  it('GET /metrics counts the notifications written and the transactions that wrote them', async () => {
    await request(svc.url)
      .post('/api/notifications/batch')
      .set('Authorization', adminAuth())
      .send({
        notifications: [
          { title: 'a', message: 'm' },
          { title: 'b', message: 'm' },
        ],
      })
      .expect(202);
    const res = await request(svc.url).get('/metrics').expect(200);
    const value = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(res.text)?.[1]);
    expect(value('notifications_written')).to.be.at.least(2);
    expect(value('notification_write_batches')).to.be.within(1, value('notifications_written'));
  });
});
