import Joi from 'joi';
import { changesOwn, type Endpoint, type ResponseDoc, type RouteAuth } from './api.js';
import { ERROR_CODES } from './errors.js';
import { joiToJsonSchema, objectFields, type JsonSchema } from './joi-schema.js';
import recordedExamples from '../../docs/api-examples.json' with { type: 'json' };

/**
 * The OpenAPI 3.1 document, generated from the route definitions of src/http/api.ts: the
 * same joi schemas that validate requests describe them here.
 */

export const TAGS: { name: string; description: string }[] = [
  { name: 'auth', description: 'Login, logout, single sign-on and the authentication settings' },
  { name: 'me', description: 'The caller: profile, access view, own API keys and sessions' },
  { name: 'users', description: 'User administration [feature:admin.users]' },
  { name: 'groups', description: 'Groups and the permission catalog' },
  { name: 'settings', description: 'System API key and webhook secret [feature:admin.settings]' },
  { name: 'notifications', description: 'Notification history, read state and sending' },
  { name: 'webhooks', description: 'Source-control webhook intake (authenticated by the webhook secret)' },
  { name: 'gateway', description: 'The WebSocket gateway at /ws and its one-time tickets' },
  { name: 'plugins', description: 'Plugin administration [feature:admin.plugins]' },
  { name: 'socket-management', description: 'Socket providers, mount health and repair' },
  { name: 'mfa', description: 'Second factors: an authenticator app, passkeys and recovery codes; the second step of a sign-in and step-up' },
  { name: 'audit', description: 'The audit trail: who did what, refused or failed, hash-chained [feature:admin.audit]' },
];

/** Every credential an authenticated route accepts (docs/auth.md). */
const ANY_CREDENTIAL = [{ ApiKeyAuth: [] }, { bearerAuth: [] }, { basicAuth: [] }, { cookieAuth: [] }];

const errorSchema: JsonSchema = {
  type: 'object',
  required: ['error'],
  additionalProperties: false,
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      additionalProperties: false,
      properties: {
        code: { type: 'string', enum: [...ERROR_CODES] },
        message: { type: 'string' },
        details: {
          description:
            'validation_failed: one entry per invalid field; other codes: what the message says, as data (e.g. the missing permission, the byte limit)',
          anyOf: [
            {
              type: 'array',
              items: {
                type: 'object',
                required: ['field', 'message'],
                properties: {
                  field: {
                    type: 'string',
                    description: 'the field as the request writes it: `email`, `groups[1]`, `notifications[0].title`, `metadata.tenant`',
                  },
                  message: { type: 'string' },
                },
              },
            },
            { type: 'object', additionalProperties: true },
          ],
        },
      },
    },
  },
};

const errorContent = { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } };
const errorRef = (description: string) => ({ description, content: errorContent });

/**
 * Answers any route may give, documented once (components.responses) and referenced by every
 * operation they apply to: the body and header limits, the Basic lockout, the boot gate, the
 * database away, a fault of ours.
 */
const COMMON_RESPONSES: Record<string, { status: number; description: string; headers?: Record<string, string> }> = {
  BadRequest: {
    status: 400,
    description: 'validation_failed: the field named in details is invalid (a parameter, the body, or a credential header such as an over-long Basic password)',
  },
  Unauthorized: {
    status: 401,
    description: 'unauthorized: no valid credential (mfa_required: HTTP Basic for an account with a second factor)',
    headers: { 'WWW-Authenticate': 'the schemes accepted' },
  },
  Forbidden: {
    status: 403,
    description:
      'forbidden: an unsafe request from a page of another origin, with the session cookie or Basic, or to a sign-in route (details.reason cross_origin); or mfa_enrollment_required: a group of the caller requires a second factor, and until one is enrolled only the profile and the enrolment answer',
  },
  PayloadTooLarge: { status: 413, description: 'payload_too_large: the body is over the limit (1 MiB unless the route says otherwise)' },
  UnsupportedMediaType: { status: 415, description: 'unsupported_media_type: the body is not JSON' },
  TooManyRequests: {
    status: 429,
    description: 'rate_limited: the HTTP Basic user is locked out for a while after failed attempts',
    headers: { 'Retry-After': 'seconds to wait' },
  },
  InternalError: { status: 500, description: 'internal: a fault of the service (logged with the request id)' },
  Unavailable: {
    status: 503,
    description: 'booting (the service is starting) or unavailable (the database is not reachable); try again after Retry-After',
    headers: { 'Retry-After': 'seconds to wait' },
  },
};

