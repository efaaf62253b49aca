import { expect } from 'chai';
import request from 'supertest';
import http from 'node:http';
import Joi from 'joi';
import { ApiRouter } from '../../src/http/api.js';
import { createHttpApp, mountRouters } from '../../src/http/app.js';
import { createLogger } from '../../src/log.js';
import type { ClientChannels } from '../../src/bus/channels.js';
import { operation } from '../../src/sockets/base-provider.js';

interface ItemParams {
  id: string;
}
interface ItemQuery {
  limit: number;
  since?: Date;
}
interface ItemBody {
  label: string;
  tags?: string[];
}

const params = Joi.object<ItemParams, true>({ id: Joi.string().max(8).required() });
const query = Joi.object<ItemQuery, true>({ limit: Joi.number().integer().min(1).default(10), since: Joi.date().iso() });
const body = Joi.object<ItemBody, true>({ label: Joi.string().required(), tags: Joi.array().items(Joi.string()) });

/**
 * What tsc checks (never called): a schema declares its type, the handler's input takes it, and
 * an untyped schema (`Joi.object({...})` is `ObjectSchema<any>`) does not compile.
 */
export function typeChecks(api: ApiRouter, channels: ClientChannels): void {
  api.endpoint({ method: 'POST', path: '/:id', summary: 'typed', auth: 'none', params, query, body }, (_ctx, input) => {
    const id: string = input.params.id;
    const limit: number = input.query.limit;
    const since: Date | undefined = input.query.since;
    const tags: string[] | undefined = input.body.tags;
    // @ts-expect-error not a key of the body
    void input.body.other;
    return { id, limit, since, tags };
  });
  // a body the handler reads itself is not given it
  api.endpoint({ method: 'PUT', path: '/', summary: 'manual', auth: 'none', body, bodyMode: 'manual' }, (_ctx, input) => {
    const none: undefined = input.body;
    return none;
  });
  // @ts-expect-error an untyped params schema
  api.endpoint({ method: 'GET', path: '/:id', summary: 'untyped', auth: 'none', params: Joi.object({ id: Joi.string() }) }, () => null);
  // @ts-expect-error an untyped query schema
  api.endpoint({ method: 'GET', path: '/', summary: 'untyped', auth: 'none', query: Joi.object({ limit: Joi.number() }) }, () => null);
  // @ts-expect-error an untyped body schema
  api.endpoint({ method: 'POST', path: '/', summary: 'untyped', auth: 'none', body: Joi.object({ label: Joi.string() }) }, () => null);

  // Joi.object<T, true>: the keys are exactly T's, each with a rule of its kind
  // @ts-expect-error a key of T left out
  Joi.object<ItemBody, true>({ label: Joi.string() });
  // @ts-expect-error a key T does not have
  Joi.object<ItemBody, true>({ label: Joi.string(), tags: Joi.array(), other: Joi.string() });
  // @ts-expect-error a rule of another kind
  Joi.object<ItemBody, true>({ label: Joi.number(), tags: Joi.array() });

  channels.frame({ event: 'x:typed', permission: null, schema: body, handle: (_s, payload) => void payload.label.trim() });
  // @ts-expect-error an untyped payload schema
  channels.frame({ event: 'x:untyped', permission: null, schema: Joi.object({ label: Joi.string() }), handle: () => undefined });

  operation({ schema: body, permission: null, run: async (args) => args.label.trim(), result: Joi.string() });
  // @ts-expect-error an untyped args schema
  operation({ schema: Joi.object({ label: Joi.string() }), permission: null, run: async () => null, result: Joi.any() });
}

describe('typed endpoint inputs', () => {
  it('hands the handler the validated, converted and defaulted input', async () => {
    const app = createHttpApp({ log: createLogger('silent'), state: { iamReady: true, bootComplete: true, bootError: null, stopping: false }, keys: ['k'] });
    const api = new ApiRouter({ prefix: '/api/items', tag: 'items' });
    api.endpoint({ method: 'POST', path: '/:id', summary: 'typed', auth: 'none', params, query, body }, (_ctx, { params: p, query: q, body: b }) => ({
      id: p.id,
      limit: q.limit,
      since: q.since ? q.since.getTime() : null,
      labels: b.label.length,
    }));
    mountRouters(app, [api.router]);
    const server = http.createServer(app.callback());
    const res = await request(server).post('/api/items/abc?since=2024-01-02T00:00:00Z').send({ label: 'four' }).expect(200);
    expect(res.body).to.deep.equal({ id: 'abc', limit: 10, since: Date.parse('2024-01-02T00:00:00Z'), labels: 4 });
    const bad = await request(server).post('/api/items/abc?limit=0').send({ label: 'x' }).expect(400);
    expect(bad.body.error.code).to.equal('validation_failed');
  });
});
