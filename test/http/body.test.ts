import { expect } from 'chai';
import Router from '@koa/router';
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import request from 'supertest';
import { createHttpApp, mountRouters } from '../../src/http/app.js';
import { BODY_METHODS, DEFAULT_BODY_LIMIT, formBody, jsonBody, readOwnBytes, readsOwnBody } from '../../src/http/body.js';
import { createLogger } from '../../src/log.js';
import { startService, adminAuth, type TestService } from '../support/service.js';
import { githubExample, hmacHex } from '../notifications/scm/fixtures/load.js';

const SECRET = 'webhook-secret-for-body-tests-0123456789';
const WEBHOOK = '/api/notifications/webhook/scm';

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: any;
}

/**
 * One request with exact bytes: `chunks` written one by one (chunked unless a Content-Length is
 * given); with `stopAfterHeaders` the request is not ended, so an answer proves nothing more was read.
 */
function send(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  chunks: Buffer[],
  stopAfterHeaders = false,
): Promise<Answer & { req: http.ClientRequest }> {
  return new Promise((resolve, reject) => {
    const req = http.request(new URL(path, url), { method, headers });
    req.on('error', reject);
    req.on('response', (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        resolve({ status: res.statusCode!, headers: res.headers, body: text ? JSON.parse(text) : undefined, req });
      });
    });
    for (const c of chunks) req.write(c);
    if (!stopAfterHeaders) req.end();
  });
}

/** A real GitHub push (from @octokit/webhooks-examples), made unique (a byte-identical body is a replay). */
function pushPayload(message: string): any {
  const payload = githubExample('push', (e) => e.ref === 'refs/heads/master' && !e.deleted && e.head_commit);
  payload.after = randomUUID().replace(/-/g, '').padEnd(40, '0');
  payload.head_commit.message = message;
  return payload;
}

const githubHeaders = (body: Buffer, signedOver: Buffer = body): Record<string, string> => ({
  'Content-Type': 'application/json',
  'Content-Length': String(body.length),
  'X-GitHub-Event': 'push',
  'X-GitHub-Delivery': randomUUID(),
  'X-Hub-Signature-256': `sha256=${hmacHex(signedOver, SECRET)}`,
});