function commonResponse(name: string): Record<string, unknown> {
  const c = COMMON_RESPONSES[name]!;
  return {
    description: c.description,
    content: errorContent,
    ...(c.headers ? { headers: Object.fromEntries(Object.entries(c.headers).map(([k, v]) => [k, { description: v, schema: { type: 'string' } }])) } : {}),
  };
}

const commonRef = (name: string) => ({ $ref: `#/components/responses/${name}` });

function securityOf(auth: RouteAuth): unknown[] {
  if (auth === 'none') return [];
  // {} first: the call also works anonymously
  if (auth === 'optional') return [{}, ...ANY_CREDENTIAL];
  return ANY_CREDENTIAL;
}

function openApiPath(path: string): { path: string; names: string[] } {
  const names: string[] = [];
  const converted = path.replace(/:([A-Za-z0-9_]+)/g, (_m, name: string) => {
    names.push(name);
    return `{${name}}`;
  });
  return { path: converted, names };
}

/**
 * Examples by operationId: a request body and the 2xx answers by status, as a real test run
 * sent and received them (scripts/api-examples.ts writes docs/api-examples.json; secrets and
 * tokens are placeholders). test/http/openapi-tools.test.ts holds each to its schema.
 */
const EXAMPLES = recordedExamples as unknown as Record<string, { request?: unknown; responses?: Record<string, unknown> } | undefined>;

/** Components collected while the document is built (shapes named with joi's `.id()`). */
type Components = Record<string, JsonSchema>;

function responseObject(doc: string | ResponseDoc, status: number, components: Components): Record<string, unknown> {
  const d: ResponseDoc = typeof doc === 'string' ? { description: doc } : doc;
  const out: Record<string, unknown> = { description: d.description };
  if (d.schema) {
    // an answer's fields are all present unless the schema says optional
    const schema = Joi.isSchema(d.schema) ? joiToJsonSchema(d.schema as Joi.Schema, { components, presence: 'required' }) : (d.schema as JsonSchema);
    out.content = { [d.contentType ?? 'application/json']: { schema } };
  } else if (status >= 400) out.content = errorContent;
  if (d.headers) out.headers = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k, { description: v, schema: { type: 'string' } }]));
  return out;
}

const emptyRefused = new WeakMap<Joi.Schema, boolean>();

/** A body is required when the service refuses an empty one (a missing body is read as {}). */
function refusesEmpty(body: Joi.Schema): boolean {
  let refused = emptyRefused.get(body);
  if (refused === undefined) {
    refused = body.validate({}, { abortEarly: true, errors: { render: false } }).error !== undefined;
    emptyRefused.set(body, refused);
  }
  return refused;
}

/** The name of a route that gives none (a plugin's): its method and path in camelCase, `getApiPluginsDemoItems`. */
export function pathOperationId(method: string, fullPath: string): string {
  return `${method.toLowerCase()}${fullPath.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`;
}

/** What an operationId must look like (generated clients make function names of it). */
export const OPERATION_ID = /^[a-z][A-Za-z0-9]*$/;

