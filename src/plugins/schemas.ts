import Joi from 'joi';

/**
 * The answers of the plugin administration API (src/plugins/routes.ts), each shape once: the
 * API document names them as components (PluginView and PluginRole are the types the browser
 * reads, src/client/api-types.ts).
 */

const PLUGIN_STATES = ['loaded', 'degraded', 'failed', 'disabled'] as const;

/** A role a plugin's manifest declares (defaults filled: label, auto_map_groups). */
export const pluginRoleView = Joi.object({
  id: Joi.string(),
  label: Joi.string(),
  permissions: Joi.array().items(Joi.string()),
  auto_map_groups: Joi.array().items(Joi.string()),
}).id('PluginRole');

/** One plugin with its manifest's claims and its state (src/plugins/view.ts builds it). */
export const pluginView = Joi.object({
  id: Joi.string().description('the manifest id, or the folder name when the manifest has no usable id'),
  folder: Joi.string(),
  name: Joi.string().allow(null).description('null when the manifest is invalid'),
  version: Joi.string().allow(null),
  description: Joi.string().allow(null, ''),
  enabled: Joi.boolean(),
  state: Joi.string().valid(...PLUGIN_STATES),
  error: Joi.string().allow(null).description('why the plugin failed or is degraded'),
  permissions: Joi.object({ subscribe: Joi.array().items(Joi.string()), emit: Joi.array().items(Joi.string()) }),
  permissions_declared: Joi.array().items(Joi.object({ id: Joi.string(), description: Joi.string().allow('') })),
  roles: Joi.array().items(pluginRoleView),
  routes: Joi.array().items(Joi.object({ path: Joi.string(), label: Joi.string().allow('') })),
  socket_providers: Joi.object({
    provides: Joi.array().items(Joi.string()),
    uses: Joi.array().items(Joi.string()),
    registered: Joi.array().items(Joi.string()).description('the providers it registered and that are registered now'),
  }),
  auth_providers: Joi.array().items(Joi.string()),
  updated_at: Joi.string().isoDate(),
}).id('PluginView');

/** A setting a plugin declares, where its value comes from (src/plugins/settings.ts settingsView). */
export const pluginSettingView = Joi.object({
  key: Joi.string(),
  description: Joi.string().allow(''),
  secret: Joi.boolean(),
  value: Joi.string().allow(null, '').description('null for secret settings and unset ones'),
  configured: Joi.boolean(),
  source: Joi.string().valid('env', 'store', 'default', 'unset'),
  locked: Joi.boolean().description('set by SERVICE_PLUGIN_<ID>_<KEY>; the API cannot change it'),
}).id('PluginSettingView');
