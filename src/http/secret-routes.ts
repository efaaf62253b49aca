import type Router from '@koa/router';
import type { Context } from 'koa';
import Joi from 'joi';
import { ApiRouter } from './api.js';
import { conflict } from './errors.js';
import { jsonBody } from './body.js';
import { validate } from './validate.js';
import type { SettingDef } from '../settings-table.js';

/** A secret kept encrypted in the settings store, unless the environment sets it (then locked). */
export interface LockableSecret<A> {
  readonly lockedByEnv: boolean;
  configured(): Promise<boolean>;
  /** by `actor` (the route's caller, the CLI): the writer judges and records the change */
  set(actor: A, value: string): Promise<void>;
  clear(actor: A): Promise<void>;
}

export interface SecretRoutesOptions<A> {
  /** e.g. /api/settings/system-api-key */
  prefix: string;
  /** what it is, in messages and the API docs: "system API key" */
  what: string;
  /** its row of the settings table: the variable that locks it and the value's rule */
  setting: SettingDef;
  /** the body field of PUT */
  field: string;
  /** what clearing it does, for the API docs */
  clearing: string;
  secret: LockableSecret<A>;
  /** the caller as the secret's writer takes it (the area's actor of the request) */
  actorOf(ctx: Context): A;
  /** who the secret's writer refuses beyond the route's permission, for the API docs: "not a superadmin or the system key" */
  refusal?: string;
  /** setting or clearing it needs a fresh second factor (step-up) */
  stepUp?: boolean;
}

/** GET of every lockable secret: whether it is set, and whether the environment sets it. */
export const secretStatusView = Joi.object({
  configured: Joi.boolean().description('a value is set (in the environment or stored)'),
  locked: Joi.boolean().description('set in the environment: PUT and DELETE answer 409'),
}).id('SecretStatus');

/** `{ [field]: the new value }` (the field's name is the route's). */
type PutBody = Record<string, string>;

/** The body of PUT, made once per setting, field and name: every service's routes share it (and its conversion into the API document). */
const putBodies = new WeakMap<SettingDef, Map<string, Joi.ObjectSchema<PutBody>>>();
function putBody(o: Pick<SecretRoutesOptions<unknown>, 'setting' | 'field' | 'what'>): Joi.ObjectSchema<PutBody> {
  let bySetting = putBodies.get(o.setting);
  if (!bySetting) putBodies.set(o.setting, (bySetting = new Map()));
  const key = `${o.field}\n${o.what}`;
  let body = bySetting.get(key);
  if (!body) bySetting.set(key, (body = Joi.object<PutBody>({ [o.field]: o.setting.rule!.required().description(`the new ${o.what}`) })));
  return body;
}

/**
 * GET (configured? locked?), PUT (set or rotate) and DELETE (clear) of one env-lockable secret,
 * needing feature:admin.settings: set in the environment, PUT and DELETE answer 409 before
 * looking at the body. The value itself is never answered.
 */
export function lockableSecretRoutes<A>(o: SecretRoutesOptions<A>): Router {
  const api = new ApiRouter({ prefix: o.prefix, tag: 'settings' });
  const ADMIN = { permission: 'feature:admin.settings' };
  const LOCKED = `the ${o.what} is set by ${o.setting.env} (locked)`;
  const body = putBody(o);
  // named after what it is: getSystemApiKey, setGithubWebhookSecret, clearWebhookSecret
  const noun = o.what.replace(/\w+/g, (w) => w[0]!.toUpperCase() + w.slice(1).toLowerCase()).replace(/\W+/g, '');
  const unlocked = () => {
    if (o.secret.lockedByEnv) throw conflict(`the ${o.what} is set by ${o.setting.env} and cannot be changed here`);
  };
  // the permission and the route's own refusal (the document adds step-up and what refuses any route)
  const refused = `the caller lacks ${ADMIN.permission}${o.refusal ? `, or is ${o.refusal}` : ''}`;
  api.endpoint(
    {
      method: 'GET',
      path: '/',
      operationId: `get${noun}`,
      summary: `Is a ${o.what} configured`,
      auth: ADMIN,
      responses: { 200: { description: 'never the value itself', schema: secretStatusView } },
    },
    async () => ({ configured: await o.secret.configured(), locked: o.secret.lockedByEnv }),
  );
  // the lock (409) is checked before the body (400): bodyMode manual
  api.endpoint(
    {
      method: 'PUT',
      path: '/',
      operationId: `set${noun}`,
      summary: `Set or rotate the ${o.what}`,
      auth: ADMIN,
      body,
      bodyMode: 'manual',
      stepUp: o.stepUp,
      responses: { 204: 'stored encrypted', 403: refused, 409: LOCKED },
    },
    async (ctx) => {
      unlocked();
      const value = validate(body, jsonBody(ctx))[o.field]!;
      await o.secret.set(o.actorOf(ctx), value);
      ctx.log.info(`${o.what} set`);
      ctx.status = 204;
    },
  );
  api.endpoint(
    {
      method: 'DELETE',
      path: '/',
      operationId: `clear${noun}`,
      summary: `Clear the ${o.what} (${o.clearing})`,
      auth: ADMIN,
      stepUp: o.stepUp,
      responses: { 204: 'cleared', 403: refused, 409: LOCKED },
    },
    async (ctx) => {
      unlocked();
      await o.secret.clear(o.actorOf(ctx));
      ctx.log.info(`${o.what} cleared`);
      ctx.status = 204;
    },
  );
  return api.router;
}
