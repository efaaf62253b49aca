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
import { ldapWarnings } from '../providers/ldap-warnings.js';
import { ldapTestEndpoints, ldapWarningView } from './auth-settings-ldap.js';

/** One field of the settings (AuthSettingView of src/client/api-types.ts). */
const authSettingView = Joi.object({
  label: Joi.string().description('how the Authentication page shows it'),
  kind: Joi.string().valid('string', 'secret', 'boolean', 'list', 'mapping'),
  value: Joi.alternatives()
    .try(Joi.string(), Joi.number(), Joi.boolean(), Joi.array().items(Joi.string()), Joi.object().pattern(Joi.string(), Joi.array().items(Joi.string())))
    .allow(null)
    .description(
      'as `kind` says: a string (or a number, or `auto` or a boolean, for the fields that take one), a boolean, a list, a mapping of names to lists of groups; a secret answers its mask; null: not set',
    ),
  source: Joi.string().valid('env', 'store', 'default'),
  locked: Joi.boolean().description('set in the environment: not changeable here'),
  secret: Joi.boolean(),
  configured: Joi.boolean(),
}).id('AuthSettingView');

/** GET and PATCH /api/settings/auth: every field by its API name, and the provider chain built from them. */
const authSettingsView = Joi.object({
  settings: Joi.object().pattern(Joi.string(), authSettingView),
  chain: Joi.array().items(
    Joi.object({
      id: Joi.string(),
      kind: Joi.string().valid('credentials', 'redirect'),
      label: Joi.string(),
      source: Joi.string().valid('config', 'plugin'),
      plugin: Joi.string().allow(null).description('the plugin that registered it'),
    }),
  ),
  warnings: Joi.array()
    .items(ldapWarningView)
    .description(
      "settings that leave the directory's traffic open: certificate checks off (ldap_tls_verify), a plain ldap:// server without StartTLS (ldap_url)",
    ),
}).id('AuthSettings');

/** GET|PATCH /api/settings/auth: the login providers' settings, and the chain they build. */
export function authSettingsRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ tag: 'auth' });
  const ADMIN = { permission: 'feature:admin.settings' };
  const settingsView = () => ({
    settings: auth.authSettings.view(),
    chain: auth.chain
      .entries()
      .map((e: ChainEntry) => ({ id: e.provider.id, kind: e.provider.kind, label: e.provider.label, source: e.source, plugin: e.plugin })),
    warnings: ldapWarnings(auth.authSettings.current().ldap),
  });

  api.endpoint(
    {
      method: 'GET',
      path: '/api/settings/auth',
      operationId: 'getAuthSettings',
      tag: 'settings',
      summary: 'Authentication provider settings (secrets masked, env-set fields locked)',
      auth: ADMIN,
      responses: { 200: { description: 'every field with its source and lock, and the built chain', schema: authSettingsView } },
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
      operationId: 'updateAuthSettings',
      tag: 'settings',
      summary: 'Change authentication provider settings (rebuilds the provider chain)',
      description:
        'null removes a stored value; a secret sent back as its mask keeps its value. An env-set field is 409. While the default groups or a group mapping name a group that reaches the host (before or after the change), only a superadmin changes these settings (403).',
      auth: ADMIN,
      stepUp: true,
      body: patchSchema,
      // 409 for a locked field comes before validation of its value
      bodyMode: 'manual',
      responses: {
        200: { description: 'the new settings', schema: authSettingsView },
        403: 'the caller lacks feature:admin.settings; or the default groups or a group mapping hand out host access and the caller is not a superadmin; or they newly hand out a group with a permission the caller does not hold themself',
        409: 'conflict: a field is set in the environment (`details.locked` names them)',
      },
    },
    async (ctx) => {
      noStore(ctx);
      const body = jsonBody(ctx);
      if (body && typeof body === 'object' && !Array.isArray(body)) auth.authSettings.assertUnlocked(Object.keys(body));
      const patch = validate(patchSchema, body);
      const changes = await changeAuthSettings(
        { settings: auth.authSettings, store: auth.iam.store, local: auth.local, log: ctx.log, commands: auth.iam.commands },
        actor(ctx),
        patch,
      );
      auth.rebuildChain();
      // every other instance rebuilds its chain too
      auth.iam.bus.emit('auth:settings_changed', {});
      ctx.log.info({ fields: Object.keys(changes) }, 'auth settings changed; provider chain rebuilt');
      return settingsView();
    },
  );

  ldapTestEndpoints(api, auth);
  return api.router;
}