function operation(e: Endpoint, pathNames: string[], components: Components, operationId: string): Record<string, unknown> {
  const op: Record<string, unknown> = {
    tags: [e.tag],
    summary: e.summary,
    operationId,
  };
  const notes: string[] = [];
  if (e.description) notes.push(e.description);
  if (typeof e.auth === 'object') notes.push(`Requires the permission \`${e.auth.permission}\`.`);
  else if (e.auth === 'identity') notes.push('Requires an authenticated caller.');
  else if (e.auth === 'optional') notes.push('Works anonymously; a presented credential is used when valid.');
  if (notes.length) op.description = notes.join('\n\n');
  if (typeof e.auth === 'object') op['x-permission'] = e.auth.permission;
  if (e.stepUp) {
    notes.push(
      'Step-up: from a web session of an account with a second factor, it needs that factor verified within `SERVICE_MFA_STEP_UP_MINUTES` (`POST /api/auth/step-up`), else 403 `step_up_required`.',
    );
    op.description = notes.join('\n\n');
    op['x-step-up'] = true;
  }

  const parameters: Record<string, unknown>[] = [];
  const paramFields = e.params ? objectFields(e.params) : [];
  for (const name of pathNames) {
    const f = paramFields.find((p) => p.name === name);
    parameters.push({ name, in: 'path', required: true, schema: f?.schema ?? { type: 'string' }, ...(f?.description ? { description: f.description } : {}) });
  }
  for (const f of e.query ? objectFields(e.query) : []) {
    parameters.push({ name: f.name, in: 'query', required: f.required, schema: f.schema, ...(f.description ? { description: f.description } : {}) });
  }
  for (const f of e.headers ? objectFields(e.headers) : []) {
    parameters.push({ name: f.name, in: 'header', required: f.required, schema: f.schema, ...(f.description ? { description: f.description } : {}) });
  }
  if (parameters.length) op.parameters = parameters;

  if (e.body || e.bodyMode === 'raw') {
    const contentType = e.bodyMode === 'raw' ? (e.bodyContentType ?? 'application/json') : 'application/json';
    const schema = e.body ? joiToJsonSchema(e.body, { components }) : {};
    const required = e.bodyMode === 'raw' || (e.body !== undefined && refusesEmpty(e.body));
    const example = contentType === 'application/json' ? EXAMPLES[operationId]?.request : undefined;
    op.requestBody = { required, content: { [contentType]: { schema, ...(example !== undefined ? { example } : {}) } } };
  }

  const responses: Record<string, unknown> = {};
  const given = e.responses ?? {};
  for (const [status, doc] of Object.entries(given)) if (doc) responses[status] = responseObject(doc, Number(status), components);
  for (const [status, example] of Object.entries(EXAMPLES[operationId]?.responses ?? {})) {
    const json = (responses[status] as { content?: Record<string, Record<string, unknown>> } | undefined)?.content?.['application/json'];
    if (json) json.example = example;
  }
  // a route that documents no success, no redirect and no default answers 200
  if (!Object.keys(given).some((s) => Number(s) < 400 || s === 'default')) responses['200'] = { description: 'OK' };
  const common = (status: number, name: string) => {
    responses[status] ??= commonRef(name);
  };
  const readsBody = e.body !== undefined || e.bodyMode === 'raw';
  // any route: a credential header that is malformed (an over-long Basic password) is a 400 too
  common(400, 'BadRequest');
  // any route: a credential that is refused (a route that needs none still refuses HTTP Basic of an account with a second factor: mfa_required)
  common(401, 'Unauthorized');
  // any route: a member of a group that requires a second factor who has none yet, a cookie
  // request from another origin; a route's own reasons come first
  const own = (responses['403'] as { description: string } | undefined)?.description.replace(/^forbidden: /, '');
  const reasons = [
    own ?? (typeof e.auth === 'object' ? `the caller lacks ${e.auth.permission}` : null),
    changesOwn(e) ? 'a key scoped to reads (its scopes do not include api:write) asking for a change' : null,
    e.stepUp && !own?.includes('step_up_required')
      ? 'step_up_required: a web session of an account with a second factor must verify it again (POST /api/auth/step-up)'
      : null,
  ].filter(Boolean);
  responses['403'] = reasons.length
    ? errorRef(`forbidden: ${reasons.join('; or ')}; or, on any route: ${COMMON_RESPONSES.Forbidden!.description.replace(/^forbidden: /, '')}`)
    : commonRef('Forbidden');
  // any route: a body over the limit is refused before routing, whether the operation reads one or not
  common(413, 'PayloadTooLarge');
  if (readsBody && e.bodyMode !== 'raw') common(415, 'UnsupportedMediaType');
  common(429, 'TooManyRequests');
  common(500, 'InternalError');
  common(503, 'Unavailable');
  op.responses = responses;
  op.security = securityOf(e.documentedAuth ?? e.auth);
  return op;
}

