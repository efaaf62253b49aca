import fs from 'node:fs';
import { expect } from 'chai';
import { Validator } from '@seriousme/openapi-schema-validator';
import { DOCUMENT_FILE, documentedSetup } from '../../scripts/api-types.js';
import Joi from 'joi';
import request from 'supertest';
import { startService, type TestService } from '../support/service.js';
import { joiToJsonSchema } from '../../src/http/joi-schema.js';
import { collectEndpoints } from '../../src/http/api.js';

/** GET /openapi.json: generated from the route definitions and their joi schemas. */
describe('OpenAPI document', function () {
  let svc: TestService;
  let doc: any;

  before(async function () {
    // as docs/openapi.json is made: every host service (on sockets nobody listens on) and the repository's plugins
    svc = await startService({ env: documentedSetup('/nonexistent/svc-openapi') });
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

  it("is valid OpenAPI 3.1 to a validator of its own (the specification's schemas)", async function () {
    const validator = new Validator();
    const result = await validator.validate(doc);
    expect(validator.version).to.equal('3.1');
    expect(result.valid, JSON.stringify(result.errors)).to.equal(true);
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
    // every operation of every provider: the registry's own three, and each provider's (the four required ones included)
    for (const provider of ['container', 'dns', 'dhcp', 'init', 'containerd', 'pgsql']) {
      for (const required of ['health', 'cleanup', 'mounts', 'storage-root']) expect(socketPaths).to.include(`/api/socket/${provider}/${required}`);
    }
    for (const p of socketPaths) for (const o of Object.values<any>(doc.paths[p])) expect(o.tags).to.deep.equal(['socket-management']);
    // optional: anonymous ({}) or any credential
    expect(op('get', '/api/socket/providers').security[0]).to.deep.equal({});
    const cleanup = op('post', '/api/socket/container/cleanup');
    expect(cleanup['x-permission']).to.equal('socket:container:cleanup');
    expect(cleanup.security).to.deep.equal([{ ApiKeyAuth: [] }, { bearerAuth: [] }, { basicAuth: [] }, { cookieAuth: [] }]);
    // derived from the container provider's declaration: its rule is the body, 502 when the daemon fails the operation, 503 when it is down
    expect(cleanup.responses).to.have.keys('200', '401', '403', '400', '502', '503', '413', '415', '429', '500');
    expect(Object.keys(cleanup.requestBody.content['application/json'].schema.properties)).to.deep.equal(['prefix', 'max_age_minutes', 'dry_run']);
    expect(op('get', '/api/socket/container/storage-root').security[0]).to.deep.equal({});
    // every operation has its route, spawn included
    expect(socketPaths).to.include.members(['/api/socket/container/spawn', '/api/socket/dns/record-add', '/api/socket/containerd/call']);
    expect(doc.tags.map((t: any) => t.name)).to.include('socket-management');
  });

  it('states the security of each kind of route', function () {
    expect(op('post', '/api/auth/login').security).to.deep.equal([]);
    // open to anyone, a credential read when presented (the settings' administrators read more)
    expect(op('get', '/api/notifications/webhook/scm/health').security).to.deep.equal([
      {},
      { ApiKeyAuth: [] },
      { bearerAuth: [] },
      { basicAuth: [] },
      { cookieAuth: [] },
    ]);
    const me = op('get', '/api/me');
    expect(me.security).to.have.length(4);
    expect(me.responses['401']).to.deep.equal({ $ref: '#/components/responses/Unauthorized' });
    expect(doc.components.responses.Unauthorized.content['application/json'].schema).to.deep.equal({ $ref: '#/components/schemas/Error' });
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
    const res = await request(svc.url)
      .post('/api/me/api-keys')
      .set('Authorization', `Basic ${Buffer.from('admin:admin-test-password').toString('base64')}`)
      .send({ label: 'x'.repeat(129) })
      .expect(400);
    expect(res.body.error.details[0].field).to.equal('label');

    const history = op('get', '/api/notifications').parameters;
    expect(history.find((p: any) => p.name === 'limit')).to.deep.include({
      in: 'query',
      required: false,
      // a default is said in words: generators read `default` as a field always there
      schema: { type: 'integer', minimum: 1, maximum: 200, description: 'default: 50' },
    });
    const user = op('get', '/api/users/{id}').parameters[0];
    expect(user).to.deep.include({ name: 'id', in: 'path', required: true });
    expect(user.schema).to.include({ type: 'string', format: 'uuid' });
    const repair = op('post', '/api/socket/repair').requestBody.content['application/json'].schema;
    expect(repair.required).to.deep.equal(['target_dir']);
    expect(repair.properties.mode).to.include({ type: 'string', pattern: '^[0-7]{3,4}$', description: 'default: "0755"' });
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
    const refs = new Set((JSON.stringify(doc).match(/"\$ref":"([^"]+)"/g) ?? []).map((r) => r.slice(8, -1)));
    for (const r of refs) {
      const [, kind, name] = /^#\/components\/(schemas|responses)\/([A-Za-z0-9]+)$/.exec(r) ?? [];
      expect(doc.components[kind!]?.[name!], r).to.be.an('object');
    }
    // every component is used
    for (const name of Object.keys(doc.components.schemas)) expect(refs, name).to.include(`#/components/schemas/${name}`);
  });

  it('says xor and a forbidden key in shapes generators understand: a oneOf of the required keys, and not-required', function () {
    const stepUp = doc.paths['/api/auth/step-up'].post.requestBody.content['application/json'].schema;
    expect(stepUp.oneOf).to.deep.equal([{ required: ['code'] }, { required: ['webauthn'] }]);
    expect(stepUp).not.to.have.any.keys('if', 'then', 'else');
    const send = doc.components.schemas.NotificationSend.anyOf[1];
    expect(send.not).to.deep.equal({ required: ['action'] });
    expect(send.properties).not.to.have.property('action');
    expect(JSON.stringify(doc)).not.to.include('"then":false');
  });

  it('describes every tag its operations use, and says its license', function () {
    const described = new Set(doc.tags.map((t: { name: string; description: string }) => t.description && t.name));
    for (const item of Object.values<any>(doc.paths))
      for (const o of Object.values<any>(item)) for (const tag of o.tags ?? []) expect(described, tag).to.include(tag);
    expect(doc.info.license).to.deep.equal({ name: 'MIT', identifier: 'MIT' });
  });

  it('declares what logout and the ws upgrade need: a credential, and the ticket parameter of the upgrade', function () {
    expect(doc.paths['/api/auth/logout'].post.security).to.not.deep.equal([]);
    const ws = doc.paths['/ws'].get;
    expect(ws.security).to.not.deep.equal([]);
    expect(ws.parameters.map((p: { name: string; in: string }) => `${p.in}:${p.name}`)).to.include('query:ticket');
  });

  it('documents the answers every route may give once, and refers to them from each operation they apply to', function () {
    // the HTTP server's own 431 (no body, before routing) is in the description, not on each operation
    expect(doc.info.description).to.match(/431/);
    for (const item of Object.values<any>(doc.paths)) for (const o of Object.values<any>(item)) expect(o.responses).not.to.have.property('431');
    expect(doc.components.responses).to.have.keys(
      'BadRequest',
      'Unauthorized',
      'Forbidden',
      'PayloadTooLarge',
      'UnsupportedMediaType',
      'TooManyRequests',
      'InternalError',
      'Unavailable',
    );
    for (const [path, item] of Object.entries<any>(doc.paths)) {
      for (const [method, o] of Object.entries<any>(item)) {
        const at = `${method} ${path}`;
        // any request: its headers, a locked Basic user, a fault, the database away or the boot gate
        // (a route may say more of one of them in its own words, with the same error body)
        for (const [status, name] of [
          ['429', 'TooManyRequests'],
          ['500', 'InternalError'],
          ['503', 'Unavailable'],
        ]) {
          const r = o.responses[status];
          if (r?.$ref) expect(r.$ref, at).to.equal(`#/components/responses/${name}`);
          else expect(r?.content?.['application/json']?.schema, `${at} ${status}`).to.deep.equal({ $ref: '#/components/schemas/Error' });
        }
        // a body over the limit is refused before routing: on every operation, whether it reads a body or not
        expect(o.responses, at).to.include.keys('413');
        // (415 where the service parses the body as JSON; a raw body such as the webhook's is the route's own)
        if (o.parameters?.length || o.requestBody) expect(o.responses, at).to.include.keys('400');
        if (o.security.length && !o.security.some((s: object) => Object.keys(s).length === 0)) expect(o.responses, at).to.include.keys('401');
        if (o['x-permission']) expect(o.responses, at).to.include.keys('403');
      }
    }
    expect(doc.components.schemas.Error.properties.error.properties.code.enum).to.include.members(['upgrade_required', 'step_up_required', 'booting']);
  });

  it('names every shape it uses more than once as a component, and lists the fields an answer always has as required', function () {
    // an object shape written out twice (not a $ref) in answers would be two generated types
    const seen = new Map<string, string>();
    const walk = (node: unknown, at: string) => {
      if (!node || typeof node !== 'object') return;
      const o = node as Record<string, unknown>;
      if (o.type === 'object' && o.properties && Object.keys(o.properties).length >= 3) {
        const key = JSON.stringify(o);
        expect(seen.get(key), `the same shape at ${at} and ${seen.get(key)}`).to.equal(undefined);
        seen.set(key, at);
      }
      for (const [k, v] of Object.entries(o)) walk(v, `${at}/${k}`);
    };
    for (const [path, item] of Object.entries<any>(doc.paths))
      for (const [method, o] of Object.entries<any>(item))
        for (const [status, r] of Object.entries<any>(o.responses)) walk(r.content, `${method} ${path} ${status}`);
    for (const [name, schema] of Object.entries<any>(doc.components.schemas)) walk(schema, name);
    // every JSON answer says its shape
    for (const [path, item] of Object.entries<any>(doc.paths)) {
      for (const [method, o] of Object.entries<any>(item)) {
        for (const [status, r] of Object.entries<any>(o.responses)) {
          const json = r.content?.['application/json'];
          if (json) expect(json.schema, `${method} ${path} ${status}`).to.be.an('object').that.is.not.empty;
        }
      }
    }
    const me = op('get', '/api/me').responses['200'].content['application/json'].schema;
    expect(me.required).to.include.members(['id', 'username', 'display_name', 'groups', 'roles', 'method', 'is_system']);
  });

  it('is the document in docs/openapi.json (every host service and the plugins under plugins/)', async function () {
    const served = JSON.stringify(doc, null, 2) + '\n';
    expect(fs.readFileSync(DOCUMENT_FILE, 'utf8') === served, 'docs/openapi.json is not the served document: run npm run api:types').to.equal(true);
  });

  it('is made from the same schema objects in every service (each converted once per process, not at every start)', async function () {
    const other = await startService({ env: documentedSetup('/nonexistent/svc-openapi') });
    try {
      const schemasOf = (service: TestService) => {
        const found = new Map<string, unknown>();
        // the service's own routes and the socket providers' operations
        for (const e of [...collectEndpoints(service.service.app).endpoints, ...service.service.sockets.documentedRoutes().endpoints]) {
          for (const slot of ['params', 'query', 'headers', 'body'] as const) if (e[slot]) found.set(`${e.method} ${e.fullPath} ${slot}`, e[slot]);
          for (const [status, answer] of Object.entries(e.responses ?? {}))
            if (typeof answer === 'object' && answer.schema) found.set(`${e.method} ${e.fullPath} ${status}`, answer.schema);
        }
        return found;
      };
      // the core's own routes and providers; a plugin's (loaded anew by each service) and a gRPC
      // daemon's (its args are made from its configuration, once per provider) are theirs
      const perConfiguration = (where: string) => /^\S+ \/api\/(plugins\/|socket\/(containerd|pgsql)\/)/.test(where);
      const mine = new Map([...schemasOf(svc)].filter(([where]) => !perConfiguration(where)));
      const theirs = schemasOf(other);
      expect(mine.size).to.be.greaterThan(60);
      expect(
        [...mine].filter(([where, schema]) => theirs.get(where) !== schema).map(([where]) => where),
        'schemas made anew for each service (make them module constants)',
      ).to.deep.equal([]);
    } finally {
      await other.destroy();
    }
  });

  describe('joi -> JSON Schema (joi-to-json with our corrections)', function () {
    it('converts the shapes our schemas use', function () {
      const schema = Joi.object({
        name: Joi.string()
          .trim()
          .min(1)
          .max(64)
          .pattern(/^[a-z]+$/)
          .required()
          .description('a name'),
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
          level: { type: 'string', enum: ['info', 'error'], description: 'default: "info"' },
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
      [
        'a map keyed by a schema',
        Joi.object().pattern(Joi.string().max(8), Joi.array().items(Joi.string())),
        { type: 'object', properties: {}, additionalProperties: { type: 'array', items: { type: 'string' } }, propertyNames: { type: 'string', maxLength: 8 } },
      ],
      [
        'a map keyed by a regex',
        Joi.object().pattern(/^x-/, Joi.string()),
        { type: 'object', properties: {}, additionalProperties: false, patternProperties: { '^x-': { type: 'string' } } },
      ],
      [
        'a map keyed by a regex with a flag',
        Joi.object().pattern(/^x-/i, Joi.string()),
        { type: 'object', properties: {}, additionalProperties: { type: 'string' } },
      ],
      ['a bare object (any keys: said so, or generators type it as holding nothing)', Joi.object(), { type: 'object', additionalProperties: true }],
      ['an object without keys', Joi.object({}), { type: 'object', properties: {}, additionalProperties: false }],
      [
        'object sizes',
        Joi.object({ a: Joi.string() }).min(1).max(3),
        { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: false, minProperties: 1, maxProperties: 3 },
      ],
      ['integer() after other rules', Joi.number().min(1).integer(), { type: 'integer', minimum: 1 }],
      ['length()', Joi.string().length(4), { type: 'string', minLength: 4, maxLength: 4 }],
      ['a regex with the s flag', Joi.string().pattern(/^\(.*[.]\.\)$/s), { type: 'string', pattern: '^\\([\\s\\S]*[.]\\.\\)$' }],
      ['a case-insensitive regex', Joi.string().pattern(/^ab$/i), { type: 'string' }],
      [
        'an inverted and a second pattern',
        Joi.string()
          .pattern(/^admin$/, { invert: true })
          .pattern(/^[a-z]+$/),
        { type: 'string', allOf: [{ not: { pattern: '^admin$' } }, { pattern: '^[a-z]+$' }] },
      ],
      ['a date without iso()', Joi.date(), { anyOf: [{ type: 'string', format: 'date-time' }, { type: 'number' }] }],
      ['a date with a description', Joi.date().iso().description('when'), { type: 'string', format: 'date-time', description: 'when' }],
      ['a timestamp', Joi.date().timestamp('unix'), { type: 'number' }],
      [
        'single()',
        Joi.array().items(Joi.string()).single().description('one or more'),
        { anyOf: [{ type: 'array', items: { type: 'string' } }, { type: 'string' }], description: 'one or more' },
      ],
      [
        'a schema id (inline without a document)',
        Joi.object({ a: Joi.string().id('A') }),
        { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: false },
      ],
      ["allow('') beside min()", Joi.string().min(1).allow(''), { type: 'string' }],
      ["allow('') beside a pattern", Joi.string().pattern(/^a+$/).allow(''), { type: 'string', pattern: '^$|(?:^a+$)' }],
      [
        'null among alternatives',
        Joi.alternatives(Joi.array().items(Joi.string()), Joi.string()).allow(null),
        { anyOf: [{ type: 'array', items: { type: 'string' } }, { type: 'string' }, { type: 'null' }] },
      ],
    ];
    for (const [name, schema, expected] of corrections) {
      it(`corrects ${name}`, function () {
        expect(joiToJsonSchema(schema)).to.deep.equal(expected);
      });
    }

    it('names a shape with an id as a component; a nullable use is the $ref or null; two shapes with one name throw', function () {
      const item = Joi.object({ id: Joi.string(), note: Joi.string().optional() }).id('Item');
      const components: Record<string, Record<string, unknown>> = {};
      const answer = joiToJsonSchema(Joi.object({ first: item, all: Joi.array().items(item) }), { components, presence: 'required' });
      expect(answer).to.deep.equal({
        type: 'object',
        properties: { first: { $ref: '#/components/schemas/Item' }, all: { type: 'array', items: { $ref: '#/components/schemas/Item' } } },
        required: ['first', 'all'],
        additionalProperties: false,
      });
      // (joi itself refuses two schemas with one id in one object: a nullable use stands in another)
      const maybe = joiToJsonSchema(Joi.object({ maybe: item.allow(null).description('or none') }), { components, presence: 'required' });
      expect((maybe.properties as any).maybe).to.deep.equal({ anyOf: [{ $ref: '#/components/schemas/Item', description: 'or none' }, { type: 'null' }] });
      // an answer's fields are required unless they say optional
      expect(components).to.deep.equal({
        Item: { type: 'object', properties: { id: { type: 'string' }, note: { type: 'string' } }, required: ['id'], additionalProperties: false },
      });
      const other = Joi.object({ id: Joi.number() }).id('Item');
      expect(() => joiToJsonSchema(other, { components })).to.throw('two different shapes are named Item');
    });

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
