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
  ajv: Ajv2020;
  validators: Map<string, ValidateFunction>;
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

function checkerFor(text: string): Checker {
  let c = checkers.get(text);
  if (c) return c;
  const doc = JSON.parse(text) as OpenApiDoc;
  // the OpenAPI keywords beside the schemas (example, x-*) are not JSON Schema: not strict
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
  addFormats.default(ajv);
  ajv.addSchema(doc as object, 'openapi');
  const router = FindMyWay({ ignoreTrailingSlash: true, caseSensitive: false });
  for (const [path, item] of Object.entries(doc.paths)) {
    const methods = METHODS.filter((m) => item[m]).map((m) => m.toUpperCase() as FindMyWay.HTTPMethod);
    if (methods.length) router.on(methods, path.replace(/\{([^}]+)\}/g, ':$1'), () => undefined, { path });
  }
  c = { router, doc, ajv, validators: new Map() };
  if (checkers.size > 20) checkers.clear();
  checkers.set(text, c);
  return c;
}

/** JSON pointer into the document, as a URI fragment Ajv resolves. */
const pointer = (...parts: string[]) => '#/' + parts.map((p) => encodeURIComponent(p.replace(/~/g, '~0').replace(/\//g, '~1'))).join('/');

function validatorFor(c: Checker, ref: string): ValidateFunction {
  let v = c.validators.get(ref);
  if (!v) {
    v = c.ajv.getSchema(`openapi${ref}`);
    if (!v) throw new Error(`the document has no schema at ${ref}`);
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
  const found = c.router.find(method as FindMyWay.HTTPMethod, routedPath(url));
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
    return `the body does not match ${ref}: ${c.ajv.errorsText(v.errors, { separator: '; ' })}\n      body: ${JSON.stringify(parsed).slice(0, 400)}`;
  };
  if (!found) {
    // not an operation of the document: "no such route", "not this method", or an answer any
    // request may get before it is routed (a refused credential, the enrolment wall, the limits)
    if (status === 404 || status === 405 || NOT_ROUTED.has(status)) return json ? validate('#/components/schemas/Error') : `answered ${status} without the error body`;
    return `answered ${status} to a request the document has no operation for`;
  }
  const docPath = (found.store as { path: string }).path;
  const op = c.doc.paths[docPath]![method.toLowerCase()]!;
  const key = [String(status), `${String(status)[0]}XX`, 'default'].find((k) => op.responses[k]);
  if (!key) return `status ${status} is not documented for ${method} ${docPath} (documented: ${Object.keys(op.responses).join(', ')})`;
  let response = op.responses[key]!;
  let at = pointer('paths', docPath, method.toLowerCase(), 'responses', key);
  if (response.$ref) {
    at = response.$ref;
    const shared = c.doc.components.responses?.[response.$ref.split('/').pop()!];
    if (!shared) return `the document's ${at} does not resolve`;
    response = shared;
  }
  if (!body.length || status === 204 || status === 304 || method === 'HEAD') return null;
  const content = response.content ?? {};
  const documented = Object.keys(content);
  if (!documented.length) return `${status} has a body (${type || 'no content type'}) where the document says none`;
  const entry = documented.find((t) => t.toLowerCase() === type) ?? documented.find((t) => t === '*/*' || (t.endsWith('/*') && type.startsWith(t.slice(0, -1))));
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
    if (inScope(service, req.url ?? '')) capture(service, req, res);
    for (const l of listeners) l.call(server, req, res);
  });
}

function capture(service: Service, req: http.IncomingMessage, res: http.ServerResponse): void {
  const chunks: Buffer[] = [];
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
    try {
      const method = req.method ?? 'GET';
      if (method !== 'OPTIONS') {
        const problem = check(checkerFor(service.openApiDocument()), method, req.url ?? '/', res.statusCode, res.getHeader('content-type') as string | undefined, Buffer.concat(chunks));
        if (problem) violations.push({ request: `${method} ${(req.url ?? '').split('?')[0]} -> ${res.statusCode}`, problem });
      }
    } catch (err) {
      violations.push({ request: `${req.method} ${req.url}`, problem: `the check failed: ${(err as Error).stack}` });
    }
    return end(chunk, encoding, cb);
  }) as typeof res.end;
}

/**
 * TEST_CONTRACT_LOG=FILE: every break of the contract is appended to FILE as a JSON line and
 * no test fails for it (to see them all at once while changing the document; CI never sets it).
 */
const LOG = process.env.TEST_CONTRACT_LOG;

function report(): Error | null {
  if (!violations.length) return null;
  if (LOG) {
    fs.appendFileSync(LOG, violations.splice(0).map((v) => JSON.stringify(v) + '\n').join(''));
    return null;
  }
  const lines = violations.splice(0).map((v) => `  ${v.request}: ${v.problem}`);
  return new Error(`responses that are not what /openapi.json documents:\n${lines.join('\n')}`);
}

export const mochaHooks: RootHookObject = {
  afterEach(this: Context) {
    const err = report();
    if (err) throw err;
  },
  afterAll() {
    const err = report();
    if (err) throw err;
  },
};
