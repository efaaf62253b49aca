import fs from 'node:fs';
import type http from 'node:http';
import type { Context, RootHookObject } from 'mocha';
import FindMyWay from 'find-my-way';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { Service } from '../../src/service.js';

/**
 * The API document as a contract: every HTTP response an in-process test service sends under
 * /api (and on every other path the document names) is checked against the service's own
 * /openapi.json as it is at that moment (plugins and socket providers included): the status
 * must be documented for the operation, and a JSON body must match the schema documented for
 * that status (Ajv, JSON Schema 2020-12, the dialect of OpenAPI 3.1). A request whose path or
 * method the document does not have may only be answered 404 or 405 with the error body.
 *
 * Checked at the HTTP server, so every client the tests use (supertest, fetch, the browser)
 * is covered. A response that breaks the contract fails the test during which it was sent
 * (the root afterEach hook below), naming the request, the status and what is wrong.
 */

interface Violation {
  request: string;
  problem: string;
}

const violations: Violation[] = [];

interface Checker {
  router: FindMyWay.Instance<FindMyWay.HTTPVersion.V1>;
  doc: OpenApiDoc;
  schemas: SchemaSet;
  /** by JSON pointer into doc */
  validators: Map<string, ValidateFunction>;
}

/**
 * Compiled schemas for one set of components. Documents differ mostly in plugins' paths while
 * their components stay the same: a schema is compiled once per text, not once per document.
 */
interface SchemaSet {
  ajv: Ajv2020;
  compiled: Map<string, ValidateFunction>;
}

interface OpenApiDoc {
  paths: Record<string, Record<string, { responses: Record<string, ResponseObject> }>>;
  components: { responses?: Record<string, ResponseObject> };
}

interface ResponseObject {
  $ref?: string;
  description?: string;
  content?: Record<string, { schema?: unknown }>;
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const;

/** Checkers by document text: a service's document changes when plugins or providers do. */
const checkers = new Map<string, Checker>();
const schemaSets = new Map<string, SchemaSet>();

function schemaSetFor(components: unknown): SchemaSet {
  const text = JSON.stringify(components);
  let set = schemaSets.get(text);
  if (!set) {
    // the OpenAPI keywords beside the schemas (example, x-*) are not JSON Schema: not strict
    const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
    addFormats.default(ajv);
    ajv.addSchema({ components }, 'doc');
    set = { ajv, compiled: new Map() };
    schemaSets.set(text, set);
  }
  return set;
}

function checkerFor(text: string): Checker {
  let c = checkers.get(text);
  if (c) return c;
  const doc = JSON.parse(text) as OpenApiDoc;
  const router = FindMyWay({ ignoreTrailingSlash: true, caseSensitive: false });
  for (const [path, item] of Object.entries(doc.paths)) {
    const methods = METHODS.filter((m) => item[m]).map((m) => m.toUpperCase() as FindMyWay.HTTPMethod);
    if (methods.length) router.on(methods, path.replace(/\{([^}]+)\}/g, ':$1'), () => undefined, { path });
  }
  c = { router, doc, schemas: schemaSetFor(doc.components), validators: new Map() };
  if (checkers.size > 20) checkers.clear();
  checkers.set(text, c);
  return c;
}