describe('request bodies (@koa/bodyparser, and the bytes of a route that reads its own)', function () {
  this.timeout(30_000);

  describe('through the service', () => {
    let svc: TestService;
    before(async () => {
      svc = await startService({ env: { SERVICE_SCM_WEBHOOK_SECRET: SECRET } });
    });
    after(async () => svc?.destroy());

    const asAdmin = (extra: Record<string, string> = {}) => ({ Authorization: adminAuth(), ...extra });

    it('a webhook delivery holding a byte that is not UTF-8 verifies over its exact bytes, and one signed over its text re-encoded does not', async () => {
      const text = JSON.stringify(pushPayload('caf@@MARK@@ in Latin-1'));
      const at = text.indexOf('@@MARK@@');
      const body = Buffer.concat([Buffer.from(text.slice(0, at)), Buffer.from([0xff]), Buffer.from(text.slice(at + 8))]);
      expect(body.includes(Buffer.from([0x22, 0x63, 0x61, 0x66, 0xff]))).to.equal(true);
      // what a parser that keeps only text would hash: 0xff comes back as U+FFFD (ef bf bd)
      const reencoded = Buffer.from(body.toString('utf8'));
      expect(reencoded.equals(body)).to.equal(false);
      const forged = await send(svc.url, 'POST', WEBHOOK, githubHeaders(body, reencoded), [body]);
      expect(forged.status).to.equal(401);
      expect(forged.body.error.code).to.equal('unauthorized');
      const res = await send(svc.url, 'POST', WEBHOOK, githubHeaders(body), [body]);
      expect(res.status, JSON.stringify(res.body)).to.equal(202);
      expect(res.body.status).to.equal('accepted');
      expect(res.body.notification_id).to.be.a('string');
    });

    it('a webhook delivery with a leading UTF-8 byte-order mark verifies over its exact bytes and is taken', async () => {
      const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(pushPayload('with a byte-order mark')))]);
      const withoutMark = body.subarray(3);
      expect((await send(svc.url, 'POST', WEBHOOK, githubHeaders(body, withoutMark), [body])).status).to.equal(401);
      const res = await send(svc.url, 'POST', WEBHOOK, githubHeaders(body), [body]);
      expect(res.status, JSON.stringify(res.body)).to.equal(202);
      expect(res.body.status).to.equal('accepted');
    });

    it('the webhook reads its own bytes at any spelling of its path the router takes (trailing slash, case)', async () => {
      const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(pushPayload('another spelling \u00e9')))]);
      const res = await send(svc.url, 'POST', '/API/notifications/Webhook/scm/', githubHeaders(body), [body]);
      expect(res.status, JSON.stringify(res.body)).to.equal(202);
    });

    it('the webhook keeps its limit: 413 for a body over 1 MiB sent without a length', async () => {
      const body = Buffer.from(JSON.stringify({ zen: 'x'.repeat(DEFAULT_BODY_LIMIT) }));
      const headers = githubHeaders(body);
      delete headers['Content-Length'];
      const res = await send(svc.url, 'POST', WEBHOOK, headers, [body.subarray(0, 600_000), body.subarray(600_000)]);
      expect(res.status).to.equal(413);
      expect(res.body.error).to.deep.equal({
        code: 'payload_too_large',
        message: `request body exceeds ${DEFAULT_BODY_LIMIT} bytes`,
        details: { limit: DEFAULT_BODY_LIMIT },
      });
    });

    /** A batch of `POST /api/notifications/batch` padded with trailing blanks to exactly `size` bytes. */
    const batchOf = (size: number) => {
      const items = Array.from({ length: 250 }, (_, i) => ({ title: `item ${i}`, message: 'x'.repeat(4000) }));
      const text = JSON.stringify({ notifications: items });
      expect(text.length).to.be.below(size);
      return Buffer.from(text + ' '.repeat(size - text.length));
    };

    it('a JSON body of 1 MiB + 1 is 413 on a route of the default limit, declared or chunked, with the error body of the project', async () => {
      const body = batchOf(DEFAULT_BODY_LIMIT + 1);
      const expected = { code: 'payload_too_large', message: `request body exceeds ${DEFAULT_BODY_LIMIT} bytes`, details: { limit: DEFAULT_BODY_LIMIT } };
      const declared = await send(
        svc.url,
        'POST',
        '/api/notifications',
        asAdmin({ 'Content-Type': 'application/json', 'Content-Length': String(body.length) }),
        [body],
      );
      expect(declared.status).to.equal(413);
      expect(declared.body.error).to.deep.equal(expected);
      // chunked: the parser counts the bytes as they come
      const chunked = await send(svc.url, 'POST', '/api/notifications', asAdmin({ 'Content-Type': 'application/json' }), [
        body.subarray(0, 500_000),
        body.subarray(500_000),
      ]);
      expect(chunked.status).to.equal(413);
      expect(chunked.body.error).to.deep.equal(expected);
    });

    it('the same 1 MiB + 1 is taken by the batch route (8 MiB), declared or chunked; past 8 MiB it is 413 there too', async () => {
      const body = batchOf(DEFAULT_BODY_LIMIT + 1);
      const declaredOrChunked: Record<string, string>[] = [
        { 'Content-Type': 'application/json', 'Content-Length': String(body.length) },
        { 'Content-Type': 'application/json' },
      ];
      for (const headers of declaredOrChunked) {
        const res = await send(svc.url, 'POST', '/api/notifications/batch', asAdmin(headers), [body.subarray(0, 400_000), body.subarray(400_000)]);
        expect(res.status, JSON.stringify(res.body).slice(0, 300)).to.equal(202);
        expect(res.body.notifications).to.have.length(250);
      }
      const limit = 8 * 1024 * 1024;
      const over = Buffer.concat([body, Buffer.alloc(limit + 1 - body.length, 0x20)]);
      const res = await send(svc.url, 'POST', '/api/notifications/batch', asAdmin({ 'Content-Type': 'application/json' }), [over]);
      expect(res.status).to.equal(413);
      expect(res.body.error.details).to.deep.equal({ limit });
    });

    it('a declared Content-Length over the limit is 413 before anything is read', async () => {
      const headers = asAdmin({ 'Content-Type': 'application/json', 'Content-Length': String(DEFAULT_BODY_LIMIT + 1) });
      // the request is never finished: only an answer given without reading can arrive
      const res = await send(svc.url, 'POST', '/api/notifications', headers, [Buffer.from('{"title":')], true);
      res.req.destroy();
      expect(res.status).to.equal(413);
      expect(res.body.error.code).to.equal('payload_too_large');
      // a type the parser does not read is refused the same way
      const text = await send(svc.url, 'POST', '/api/notifications', { ...headers, 'Content-Type': 'text/plain' }, [Buffer.from('hi')], true);
      text.req.destroy();
      expect(text.status).to.equal(413);
    });

    it('a form body on an /api JSON route is 415, and so is a type the parser leaves unread; empty, either is {}', async () => {
      const form = await request(svc.url).post('/api/notifications').set('Authorization', adminAuth()).type('form').send('title=hello&message=m').expect(415);
      expect(form.body.error).to.deep.equal({
        code: 'unsupported_media_type',
        message: 'content type application/x-www-form-urlencoded is not accepted, send application/json',
      });
      const text = await request(svc.url)
        .post('/api/me/api-keys')
        .set('Authorization', adminAuth())
        .set('Content-Type', 'text/plain')
        .send('{"label":"k"}')
        .expect(415);
      expect(text.body.error.message).to.equal('content type text/plain is not accepted, send application/json');
      // nothing was sent: the route's validation answers, as for an empty JSON body
      for (const type of ['application/x-www-form-urlencoded', 'text/plain', 'application/json']) {
        const empty = await request(svc.url).post('/api/me/api-keys').set('Authorization', adminAuth()).set('Content-Type', type).send('').expect(400);
        expect(empty.body.error.code, type).to.equal('validation_failed');
        expect(empty.body.error.details.map((d: any) => d.field)).to.include('label');
      }
    });

    it('a scalar JSON body reaches the route validation: 400 naming the field', async () => {
      for (const scalar of ['42', '"a string"', 'true', '[1,2]']) {
        const res = await request(svc.url)
          .post('/api/me/api-keys')
          .set('Authorization', adminAuth())
          .set('Content-Type', 'application/json')
          .send(scalar)
          .expect(400);
        expect(res.body.error.code).to.equal('validation_failed');
        expect(res.body.error.details, scalar).to.deep.equal([{ field: 'body', message: 'must be of type object' }]);
      }
      // a route that validates the body itself (bodyMode manual)
      const manual = await request(svc.url)
        .post('/api/notifications/batch')
        .set('Authorization', adminAuth())
        .set('Content-Type', 'application/json')
        .send('7')
        .expect(400);
      expect(manual.body.error.details[0].field).to.equal('body');
    });

    it('malformed JSON is 400 naming body, on a route validating its body and on one reading it itself', async () => {
      for (const path of ['/api/me/api-keys', '/api/notifications/batch']) {
        const res = await request(svc.url).post(path).set('Authorization', adminAuth()).set('Content-Type', 'application/json').send('{"label": ').expect(400);
        expect(res.body.error).to.deep.equal({
          code: 'validation_failed',
          message: 'body: is not valid JSON',
          details: [{ field: 'body', message: 'is not valid JSON' }],
        });
      }
    });
    it('text that would not be stored as sent is 400: bytes that are not UTF-8, half a surrogate pair; whole pairs and a U+FFFD sent as such are taken', async () => {
      const post = (bytes: Buffer, path = '/api/notifications') =>
        send(svc.url, 'POST', path, { 'content-type': 'application/json', 'content-length': String(bytes.length), authorization: adminAuth() }, [bytes]);
      const notUtf8 = await post(Buffer.concat([Buffer.from('{"title":"caf'), Buffer.from([0xc3, 0x28]), Buffer.from('","message":"m","user":"admin"}')]));
      expect(notUtf8.status).to.equal(400);
      expect(notUtf8.body.error.details).to.deep.equal([{ field: 'body', message: 'is not valid UTF-8' }]);
      const lone = await post(Buffer.from('{"title":"t","message":"half \\ud800 of a pair","user":"admin"}'));
      expect(lone.status).to.equal(400);
      expect(lone.body.error.details).to.deep.equal([{ field: 'message', message: 'is not well-formed Unicode (half of a surrogate pair)' }]);
      const nested = await post(
        Buffer.from('{"notifications":[{"title":"ok","message":"m","user":"admin"},{"title":"\\udc00","message":"m","user":"admin"}]}'),
        '/api/notifications/batch',
      );
      expect(nested.status).to.equal(400);
      expect(nested.body.error.details[0].field).to.equal('notifications[1].title');
      // an escaped pair (an emoji as Python's json writes it) and a replacement character sent as one are text like any
      const pair = await post(Buffer.from('{"title":"\\ud83d\\ude00 and \ufffd","message":"m","user":"admin"}'));
      expect(pair.status, JSON.stringify(pair.body)).to.equal(202);
      const stored = await svc.service.db('notifications').where({ id: pair.body.id }).first();
      expect(stored.title).to.equal('\u{1F600} and \ufffd');
    });
  });

  describe('jsonBody, formBody and readOwnBytes in an app of their own', () => {
    let server: http.Server;
    let url: string;
    const OWN = `/own-bytes-${randomUUID()}`;
    before(async () => {
      const log = createLogger('silent');
      const app = createHttpApp({ log, state: { iamReady: true, bootComplete: true, bootError: null, stopping: false }, keys: ['k'] });
      const r = new Router();
      for (const m of ['get', 'post', 'put', 'patch', 'delete'] as const) r[m]('/json', (ctx) => void (ctx.body = { body: jsonBody(ctx) }));
      r.post('/form', (ctx) => void (ctx.body = { form: formBody(ctx) }));
      r.post('/ignores', (ctx) => void (ctx.body = { ok: true }));
      r.post(OWN, async (ctx) => {
        const bytes = await readOwnBytes(ctx);
        ctx.body = { hex: bytes.toString('hex'), same: ctx.request.rawBody === bytes, parsed: ctx.request.body === undefined ? null : ctx.request.body };
      });
      readsOwnBody('POST', OWN);
      mountRouters(app, [r]);
      server = http.createServer(app.callback());
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    after(() => new Promise<void>((resolve) => server.close(() => resolve())));

    it('reads bodies for POST, PUT, PATCH and DELETE only', async () => {
      expect([...BODY_METHODS]).to.have.members(['POST', 'PUT', 'PATCH', 'DELETE']);
      const body = Buffer.from('{"a":[1,{"b":null}]}');
      // with its length: Node's client sends no chunked DELETE or GET
      const headers = { 'Content-Type': 'application/json', 'Content-Length': String(body.length) };
      for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
        const res = await send(url, method, '/json', headers, [body]);
        expect(res.body, `${method} ${res.status}`).to.deep.equal({ body: { a: [1, { b: null }] } });
      }
      // a GET body is not read (the hot path does not pass the parser)
      const get = await send(url, 'GET', '/json', headers, [body]);
      expect(get.body).to.deep.equal({ body: {} });
    });

    it('takes any +json type and a body without a type as JSON; drops a leading byte-order mark; inflates a gzip body', async () => {
      const vendor = await send(url, 'POST', '/json', { 'Content-Type': 'application/vnd.example.v1+json; charset=utf-8' }, [Buffer.from('{"v":1}')]);
      expect(vendor.body).to.deep.equal({ body: { v: 1 } });
      const untyped = await send(url, 'POST', '/json', {}, [Buffer.from('{"u":"\u00e9"}')]);
      expect(untyped.body).to.deep.equal({ body: { u: '\u00e9' } });
      const bom = await send(url, 'POST', '/json', { 'Content-Type': 'application/json' }, [Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"b":2}')]);
      expect(bom.body).to.deep.equal({ body: { b: 2 } });
      const gzipped = await send(url, 'POST', '/json', { 'Content-Type': 'application/json', 'Content-Encoding': 'gzip' }, [gzipSync('{"z":[1,2]}')]);
      expect(gzipped.body).to.deep.equal({ body: { z: [1, 2] } });
      const scalar = await send(url, 'POST', '/json', { 'Content-Type': 'application/json' }, [Buffer.from('null')]);
      expect(scalar.body).to.deep.equal({ body: null });
    });

    it('malformed JSON fails only a route that reads the body; a type the parser does not read is 415 there', async () => {
      const bad = await send(url, 'POST', '/json', { 'Content-Type': 'application/json' }, [Buffer.from('{"a":')]);
      expect(bad.status).to.equal(400);
      expect(bad.body.error.details).to.deep.equal([{ field: 'body', message: 'is not valid JSON' }]);
      // V8 quotes the text in its message: a word in it changes nothing
      const quoted = await send(url, 'POST', '/json', { 'Content-Type': 'application/json' }, [Buffer.from('{"prototype": nope}')]);
      expect(quoted.body.error.details).to.deep.equal([{ field: 'body', message: 'is not valid JSON' }]);
      const proto = await send(url, 'POST', '/json', { 'Content-Type': 'application/json' }, [Buffer.from('{"a":{"__proto__":{"admin":true}}}')]);
      expect(proto.status).to.equal(400);
      expect(proto.body.error.details).to.deep.equal([{ field: 'body', message: 'must not hold a "__proto__" key' }]);
      const ignored = await send(url, 'POST', '/ignores', { 'Content-Type': 'application/json' }, [Buffer.from('{"a":')]);
      expect(ignored.status).to.equal(200);
      const xml = await send(url, 'POST', '/json', { 'Content-Type': 'application/xml' }, [Buffer.from('<a/>')]);
      expect(xml.status).to.equal(415);
      expect(xml.body.error.code).to.equal('unsupported_media_type');
      const unknownEncoding = await send(url, 'POST', '/json', { 'Content-Type': 'application/json', 'Content-Encoding': 'compress' }, [Buffer.from('{}')]);
      expect(unknownEncoding.status).to.equal(415);
      expect(unknownEncoding.body.error.code).to.equal('unsupported_media_type');
    });

    it('formBody: flat text fields, "+" as a space, a repeated field its last value; nothing from a body of another type', async () => {
      const form = await send(url, 'POST', '/form', { 'Content-Type': 'application/x-www-form-urlencoded' }, [
        Buffer.from('username=ann+lee&password=p%26ss%3D1&next=%2Fhome&a=1&a=2&empty='),
      ]);
      expect(form.body).to.deep.equal({ form: { username: 'ann lee', password: 'p&ss=1', next: '/home', a: '2', empty: '' } });
      const asJson = await send(url, 'POST', '/form', { 'Content-Type': 'application/json' }, [Buffer.from('{"username":"ann"}')]);
      expect(asJson.body).to.deep.equal({ form: {} });
      const plain = await send(url, 'POST', '/form', { 'Content-Type': 'text/plain' }, [Buffer.from('username=ann')]);
      expect(plain.body).to.deep.equal({ form: {} });
    });

    it('readOwnBytes: the exact bytes as a Buffer (ctx.request.rawBody), unparsed, at any spelling of the path', async () => {
      const bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"s":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]);
      for (const path of [OWN, `${OWN.toUpperCase()}/`]) {
        const res = await send(url, 'POST', path, { 'Content-Type': 'application/json' }, [bytes]);
        expect(res.body, path).to.deep.equal({ hex: bytes.toString('hex'), same: true, parsed: null });
      }
      const form = Buffer.from('a=1&b=%ff');
      const res = await send(url, 'POST', OWN, { 'Content-Type': 'application/x-www-form-urlencoded', 'Content-Length': String(form.length) }, [form]);
      expect(res.body.hex).to.equal(form.toString('hex'));
      const big = await send(url, 'POST', OWN, { 'Content-Type': 'application/octet-stream' }, [Buffer.alloc(DEFAULT_BODY_LIMIT + 1)]);
      expect(big.status).to.equal(413);
      expect(big.body.error.details).to.deep.equal({ limit: DEFAULT_BODY_LIMIT });
    });
  });
});