/**
 * The operationId of each endpoint: its own; one that is missing, malformed or taken by an
 * endpoint before it (the service's routes come before the plugins' and the providers', and a
 * core provider before a plugin's) is named after its method and path, which is unique. The
 * service's own routes all keep theirs (test/http/openapi-tools.test.ts).
 */
function operationIds(endpoints: readonly Endpoint[]): Map<Endpoint, string> {
  const ids = new Map<Endpoint, string>();
  const taken = new Set<string>();
  for (const e of endpoints) {
    const own = e.operationId;
    const id = own && OPERATION_ID.test(own) && !taken.has(own) ? own : pathOperationId(e.method, e.fullPath);
    taken.add(id);
    ids.set(e, id);
  }
  return ids;
}

/**
 * A plugin's route whose schemas cannot be documented (e.g. a shape named like another one) is
 * listed without them rather than taking the whole document down; the service's own routes
 * throw (test/web/openapi.test.ts builds the document).
 */
function pluginSafe(e: Endpoint, operationId: string, build: () => Record<string, unknown>): Record<string, unknown> {
  if (!e.tag.startsWith('plugin:')) return build();
  try {
    return build();
  } catch (err) {
    return {
      tags: [e.tag],
      summary: e.summary,
      operationId,
      description: `Its schemas could not be documented: ${(err as Error).message}`,
      responses: { default: { description: 'not documented' } },
      security: securityOf(e.auth),
    };
  }
}

export interface OpenApiInfo {
  title: string;
  version: string;
  description?: string;
  /** the name of the UI session cookie (the cookieAuth scheme) */
  sessionCookie: string;
}

/** The OpenAPI 3.1 document of these endpoints (hidden ones left out). */
export function buildOpenApi(endpoints: readonly Endpoint[], info: OpenApiInfo): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  const components: Components = {};
  const shown = endpoints.filter((e) => !e.hidden);
  const ids = operationIds(shown);
  const visible = shown.slice().sort((a, b) => a.fullPath.localeCompare(b.fullPath));
  for (const e of visible) {
    const { path, names } = openApiPath(e.fullPath);
    paths[path] ??= {};
    paths[path]![e.method.toLowerCase()] = pluginSafe(e, ids.get(e)!, () => operation(e, names, components, ids.get(e)!));
  }
  const used = new Set(visible.map((e) => e.tag));
  return {
    openapi: '3.1.0',
    info: {
      title: info.title,
      version: info.version,
      ...(info.description ? { description: info.description } : {}),
      license: { name: 'MIT', identifier: 'MIT' },
    },
    // relative: "Try it out" calls the origin the document was loaded from
    servers: [{ url: '/' }],
    tags: [
      ...TAGS.filter((t) => used.has(t.name)),
      ...[...used]
        .filter((t) => !TAGS.some((x) => x.name === t))
        .map((name) => ({ name, description: name.startsWith('plugin:') ? `Routes of the plugin ${name.slice(7)}` : name })),
    ],
    paths,
    components: {
      securitySchemes: {
        ApiKeyAuth: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'The system API key or a per-user API key' },
        bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key or a web-session token as a Bearer token' },
        basicAuth: { type: 'http', scheme: 'basic', description: 'Username and password of a local account' },
        cookieAuth: {
          type: 'apiKey',
          in: 'cookie',
          name: info.sessionCookie,
          description: 'The UI session cookie set by the login page (unsafe methods need an allowed Origin)',
        },
      },
      schemas: { Error: errorSchema, ...Object.fromEntries(Object.entries(components).sort(([a], [b]) => a.localeCompare(b))) },
      responses: Object.fromEntries(Object.keys(COMMON_RESPONSES).map((name) => [name, commonResponse(name)])),
    },
  };
}