/** JSON pointer into the document, as a URI fragment Ajv resolves. */
const pointer = (...parts: string[]) => '#/' + parts.map((p) => encodeURIComponent(p.replace(/~/g, '~0').replace(/\//g, '~1'))).join('/');

function validatorFor(c: Checker, ref: string): ValidateFunction {
  let v = c.validators.get(ref);
  if (!v) {
    let at: unknown = c.doc;
    for (const part of ref.slice(2).split('/'))
      at = (at as Record<string, unknown> | undefined)?.[decodeURIComponent(part).replace(/~1/g, '/').replace(/~0/g, '~')];
    if (!at) throw new Error(`the document has no schema at ${ref}`);
    // its references into the components point into the set's copy of them
    const text = JSON.stringify(at).replaceAll('"#/components/', '"doc#/components/');
    v = c.schemas.compiled.get(text);
    if (!v) {
      v = c.schemas.ajv.compile(JSON.parse(text));
      c.schemas.compiled.set(text, v);
    }
    c.validators.set(ref, v);
  }
  return v;
}

function mediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';')[0]!.trim().toLowerCase();
}

/** The path as the service routes it: without the query, percent-decoded (`/api/%6De` is `/api/me`). */
function routedPath(url: string): string {
  const path = url.split('?')[0]!;
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

/** Answers given before routing (src/http/app.ts, the authentication middleware), to any path. */
const NOT_ROUTED = new Set([400, 401, 403, 413, 429, 500, 503]);

/** One response against the document; returns what is wrong, or null. */
function check(c: Checker, method: string, url: string, status: number, contentType: string | undefined, body: Buffer): string | null {
  // HEAD is answered as GET without the body
  const found = c.router.find((method === 'HEAD' ? 'GET' : method) as FindMyWay.HTTPMethod, routedPath(url));
  const type = mediaType(contentType);
  const json = type === 'application/json' || type.endsWith('+json');
  let parsed: unknown;
  if (json && body.length) {
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      return `the body is not JSON though the content type says so: ${body.toString('utf8').slice(0, 120)}`;
    }
  }
  const validate = (ref: string): string | null => {
    const v = validatorFor(c, ref);
    if (v(parsed)) return null;
    return `the body does not match ${ref}: ${c.schemas.ajv.errorsText(v.errors, { separator: '; ' })}\n      body: ${JSON.stringify(parsed).slice(0, 400)}`;
  };
  if (!found) {
    // not an operation of the document: "no such route", "not this method", or an answer any
    // request may get before it is routed (a refused credential, the enrolment wall, the limits)
    if (status === 404 || status === 405 || NOT_ROUTED.has(status))
      return json ? validate('#/components/schemas/Error') : `answered ${status} without the error body`;
    return `answered ${status} to a request the document has no operation for`;
  }
  const docPath = (found.store as { path: string }).path;
  const op = c.doc.paths[docPath]![method === 'HEAD' ? 'get' : method.toLowerCase()]!;
  const key = [String(status), `${String(status)[0]}XX`, 'default'].find((k) => op.responses[k]);
  if (!key) return `status ${status} is not documented for ${method} ${docPath} (documented: ${Object.keys(op.responses).join(', ')})`;
  let response = op.responses[key]!;
  let at = pointer('paths', docPath, method === 'HEAD' ? 'get' : method.toLowerCase(), 'responses', key);
  if (response.$ref) {
    at = response.$ref;
    const shared = c.doc.components.responses?.[response.$ref.split('/').pop()!];
    if (!shared) return `the document's ${at} does not resolve`;
    response = shared;
  }
  if (status === 204 || status === 304 || method === 'HEAD') return null;
  const content = response.content ?? {};
  const documented = Object.keys(content);
  if (!body.length) return content['application/json']?.schema ? `${status} has no body where the document says JSON` : null;
  if (!documented.length) return `${status} has a body (${type || 'no content type'}) where the document says none`;
  const entry =
    documented.find((t) => t.toLowerCase() === type) ?? documented.find((t) => t === '*/*' || (t.endsWith('/*') && type.startsWith(t.slice(0, -1))));
  if (!entry) return `${status} answered ${type || 'no content type'}; the document says ${documented.join(', ')}`;
  if (!json || !content[entry]!.schema) return null;
  return validate(`${at}/${pointer('content', entry, 'schema').slice(2)}`);
}

/** Under /api, and the few paths outside it the document names (the ws endpoint, the sign-in redirects); not pages or assets. */
function inScope(service: Service, url: string): boolean {
  if (url === '/api' || url.startsWith('/api/') || url.startsWith('/api?')) return true;
  const path = routedPath(url);
  if (path.startsWith('/static/')) return false;
  const router = checkerFor(service.openApiDocument()).router;
  return ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].some((m) => router.find(m as FindMyWay.HTTPMethod, path));
}

