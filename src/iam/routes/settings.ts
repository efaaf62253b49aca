import type Router from '@koa/router';
import Joi from 'joi';
import type { IamComponent } from '../component.js';
import { ApiRouter } from '../../http/api.js';
import { conflict } from '../../http/errors.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';

export const systemKeySchema = Joi.object({ key: Joi.string().trim().min(32).max(256).pattern(/^\S+$/).required().description('the new system key, at least 32 characters') });

const ADMIN = { permission: 'feature:admin.settings' } as const;
const LOCKED = 'the key is set by SERVICE_SYSTEM_API_KEY (locked)';

/** Settings of the IAM area: the system API key (stored encrypted; env-set = locked, 409). */
export function settingsRoutes(iam: IamComponent): Router {
  const api = new ApiRouter({ prefix: '/api/settings', tag: 'settings' });
  const assertUnlocked = () => {
    if (iam.systemKey.lockedByEnv) throw conflict('the system key is set by SERVICE_SYSTEM_API_KEY and cannot be changed here');
  };

  api.endpoint(
    {
      method: 'GET',
      path: '/system-api-key',
      summary: 'Is a system API key configured',
      auth: ADMIN,
      responses: { 200: { description: 'never the key itself', schema: Joi.object({ configured: Joi.boolean(), locked: Joi.boolean() }) } },
    },
    async () => ({ configured: await iam.systemKey.configured(), locked: iam.systemKey.lockedByEnv }),
  );

  api.endpoint(
    // the lock (409) is checked before the body (400): bodyMode manual
    { method: 'PUT', path: '/system-api-key', summary: 'Set or rotate the system API key', auth: ADMIN, body: systemKeySchema, bodyMode: 'manual', responses: { 204: 'stored encrypted', 409: LOCKED } },
    async (ctx) => {
      assertUnlocked();
      const { key } = validate(systemKeySchema, jsonBody(ctx));
      await iam.systemKey.set(key);
      ctx.log.info('system API key set');
      ctx.status = 204;
    },
  );

  api.endpoint({ method: 'DELETE', path: '/system-api-key', summary: 'Clear the system API key (disables it)', auth: ADMIN, responses: { 204: 'cleared', 409: LOCKED } }, async (ctx) => {
    assertUnlocked();
    await iam.systemKey.clear();
    ctx.log.info('system API key cleared');
    ctx.status = 204;
  });

  return api.router;
}
