import fs from 'node:fs';
import { expect } from 'chai';
import Joi from 'joi';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { createConfig, lintFromString } from '@redocly/openapi-core';
import { currentDocument } from '../../scripts/api-types.js';
import { EXAMPLES_FILE, scrub, type ExampleFile } from '../../scripts/api-examples.js';
import type { Endpoint } from '../../src/http/api.js';
import { buildOpenApi, OPERATION_ID, pathOperationId } from '../../src/http/openapi.js';

/**
 * The API document as third-party tools read it (Redocly, Prism, openapi-typescript, code
 * generators): operations named as functions, an example of every body from a real run, and
 * Redocly's recommended rules without an error. The document is the one scripts/api-types.ts
 * writes to docs/openapi.json, made now from the route definitions.
 */

interface Operation {
  operationId: string;
  tags: string[];
  requestBody?: { content: Record<string, { schema: unknown; example?: unknown }> };
  responses: Record<string, { $ref?: string; description?: string; content?: Record<string, { schema: unknown; example?: unknown }> }>;
}

interface Doc {
  paths: Record<string, Record<string, Operation>>;
  components: Record<string, unknown>;
}

describe('API document for tools: operationIds, examples, Redocly', function () {
  this.timeout(60_000);
  let text: string;
  let doc: Doc;
  let ops: { method: string; path: string; op: Operation }[];

  before(async function () {
    text = await currentDocument();
    doc = JSON.parse(text) as Doc;
    ops = Object.entries(doc.paths).flatMap(([path, item]) => Object.entries(item).map(([method, op]) => ({ method, path, op })));
  });

  it('names every operation as a function: camelCase, unique, its own name rather than its method and path', function () {
    expect(ops.length).to.be.greaterThan(80);
    const ids = ops.map((o) => o.op.operationId);
    expect(ids.filter((id) => !OPERATION_ID.test(id))).to.deep.equal([]);
    expect(ids.filter((id, i) => ids.indexOf(id) !== i)).to.deep.equal([]);
    const byPath = ops.filter((o) => o.op.operationId === pathOperationId(o.method, o.path.replace(/\{([^}]+)\}/g, ':$1')));
    expect(byPath.map((o) => `${o.method} ${o.path}`)).to.deep.equal([]);
    const id = (method: string, path: string) => doc.paths[path]![method]!.operationId;
    expect(id('get', '/api/users')).to.equal('listUsers');
    expect(id('post', '/api/users')).to.equal('createUser');
    expect(id('get', '/api/users/{id}')).to.equal('getUser');
    expect(id('patch', '/api/users/{id}')).to.equal('updateUser');
    expect(id('delete', '/api/users/{id}')).to.equal('deleteUser');
    expect(id('delete', '/api/users/{id}/api-keys/{keyId}')).to.equal('revokeUserKey');
    expect(id('get', '/api/notifications')).to.equal('listNotifications');
    expect(id('put', '/api/settings/webhook-secret/github')).to.equal('setGithubWebhookSecret');
    // a socket provider's operation: <provider><Operation>
    expect(id('post', '/api/socket/container/spawn')).to.equal('containerSpawn');
    expect(id('get', '/api/socket/container/resolve-mounts')).to.equal('containerResolveMounts');
  });

  it("names a plugin's route that gives no name, or one already taken or malformed, after its method and path", function () {
    const ok = Joi.object({ ok: Joi.boolean() });
    const route = (method: Endpoint['method'], fullPath: string, tag: string, operationId?: string): Endpoint => ({
      method,
      path: fullPath,
      fullPath,
      tag,
      summary: 'a route',
      auth: 'identity',
      responses: { 200: { description: 'ok', schema: ok } },
      ...(operationId ? { operationId } : {}),
    });
    const built = buildOpenApi(
      [
        route('GET', '/api/things', 'users', 'listThings'),
        route('GET', '/api/plugins/demo/items', 'plugin:demo'),
        route('POST', '/api/plugins/demo/items', 'plugin:demo', 'listThings'),
        route('DELETE', '/api/plugins/demo/items/:id', 'plugin:demo', 'Remove-item'),
        route('PUT', '/api/plugins/demo/items/:id', 'plugin:demo', 'replaceItem'),
      ],
      { title: 't', version: '1', sessionCookie: 'sid' },
    ) as unknown as Doc;
    const names = Object.entries(built.paths).flatMap(([p, item]) => Object.entries(item).map(([m, o]) => `${m} ${p} ${o.operationId}`));
    expect(names).to.have.members([
      'get /api/things listThings',
      'get /api/plugins/demo/items getApiPluginsDemoItems',
      'post /api/plugins/demo/items postApiPluginsDemoItems',
      'delete /api/plugins/demo/items/{id} deleteApiPluginsDemoItemsId',
      'put /api/plugins/demo/items/{id} replaceItem',
    ]);
  });

  describe('examples (docs/api-examples.json, recorded by scripts/api-examples.ts)', function () {
    const file = JSON.parse(fs.readFileSync(EXAMPLES_FILE, 'utf8')) as ExampleFile;

    /**
     * [where, the media type object] of every JSON request body and JSON 2xx answer; not of an
     * operation that never succeeds (a socket provider's required operation it does not serve:
     * its 200 is documented as `never`, the call answers 501), which no run can record.
     */
    const bodies = () =>
      ops.flatMap(({ method, path, op }) => {
        const out: [string, { schema: unknown; example?: unknown }][] = [];
        if (Object.entries(op.responses).some(([status, r]) => /^2/.test(status) && r.description?.startsWith('never'))) return out;
        const body = op.requestBody?.content['application/json'];
        if (body) out.push([`${method} ${path} (${op.operationId}) request`, body]);
        for (const [status, r] of Object.entries(op.responses)) {
          const json = r.content?.['application/json'];
          if (/^2/.test(status) && json) out.push([`${method} ${path} (${op.operationId}) ${status}`, json]);
        }
        return out;
      });

    it('gives every JSON request body and every JSON 2xx answer an example', function () {
      const all = bodies();
      expect(all.length).to.be.greaterThan(80);
      expect(all.filter(([, media]) => media.example === undefined).map(([where]) => where)).to.deep.equal([]);
    });

    it('has each example match the schema it illustrates', function () {
      const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
      addFormats.default(ajv);
      ajv.addSchema({ components: doc.components }, 'doc');
      const wrong: string[] = [];
      for (const [where, media] of bodies()) {
        if (media.example === undefined) continue;
        const validate = ajv.compile(JSON.parse(JSON.stringify(media.schema).replaceAll('"#/components/', '"doc#/components/')) as object);
        if (!validate(media.example)) wrong.push(`${where}: ${ajv.errorsText(validate.errors)}`);
      }
      expect(wrong).to.deep.equal([]);
    });

    it('holds no secret or token: each is a placeholder of its shape', function () {
      expect(Object.keys(file).length).to.be.greaterThan(60);
      expect(scrub(file)).to.deep.equal(file);
      // what a recorded answer held, as the file keeps it
      expect(JSON.stringify(file.issueMyKey?.responses?.['201'])).to.match(/"token":"[^"]*X{4}/i);
    });

    it('names only operations of the document (a renamed one is recorded again)', function () {
      const ids = new Set(ops.map((o) => o.op.operationId));
      expect(Object.keys(file).filter((id) => !ids.has(id))).to.deep.equal([]);
    });

    it('is what the document shows', function () {
      const id = (method: string, path: string) => doc.paths[path]![method]!;
      expect(id('post', '/api/users').requestBody!.content['application/json']!.example).to.deep.equal(file.createUser!.request);
      expect(id('get', '/api/users').responses['200']!.content!['application/json']!.example).to.deep.equal(file.listUsers!.responses!['200']);
    });
  });

  it("passes Redocly's recommended rules without an error", async function () {
    const problems = await lintFromString({ source: text, absoluteRef: '/openapi.json', config: await createConfig({ extends: ['recommended'] }) });
    const errors = problems.filter((p) => p.severity === 'error').map((p) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`);
    expect(errors).to.deep.equal([]);
  });
});