/**
 * Checks every response of this service's HTTP server against its API document (installed by
 * startService before the service listens).
 */
export function checkResponses(service: Service): void {
  const server = service.server;
  const listeners = server.listeners('request') as Array<(req: http.IncomingMessage, res: http.ServerResponse) => void>;
  server.removeAllListeners('request');
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    try {
      if (inScope(service, req.url ?? '')) capture(service, req, res);
    } catch (err) {
      // the check never stands between a request and its answer
      violations.push({ request: `${req.method} ${req.url}`, problem: `the check failed: ${(err as Error).stack}` });
    }
    for (const l of listeners) l.call(server, req, res);
  });
}

function capture(service: Service, req: http.IncomingMessage, res: http.ServerResponse): void {
  const chunks: Buffer[] = [];
  // the request's body as the parser hands it to the stream (whoever reads it, whenever)
  const sent: Buffer[] = [];
  if (EXAMPLES) {
    const push = req.push.bind(req);
    req.push = (chunk: unknown, encoding?: BufferEncoding) => {
      if (chunk !== null && chunk !== undefined) sent.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string, encoding));
      return push(chunk, encoding);
    };
  }
  const write = res.write.bind(res) as (...args: unknown[]) => boolean;
  const end = res.end.bind(res) as (...args: unknown[]) => http.ServerResponse;
  const keep = (chunk: unknown, encoding: unknown) => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string, typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8'));
  };
  res.write = ((chunk: unknown, encoding?: unknown, cb?: unknown) => {
    keep(chunk, encoding);
    return write(chunk, encoding, cb);
  }) as typeof res.write;
  res.end = ((chunk?: unknown, encoding?: unknown, cb?: unknown) => {
    keep(chunk, encoding);
    const method = req.method ?? 'GET';
    // a client that left receives nothing (koa ends such a response without its body)
    const gone = !res.socket || res.socket.destroyed || !res.socket.writable;
    // the answer goes out first: checking it must not make the client wait (timed tests)
    const ended = end(chunk, encoding, cb);
    if (method !== 'OPTIONS' && !gone) {
      try {
        const problem = check(
          checkerFor(service.openApiDocument()),
          method,
          req.url ?? '/',
          res.statusCode,
          res.getHeader('content-type') as string | undefined,
          Buffer.concat(chunks),
        );
        if (problem) violations.push({ request: `${method} ${(req.url ?? '').split('?')[0]} -> ${res.statusCode}`, problem });
        else if (EXAMPLES && res.statusCode >= 200 && res.statusCode < 300) {
          const answer = { status: res.statusCode, type: res.getHeader('content-type') as string | undefined, body: Buffer.concat(chunks) };
          recordExample(checkerFor(service.openApiDocument()), method, req.url ?? '/', req.headers['content-type'], Buffer.concat(sent), answer);
        }
      } catch (err) {
        violations.push({ request: `${req.method} ${req.url}`, problem: `the check failed: ${(err as Error).stack}` });
      }
    }
    return ended;
  }) as typeof res.end;
}

/**
 * TEST_API_EXAMPLES=FILE: per operation, the first request body and the first answer of each
 * 2xx status that match the document are kept, and appended to FILE as JSON lines when the run
 * ends; scripts/api-examples.ts makes docs/api-examples.json of them (the document's examples).
 */
const EXAMPLES = process.env.TEST_API_EXAMPLES;

interface Example {
  operationId: string;
  /** the document's path and the operation's tag (the script keeps the service's own operations) */
  path: string;
  tag: string | undefined;
  /** `request`, or the answer's status */
  part: string;
  value: unknown;
}

const examples = new Map<string, Example>();

