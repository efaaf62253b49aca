import Joi from 'joi';
import type { Endpoint, ResponseDoc, RouteAuth } from './api.js';
import { joiToJsonSchema, objectFields, type JsonSchema } from './joi-schema.js';

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
];

/** Every credential an authenticated route accepts (docs/auth.md). */
const ANY_CREDENTIAL = [{ ApiKeyAuth: [] }, { bearerAuth: [] }, { basicAuth: [] }, { cookieAuth: [] }];

const errorSchema: JsonSchema = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: {
        code: {
          type: 'string',
          enum: ['unauthorized', 'forbidden', 'not_found', 'validation_failed', 'conflict', 'payload_too_large', 'unsupported_media_type', 'method_not_allowed', 'rate_limited', 'unavailable', 'booting', 'bad_gateway', 'internal', 'mfa_required', 'step_up_required', 'mfa_enrollment_required'],
        },
        message: { type: 'string' },
        details: { description: 'for validation_failed: [{field, message}]' },
      },
    },
  },
};

const errorRef = (description: string) => ({ description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } });

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

function schemaOf(schema: Joi.Schema | JsonSchema): JsonSchema {
  return Joi.isSchema(schema) ? joiToJsonSchema(schema as Joi.Schema) : (schema as JsonSchema);
}

function responseObject(doc: string | ResponseDoc, status: number): Record<string, unknown> {
  const d: ResponseDoc = typeof doc === 'string' ? { description: doc } : doc;
  const out: Record<string, unknown> = { description: d.description };
  if (d.schema) out.content = { [d.contentType ?? 'application/json']: { schema: schemaOf(d.schema) } };
  else if (status >= 400) out.content = { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } };
  if (d.headers) out.headers = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k, { description: v, schema: { type: 'string' } }]));
  return out;
}

function operation(e: Endpoint, pathNames: string[]): Record<string, unknown> {
  const op: Record<string, unknown> = {
    tags: [e.tag],
    summary: e.summary,
    operationId: `${e.method.toLowerCase()}${e.fullPath.replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`,
  };
  const notes: string[] = [];
  if (e.description) notes.push(e.description);
  if (typeof e.auth === 'object') notes.push(`Requires the permission \`${e.auth.permission}\`.`);
  else if (e.auth === 'identity') notes.push('Requires an authenticated caller.');
  else if (e.auth === 'optional') notes.push('Works anonymously; a presented credential is used when valid.');
  if (notes.length) op.description = notes.join('\n\n');
  if (typeof e.auth === 'object') op['x-permission'] = e.auth.permission;
  if (e.stepUp) {
    notes.push('Step-up: from a web session of an account with a second factor, it needs that factor verified within `SERVICE_MFA_STEP_UP_MINUTES` (`POST /api/auth/step-up`), else 403 `step_up_required`.');
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
  if (parameters.length) op.parameters = parameters;

  if (e.body || e.bodyMode === 'raw') {
    const contentType = e.bodyMode === 'raw' ? (e.bodyContentType ?? 'application/json') : 'application/json';
    const schema = e.body ? joiToJsonSchema(e.body) : {};
    const required = e.bodyMode === 'raw' || (Array.isArray(schema.required) && schema.required.length > 0) || (typeof schema.minProperties === 'number' && schema.minProperties > 0);
    op.requestBody = { required, content: { [contentType]: { schema } } };
  }

  const responses: Record<string, unknown> = {};
  const given = e.responses ?? {};
  for (const [status, doc] of Object.entries(given)) responses[status] = responseObject(doc, Number(status));
  if (!Object.keys(given).some((s) => Number(s) < 300)) responses['200'] = { description: 'OK' };
  if ((e.params || e.query || e.body) && !responses['400']) responses['400'] = errorRef('validation_failed: the field named in details is invalid');
  if (e.auth !== 'none' && e.auth !== 'optional' && !responses['401']) responses['401'] = errorRef('unauthorized: no valid credential');
  if (typeof e.auth === 'object' && !responses['403']) responses['403'] = errorRef(`forbidden: the caller lacks ${e.auth.permission}${e.stepUp ? '; or step_up_required: verify the second factor again' : ''}`);
  op.responses = responses;
  op.security = securityOf(e.auth);
  return op;
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
  const visible = endpoints.filter((e) => !e.hidden).slice().sort((a, b) => a.fullPath.localeCompare(b.fullPath));
  for (const e of visible) {
    const { path, names } = openApiPath(e.fullPath);
    paths[path] ??= {};
    paths[path]![e.method.toLowerCase()] = operation(e, names);
  }
  const used = new Set(visible.map((e) => e.tag));
  return {
    openapi: '3.1.0',
    info: { title: info.title, version: info.version, ...(info.description ? { description: info.description } : {}) },
    // relative: "Try it out" calls the origin the document was loaded from
    servers: [{ url: '/' }],
    tags: [...TAGS.filter((t) => used.has(t.name)), ...[...used].filter((t) => !TAGS.some((x) => x.name === t)).map((name) => ({ name }))],
    paths,
    components: {
      securitySchemes: {
        ApiKeyAuth: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'The system API key or a per-user API key' },
        bearerAuth: { type: 'http', scheme: 'bearer', description: 'An API key or a web-session token as a Bearer token' },
        basicAuth: { type: 'http', scheme: 'basic', description: 'Username and password of a local account' },
        cookieAuth: { type: 'apiKey', in: 'cookie', name: info.sessionCookie, description: 'The UI session cookie set by the login page (unsafe methods need an allowed Origin)' },
      },
      schemas: { Error: errorSchema },
    },
  };
}
