import Router from '@koa/router';
import Joi from 'joi';
import type { IamComponent } from '../component.js';
import { requirePermission } from '../../auth/guards.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';
import { conflict } from '../../http/errors.js';

const systemKeySchema = Joi.object({ key: Joi.string().trim().min(32).max(256).pattern(/^\S+$/).required() });

/** Settings of the IAM area: the system API key (stored encrypted; env-set = locked, 409). */
export function settingsRoutes(iam: IamComponent): Router {
  const r = new Router({ prefix: '/api/settings' });
  const admin = requirePermission('feature:admin.settings');

  r.get('/system-api-key', admin, async (ctx) => {
    ctx.body = { configured: await iam.systemKey.configured(), locked: iam.systemKey.lockedByEnv };
  });

  r.put('/system-api-key', admin, async (ctx) => {
    if (iam.systemKey.lockedByEnv) throw conflict('the system key is set by SERVICE_SYSTEM_API_KEY and cannot be changed here');
    const { key } = validate(systemKeySchema, jsonBody(ctx));
    await iam.systemKey.set(key);
    ctx.log.info('system API key set');
    ctx.status = 204;
  });

  r.delete('/system-api-key', admin, async (ctx) => {
    if (iam.systemKey.lockedByEnv) throw conflict('the system key is set by SERVICE_SYSTEM_API_KEY and cannot be changed here');
    await iam.systemKey.clear();
    ctx.log.info('system API key cleared');
    ctx.status = 204;
  });

  return r;
}