function parseJson(type: string | string[] | undefined, body: Buffer): { value: unknown } | null {
  const t = mediaType(Array.isArray(type) ? type[0] : type);
  if (!body.length || !(t === 'application/json' || t.endsWith('+json'))) return null;
  try {
    return { value: JSON.parse(body.toString('utf8')) as unknown };
  } catch {
    return null;
  }
}

/** A 2xx answer that met the contract, and the JSON body the request sent when the document's schema of it takes it. */
function recordExample(
  c: Checker,
  method: string,
  url: string,
  requestType: string | string[] | undefined,
  requestBody: Buffer,
  answer: { status: number; type: string | undefined; body: Buffer },
): void {
  if (method === 'HEAD') return;
  const found = c.router.find(method as FindMyWay.HTTPMethod, routedPath(url));
  if (!found) return;
  const docPath = (found.store as { path: string }).path;
  const op = c.doc.paths[docPath]![method.toLowerCase()] as {
    operationId?: string;
    tags?: string[];
    requestBody?: { content?: Record<string, { schema?: unknown }> };
  };
  const id = op.operationId;
  if (!id) return;
  const where = { operationId: id, path: docPath, tag: op.tags?.[0] };
  const sent = parseJson(requestType, requestBody);
  if (sent && !examples.has(`${id} request`) && op.requestBody?.content?.['application/json']?.schema) {
    const v = validatorFor(c, pointer('paths', docPath, method.toLowerCase(), 'requestBody', 'content', 'application/json', 'schema'));
    if (v(sent.value)) examples.set(`${id} request`, { ...where, part: 'request', value: sent.value });
  }
  const got = parseJson(answer.type, answer.body);
  if (got && !examples.has(`${id} ${answer.status}`)) examples.set(`${id} ${answer.status}`, { ...where, part: String(answer.status), value: got.value });
}

function writeExamples(): void {
  if (!EXAMPLES || !examples.size) return;
  fs.appendFileSync(EXAMPLES, [...examples.values()].map((e) => JSON.stringify(e) + '\n').join(''));
  examples.clear();
}

/** Builds the checker of a service's document now (after boot), not during its first answer. */
export function prepareCheck(service: Service): void {
  checkerFor(service.openApiDocument());
}

/**
 * TEST_CONTRACT_LOG=FILE: every break of the contract is appended to FILE as a JSON line and
 * no test fails for it (to see them all at once while changing the document; CI never sets it).
 */
const LOG = process.env.TEST_CONTRACT_LOG;

function report(): Error | null {
  if (!violations.length) return null;
  if (LOG) {
    fs.appendFileSync(
      LOG,
      violations
        .splice(0)
        .map((v) => JSON.stringify(v) + '\n')
        .join(''),
    );
    return null;
  }
  const lines = violations.splice(0).map((v) => `  ${v.request}: ${v.problem}`);
  return new Error(`responses that are not what /openapi.json documents:\n${lines.join('\n')}`);
}

const WRAPPED = Symbol('contract-checked');

export const mochaHooks: RootHookObject = {
  /**
   * The test itself fails when a response it received broke the contract: its function is
   * wrapped to check after it ran (a failing root afterEach hook would stop the file's other
   * tests). What hooks received before it is reported with it; what came after the last test,
   * by the root afterAll hook.
   */
  beforeEach(this: Context) {
    const test = this.currentTest as (Mocha.Test & { [WRAPPED]?: true }) | undefined;
    const fn = test?.fn;
    // a test written with a done callback is left as it is (its violations: the next test, or afterAll)
    if (!test || !fn || fn.length > 0 || test[WRAPPED]) return;
    test[WRAPPED] = true;
    test.fn = async function (this: Context) {
      await (fn as (this: Context) => unknown).call(this);
      const err = report();
      if (err) throw err;
    };
  },
  afterAll() {
    writeExamples();
    const err = report();
    if (err) throw err;
  },
};
