import type Router from '@koa/router';
import Joi from 'joi';
import type { AuthComponent } from '../component.js';
import type { ChainEntry } from '../chain.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';
import { ApiRouter } from '../../http/api.js';
import { patchSchema } from '../settings.js';
import { changeAuthSettings } from '../settings-change.js';
import { noStore } from '../sessions.js';
import { actor } from '../guards.js';

/** GET|PATCH /api/settings/auth: the login providers' settings, and the chain they build. */
export function authSettingsRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ tag: 'auth' });
  const ADMIN = { permission: 'feature:admin.settings' };
  const settingsView = () => ({
    settings: auth.authSettings.view(),
    chain: auth.chain.entries().map((e: ChainEntry) => ({ id: e.provider.id, kind: e.provider.kind, label: e.provider.label, source: e.source, plugin: e.plugin })),
  });
  const settingsResponse = Joi.object({
    settings: Joi.object().pattern(
      Joi.string(),
      Joi.object({ label: Joi.string(), kind: Joi.string().valid('string', 'secret', 'boolean', 'list', 'mapping'), value: Joi.any(), source: Joi.string().valid('env', 'store', 'default'), locked: Joi.boolean(), secret: Joi.boolean(), configured: Joi.boolean() }),
    ),
    chain: Joi.array().items(Joi.object({ id: Joi.string(), kind: Joi.string(), label: Joi.string(), source: Joi.string(), plugin: Joi.string().allow(null) })),
  });

  api.endpoint(
    {
      method: 'GET',
      path: '/api/settings/auth',
      tag: 'settings',
      summary: 'Authentication provider settings (secrets masked, env-set fields locked)',
      auth: ADMIN,
      responses: { 200: { description: 'every field with its source and lock, and the built chain', schema: settingsResponse } },
    },
    (ctx) => {
      noStore(ctx);
      return settingsView();
    },
  );

  api.endpoint(
    {
      method: 'PATCH',
      path: '/api/settings/auth',
      tag: 'settings',
      summary: 'Change authentication provider settings (rebuilds the provider chain)',
      description: 'null removes a stored value; a secret sent back as its mask keeps its value. An env-set field is 409. While the default groups or a group mapping name a group that reaches the host (before or after the change), only a superadmin changes these settings (403).',
      auth: ADMIN,
      stepUp: true,
      body: patchSchema,
      // 409 for a locked field comes before validation of its value
      bodyMode: 'manual',
      responses: { 200: { description: 'the new settings', schema: settingsResponse }, 403: 'hands out host access', 409: 'a field is set in the environment' },
    },
    async (ctx) => {
      noStore(ctx);
      const body = jsonBody(ctx);
      if (body && typeof body === 'object' && !Array.isArray(body)) auth.authSettings.assertUnlocked(Object.keys(body));
      const patch = validate(patchSchema, body) as Record<string, unknown>;
      const changes = await changeAuthSettings({ settings: auth.authSettings, store: auth.iam.store, local: auth.local, log: ctx.log, audit: auth.iam.audit }, actor(ctx), patch);
      auth.rebuildChain();
      // every other instance rebuilds its chain too
      auth.iam.bus.emit('auth:settings_changed', {});
      ctx.log.info({ fields: Object.keys(changes) }, 'auth settings changed; provider chain rebuilt');
      return settingsView();
    },
  );


  return api.router;
}
