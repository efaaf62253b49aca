import { callerOf } from '../iam/routes/caller.js';
import type Router from '@koa/router';
import Joi from 'joi';
import type { Context, Next } from 'koa';
import { ApiRouter } from '../http/api.js';
import { unavailable } from '../http/errors.js';
import { PLUGIN_ID_MAX, SETTING_KEY } from './manifest.js';
import { pluginSettingView, pluginView } from './schemas.js';
import { PluginConflictError, type PluginHost } from './host.js';
import { settingsView } from './settings.js';

const pluginListView = Joi.object({ plugins: Joi.array().items(pluginView) });
const pluginSettingsView = Joi.object({ plugin: Joi.string(), settings: Joi.array().items(pluginSettingView) });
const restartedPluginView = Joi.object({ plugin: pluginView, settings: Joi.array().items(pluginSettingView) });

/**
 * Administration of plugins [feature:admin.plugins]: list, enable, disable, settings.
 * These paths are matched before the plugin dispatch, so a plugin cannot shadow them.
 */

interface IdParams {
  id: string;
}

const idParams = Joi.object<IdParams, true>({
  // failed plugins may be keyed by their folder name (`name~2` for a duplicate)
  id: Joi.string()
    .max(PLUGIN_ID_MAX + 8)
    .pattern(/^[A-Za-z0-9._~-]+$/)
    .required()
    .description('the plugin id'),
});

/** key -> value; null removes the stored value */
type SettingsBody = Record<string, string | null>;

const settingsBody = Joi.object<SettingsBody>()
  .pattern(Joi.string().pattern(SETTING_KEY, 'setting key'), Joi.string().allow('').max(4096).allow(null))
  .min(1)
  .description('{<key>: "value" | null}; null removes the stored value (the manifest default applies again)');

export function pluginAdminRoutes(host: PluginHost): Router {
  const api = new ApiRouter({ prefix: '/api/plugins', tag: 'plugins' });
  const ADMIN = { permission: 'feature:admin.plugins' };

  // the host's not-found and conflict errors are DomainErrors: the error middleware answers them
  const loaded = async (_ctx: Context, next: Next) => {
    if (!host.ready) throw unavailable('plugins are still loading', 5);
    await next();
  };
  const validManifest = (id: string) => {
    const m = host.manifestOf(id);
    if (!m) throw new PluginConflictError(`plugin ${id} has no valid manifest`);
    return m;
  };

  api.endpoint(
    {
      method: 'GET',
      path: '/',
      operationId: 'listPlugins',
      summary: 'List plugins with their manifest claims and state',
      auth: ADMIN,
      middleware: [loaded],
      responses: { 200: { description: 'the plugins', schema: pluginListView }, 503: 'plugins are still loading' },
    },
    () => ({ plugins: host.list() }),
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/:id/enable',
      operationId: 'enablePlugin',
      summary: 'Enable a plugin and run its setup (again, when it failed)',
      description: 'Answers the plugin after the attempt: `state` tells whether setup succeeded. Grants revoked by an administrator are not re-applied.',
      auth: ADMIN,
      params: idParams,
      middleware: [loaded],
      responses: { 200: { description: 'the plugin', schema: pluginView }, 404: 'no such plugin', 409: 'the manifest is invalid' },
    },
    (ctx, { params }) => host.enable(callerOf(ctx), params.id),
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/:id/disable',
      operationId: 'disablePlugin',
      summary: 'Disable a plugin: teardown, then its routes, bus subscriptions and providers go',
      auth: ADMIN,
      params: idParams,
      middleware: [loaded],
      responses: { 200: { description: 'the plugin', schema: pluginView }, 404: 'no such plugin' },
    },
    (ctx, { params }) => host.disable(callerOf(ctx), params.id),
  );

  api.endpoint(
    {
      method: 'GET',
      path: '/:id/settings',
      operationId: 'getPluginSettings',
      summary: 'The settings a plugin declares, where each value comes from (secret values are never shown)',
      auth: ADMIN,
      params: idParams,
      middleware: [loaded],
      responses: { 200: { description: 'the settings', schema: pluginSettingsView }, 404: 'no such plugin', 409: 'the manifest is invalid' },
    },
    async (_ctx, { params }) => ({ plugin: params.id, settings: settingsView(await host.settings.resolve(validManifest(params.id))) }),
  );

  api.endpoint(
    {
      method: 'PATCH',
      path: '/:id/settings',
      operationId: 'updatePluginSettings',
      summary: 'Store plugin settings (encrypted) and restart the plugin when it is enabled',
      description:
        "The settings as they would be after the change are checked against the plugin's own rules (its settingsSchema) before anything is stored: a value it would refuse is 400 naming the field, and the plugin keeps running as it was.",
      auth: ADMIN,
      params: idParams,
      body: settingsBody,
      middleware: [loaded],
      responses: {
        200: { description: 'the plugin after the restart and its settings', schema: restartedPluginView },
        400: 'validation_failed: a key the plugin does not declare, a value its rules refuse, or a secret not entered again when a setting it is sent to changed (details name each field)',
        403: 'forbidden: the caller lacks feature:admin.plugins; or the caller is not a superadmin (nor the system key) and the change includes a setting the manifest marks trusted_only, or one such a setting guards while it is set (details name the field)',
        404: 'no such plugin',
        409: 'the setting is set in the environment, or the manifest is invalid',
      },
    },
    async (ctx, { params, body }) => {
      const m = validManifest(params.id);
      const plugin = await host.updateSettings(callerOf(ctx), params.id, body);
      return { plugin, settings: settingsView(await host.settings.resolve(m)) };
    },
  );

  return api.routes();
}
