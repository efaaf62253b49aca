import { expect } from 'chai';
import Joi from 'joi';
import request from 'supertest';
import { startService, type TestService } from '../support/service.js';
import { joiToJsonSchema } from '../../src/http/joi-schema.js';

/** GET /openapi.json: generated from the route definitions and their joi schemas. */
describe('OpenAPI document', function () {
  let svc: TestService;
  let doc: any;

  before(async function () {
    svc = await startService();
    const res = await request(svc.url).get('/openapi.json').expect(200);
    expect(res.headers['content-type']).to.match(/^application\/json/);
    doc = res.body;
  });
  after(async function () {
    await svc?.destroy();
  });

  const op = (method: string, path: string) => {
    const o = doc.paths[path]?.[method];
    if (!o) throw new Error(`${method.toUpperCase()} ${path} is not in the document`);
    return o;
  };

  it('is OpenAPI 3.1 with the four security schemes', function () {
    expect(doc.openapi).to.equal('3.1.0');
    expect(doc.info.title).to.equal('service-core');
    expect(doc.components.securitySchemes).to.deep.include({
      ApiKeyAuth: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: doc.components.securitySchemes.ApiKeyAuth.description },
    });
    expect(doc.components.securitySchemes.bearerAuth).to.include({ type: 'http', scheme: 'bearer' });
    expect(doc.components.securitySchemes.basicAuth).to.include({ type: 'http', scheme: 'basic' });
    expect(doc.components.securitySchemes.cookieAuth).to.include({ type: 'apiKey', in: 'cookie', name: 'svc.sid' });
  });

  it('covers the endpoints of every area', function () {
    for (const [method, path] of [
      ['post', '/api/auth/login'],
      ['get', '/api/auth/providers'],
      ['get', '/api/me'],
      ['get', '/api/me/access'],
      ['post', '/api/me/api-keys'],
      ['delete', '/api/me/api-keys/{id}'],
      ['get', '/api/users'],
      ['patch', '/api/users/{id}'],
      ['get', '/api/groups/{name}'],
      ['get', '/api/permissions'],
      ['put', '/api/settings/system-api-key'],
      ['patch', '/api/settings/auth'],
      ['put', '/api/settings/webhook-secret'],
      ['get', '/api/notifications'],
      ['post', '/api/notifications'],
      ['post', '/api/notifications/{id}/read'],
      ['post', '/api/notifications/webhook/scm'],
      ['post', '/api/ws/ticket'],
      ['get', '/api/plugins'],
      ['post', '/api/plugins/{id}/enable'],
      ['get', '/api/socket/health'],
      ['post', '/api/socket/repair'],
    ]) {
      expect(op(method, path).summary, `${method} ${path}`).to.be.a('string').and.not.equal('');
    }
  });

  it('puts the socket endpoints under tag socket-management, with optional auth on reads', function () {
    const socketPaths = Object.keys(doc.paths).filter((p) => p.startsWith('/api/socket/'));
    expect(socketPaths).to.have.length(7);
    for (const p of socketPaths) for (const o of Object.values<any>(doc.paths[p])) expect(o.tags).to.deep.equal(['socket-management']);
    // optional: anonymous ({}) or any credential
    expect(op('get', '/api/socket/providers').security[0]).to.deep.equal({});
    const cleanup = op('post', '/api/socket/container/cleanup');
    expect(cleanup['x-permission']).to.equal('socket:container:cleanup');
    expect(cleanup.security).to.deep.equal([{ ApiKeyAuth: [] }, { bearerAuth: [] }, { basicAuth: [] }, { cookieAuth: [] }]);
    // derived from the container provider's declaration: its rule is the body, 502 when the daemon fails the operation, 503 when it is down
    expect(cleanup.responses).to.have.keys('200', '401', '403', '400', '502', '503');
    expect(Object.keys(cleanup.requestBody.content['application/json'].schema.properties)).to.deep.equal(['prefix', 'max_age_minutes', 'dry_run']);
    expect(op('get', '/api/socket/container/storage-root').security[0]).to.deep.equal({});
    // operations that declare no HTTP route have none
    expect(socketPaths).not.to.include('/api/socket/container/spawn');
    expect(doc.tags.map((t: any) => t.name)).to.include('socket-management');
  });

  it('states the security of each kind of route', function () {
    expect(op('post', '/api/auth/login').security).to.deep.equal([]);
    expect(op('get', '/api/notifications/webhook/scm/health').security).to.deep.equal([]);
    const me = op('get', '/api/me');
    expect(me.security).to.have.length(4);
    expect(me.responses['401'].content['application/json'].schema).to.deep.equal({ $ref: '#/components/schemas/Error' });
    const users = op('get', '/api/users');
    expect(users['x-permission']).to.equal('feature:admin.users');
    expect(users.description).to.include('feature:admin.users');
    expect(users.responses).to.have.property('403');
  });

  it('describes requests with the joi schemas that validate them', async function () {
    const create = op('post', '/api/me/api-keys').requestBody.content['application/json'].schema;
    expect(create.required).to.deep.equal(['label']);
    expect(create.properties.label).to.deep.equal({ type: 'string', minLength: 1, maxLength: 128 });
    expect(create.properties.scopes).to.include({ type: 'array', maxItems: 100, uniqueItems: true });
    expect(create.properties.expires_at).to.include({ type: 'string', format: 'date-time' });
    expect(create.additionalProperties).to.equal(false);
    // what the document says is what validation enforces
    const res = await request(svc.url).post('/api/me/api-keys').set('Authorization', `Basic ${Buffer.from('admin:admin-test-password').toString('base64')}`).send({ label: 'x'.repeat(129) }).expect(400);
    expect(res.body.error.details[0].field).to.equal('label');

    const history = op('get', '/api/notifications').parameters;
    expect(history.find((p: any) => p.name === 'limit')).to.deep.include({ in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 200, default: 50 } });
    const user = op('get', '/api/users/{id}').parameters[0];
    expect(user).to.deep.include({ name: 'id', in: 'path', required: true });
    expect(user.schema).to.include({ type: 'string', format: 'uuid' });
    const repair = op('post', '/api/socket/repair').requestBody.content['application/json'].schema;
    expect(repair.required).to.deep.equal(['target_dir']);
    expect(repair.properties.mode).to.include({ type: 'string', pattern: '^[0-7]{3,4}$', default: '0755' });
    const webhook = op('post', '/api/notifications/webhook/scm');
    expect(webhook.requestBody.required).to.equal(true);
    expect(webhook.responses).to.have.property('202');
  });

  it('documents responses with their schemas', function () {
    const me = op('get', '/api/me').responses['200'].content['application/json'].schema;
    expect(me.properties).to.have.keys('id', 'username', 'display_name', 'email', 'groups', 'roles', 'method', 'is_system');
    expect(me.properties.display_name.type).to.deep.equal(['string', 'null']);
    expect(op('post', '/api/me/api-keys').responses).to.have.property('201');
  });

  it('has unique operation ids and only refs that resolve', function () {
    const ids = Object.values<any>(doc.paths).flatMap((p) => Object.values<any>(p).map((o) => o.operationId));
    expect(new Set(ids).size).to.equal(ids.length);
    const refs = JSON.stringify(doc).match(/"\$ref":"([^"]+)"/g) ?? [];
    for (const r of refs) expect(r).to.equal('"$ref":"#/components/schemas/Error"');
  });

  describe('joi -> JSON Schema (joi-to-json with our corrections)', function () {
    it('converts the shapes our schemas use', function () {
      const schema = Joi.object({
        name: Joi.string().trim().min(1).max(64).pattern(/^[a-z]+$/).required().description('a name'),
        email: Joi.string().email().allow(null),
        level: Joi.string().valid('info', 'error').default('info'),
        kind: Joi.valid('session'),
        count: Joi.number().integer().min(0),
        ratio: Joi.number().greater(0).less(1),
        on: Joi.boolean(),
        at: Joi.date().iso(),
        tags: Joi.array().items(Joi.string()).min(1).unique(),
        either: Joi.alternatives(Joi.string(), Joi.number()),
        gone: Joi.any().forbidden(),
      });
      expect(joiToJsonSchema(schema)).to.deep.equal({
        type: 'object',
        properties: {
          name: { type: 'string', minLength: 1, maxLength: 64, pattern: '^[a-z]+$', description: 'a name' },
          email: { type: ['string', 'null'], format: 'email' },
          level: { type: 'string', enum: ['info', 'error'], default: 'info' },
          kind: { const: 'session' },
          count: { type: 'integer', minimum: 0 },
          ratio: { type: 'number', minimum: 0, exclusiveMinimum: 0, maximum: 1, exclusiveMaximum: 1 }, // the library states both; the exclusive bound decides
          on: { type: 'boolean' },
          at: { type: 'string', format: 'date-time' },
          tags: { type: 'array', items: { type: 'string' }, minItems: 1, uniqueItems: true },
          either: { anyOf: [{ type: 'string' }, { type: 'number' }] },
          gone: { not: {} },
        },
        required: ['name'],
        additionalProperties: false,
      });
    });

    // each case is one place where joi-to-json 5.0.5 alone documents something the validator does not do
    const corrections: [string, Joi.Schema, object][] = [
      ['a map keyed by a schema', Joi.object().pattern(Joi.string().max(8), Joi.array().items(Joi.string())), { type: 'object', properties: {}, additionalProperties: { type: 'array', items: { type: 'string' } }, propertyNames: { type: 'string', maxLength: 8 } }],
      ['a map keyed by a regex', Joi.object().pattern(/^x-/, Joi.string()), { type: 'object', properties: {}, additionalProperties: false, patternProperties: { '^x-': { type: 'string' } } }],
      ['a map keyed by a regex with a flag', Joi.object().pattern(/^x-/i, Joi.string()), { type: 'object', properties: {}, additionalProperties: { type: 'string' } }],
      ['a bare object', Joi.object(), { type: 'object' }],
      ['an object without keys', Joi.object({}), { type: 'object', properties: {}, additionalProperties: false }],
      ['object sizes', Joi.object({ a: Joi.string() }).min(1).max(3), { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: false, minProperties: 1, maxProperties: 3 }],
      ['integer() after other rules', Joi.number().min(1).integer(), { type: 'integer', minimum: 1 }],
      ['length()', Joi.string().length(4), { type: 'string', minLength: 4, maxLength: 4 }],
      ['a regex with the s flag', Joi.string().pattern(/^\(.*[.]\.\)$/s), { type: 'string', pattern: '^\\([\\s\\S]*[.]\\.\\)$' }],
      ['a case-insensitive regex', Joi.string().pattern(/^ab$/i), { type: 'string' }],
      ['an inverted and a second pattern', Joi.string().pattern(/^admin$/, { invert: true }).pattern(/^[a-z]+$/), { type: 'string', allOf: [{ not: { pattern: '^admin$' } }, { pattern: '^[a-z]+$' }] }],
      ['a date without iso()', Joi.date(), { anyOf: [{ type: 'string', format: 'date-time' }, { type: 'number' }] }],
      ['a date with a description', Joi.date().iso().description('when'), { type: 'string', format: 'date-time', description: 'when' }],
      ['a timestamp', Joi.date().timestamp('unix'), { type: 'number' }],
      ['single()', Joi.array().items(Joi.string()).single().description('one or more'), { anyOf: [{ type: 'array', items: { type: 'string' } }, { type: 'string' }], description: 'one or more' }],
      ['a schema id', Joi.object({ a: Joi.string().id('A') }), { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: false }],
      ["allow('') beside min()", Joi.string().min(1).allow(''), { type: 'string' }],
      ["allow('') beside a pattern", Joi.string().pattern(/^a+$/).allow(''), { type: 'string', pattern: '^$|(?:^a+$)' }],
      ['null among alternatives', Joi.alternatives(Joi.array().items(Joi.string()), Joi.string()).allow(null), { anyOf: [{ type: 'array', items: { type: 'string' } }, { type: 'string' }, { type: 'null' }] }],
    ];
    for (const [name, schema, expected] of corrections) {
      it(`corrects ${name}`, function () {
        expect(joiToJsonSchema(schema)).to.deep.equal(expected);
      });
    }

    it('keeps the type of a field whose presence depends on another field', function () {
      const schema = Joi.object({
        action: Joi.valid('clear'),
        title: Joi.string().max(10).when('action', { is: 'clear', then: Joi.optional(), otherwise: Joi.required() }),
        id: Joi.string().when('action', { is: 'clear', then: Joi.required() }),
        body: Joi.any().when('action', { is: 'clear', then: Joi.string(), otherwise: Joi.number() }),
      });
      const props = (joiToJsonSchema(schema) as any).properties;
      expect(props.title).to.deep.equal({ type: 'string', maxLength: 10 });
      expect(props.id).to.deep.equal({ type: 'string' });
      // a condition that changes the value's type is still the library's: one of the branches
      expect(props.body.oneOf).to.deep.equal([{ type: 'string' }, { type: 'number' }]);
    });
  });
});
