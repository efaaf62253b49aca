import fs from 'node:fs';
import path from 'node:path';
import Joi from 'joi';
import { PERMISSION_ID, type CatalogEntry } from '../iam/permissions.js';
import type { FieldError } from '../http/errors.js';
import { fieldErrorsOf } from '../errors.js';
import { CLUSTER_EVENTS } from '../bus/events.js';

/**
 * plugin.json: the manifest every plugin folder carries. It is the plugin's whole claim on the
 * service: which bus topics it may use, which permissions, roles, UI routes, socket and auth
 * providers it brings, and which settings it reads. The plugin context enforces it at run time.
 */

export const PLUGIN_ID = /^[a-z0-9][a-z0-9._-]*$/;
/** the secrets namespace `plugins/<id>` must fit 64 characters */
export const PLUGIN_ID_MAX = 48;
const TOPIC = /^[a-z][a-z0-9_.-]*(:[a-z0-9_.-]+)+$/;
const CUSTOM_PERMISSION = /^[a-z0-9][a-z0-9_.-]*(:[a-z0-9_.-]+)*$/;
const ROUTE_PATH = /^\/[A-Za-z0-9_./-]*$/;
const PROVIDER_NAME = /^[a-z][a-z0-9_-]{0,62}$/;
const AUTH_PROVIDER_ID = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
export const SETTING_KEY = /^[a-z][a-z0-9_]{0,63}$/;
const ROLE_ID = /^[a-z0-9][a-z0-9_.-]{0,63}$/;
const GROUP_NAME = /^[A-Za-z0-9_.-]{1,128}$/;
const VERSION = /^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$/;

/**
 * Topics a plugin may never emit, even when listed: the boot sequence, IAM signals, the events
 * only their owner produces (a forged notification:outbound would reach every integration), and
 * every event the bus carries between instances (each instance signs what it publishes: a
 * plugin's forged one would reach them all).
 */
export const RESERVED_EMIT = new Set([
  ...Object.keys(CLUSTER_EVENTS),
  'db:connected',
  'iam:ready',
  'system:boot_complete',
  'system:boot_failed',
  'plugin:state_changed',
  'iam:permissions_changed',
  'iam:password_changed',
  'notification:outbound',
  'socket:response',
  // an audit event a plugin made up would reach administrators as the trail
  'audit:event',
]);
/** Topics a plugin may never subscribe to: their payloads carry other plugins' code or requests. */
export const RESERVED_SUBSCRIBE = new Set(['auth:register_provider', 'socket:provider:register', 'socket:request']);
const BUILTIN_AUTH_PROVIDERS = ['local', 'ldap', 'oidc'];
/** custom permission names that would shadow the ids the host registers itself */
const RESERVED_CUSTOM = /^(api|route)(:|$)/;

export interface ManifestRoleDef {
  id: string;
  label: string;
  permissions: string[];
  auto_map_groups: string[];
}

export interface ManifestSetting {
  description: string;
  default: string | null;
  /** never shown back (GET answers `configured` only), never logged */
  secret: boolean;
  /**
   * For a secret the plugin sends somewhere (a token in a header): the settings naming where.
   * Changing one of them through the API needs the secret typed again, so a stored secret never
   * follows a changed endpoint.
   */
  sent_to: string[];
  /**
   * Changed through the API by a trusted actor only (a superadmin, the system key): a setting that
   * widens what the plugin may reach. Absent: any administrator of plugins.
   */
  trusted_only?: boolean;
  /** For a trusted_only setting: while it is not at its default, these are the trusted actors' too (what it was allowed for). */
  guards?: string[];
}

export interface PluginManifest {
  id: string;
  name: string;
  version: string;
  description: string;
  entry: string;
  permissions: { subscribe: string[]; emit: string[] };
  roles: ManifestRoleDef[];
  permissions_declared: { id: string; description: string }[];
  routes: { path: string; label: string }[];
  socket_providers: { provides: string[]; uses: string[] };
  auth_providers: string[];
  settings: Record<string, ManifestSetting>;
  /** bus events of this plugin that reach ws clients, with who may see them */
  client_events: ManifestClientEvent[];
}

export interface ManifestClientEvent {
  /** `plugin:<id>:<name>` on the bus and on the wire; listed in permissions.emit */
  topic: string;
  /** the permission a client needs to receive it (default: plugin:<id>, the plugin's visibility) */
  permission: string;
}

const topicList = (reserved: Set<string>) =>
  Joi.array()
    .items(
      Joi.string()
        .max(128)
        .pattern(TOPIC, 'topic (e.g. notification:outbound)')
        .invalid(...reserved)
        .messages({ 'any.invalid': 'topic {{#value}} is reserved to the core' }),
    )
    .unique()
    .max(64)
    .default([]);

export const manifestSchema = Joi.object({
  id: Joi.string().max(PLUGIN_ID_MAX).pattern(PLUGIN_ID, 'plugin id (lower-case letters, digits, . _ -)').required(),
  name: Joi.string().trim().min(1).max(128).required(),
  version: Joi.string().max(64).pattern(VERSION, 'version (semver, e.g. 1.2.3)').required(),
  description: Joi.string().allow('').max(2000).default(''),
  entry: Joi.string()
    .min(1)
    .max(256)
    .pattern(/^[^/\\\0]/, 'relative path')
    .required(),
  permissions: Joi.object({
    subscribe: topicList(RESERVED_SUBSCRIBE),
    emit: topicList(RESERVED_EMIT),
  }).default({ subscribe: [], emit: [] }),
  roles: Joi.array()
    .items(
      Joi.object({
        id: Joi.string().pattern(ROLE_ID, 'role id').required(),
        label: Joi.string().trim().min(1).max(128).default(Joi.ref('id')),
        permissions: Joi.array().items(Joi.string().max(256)).min(1).max(100).unique().required(),
        auto_map_groups: Joi.array().items(Joi.string().pattern(GROUP_NAME, 'group name')).max(50).unique().default([]),
      }),
    )
    .unique('id')
    .max(50)
    .default([]),
  permissions_declared: Joi.array()
    .items(
      Joi.object({
        id: Joi.string()
          .max(128)
          .pattern(CUSTOM_PERMISSION, 'permission name (e.g. deliveries.read)')
          .pattern(RESERVED_CUSTOM, { name: 'name that is not api:* or route:*', invert: true })
          .required(),
        description: Joi.string().allow('').max(512).default(''),
      }),
    )
    .unique('id')
    .max(200)
    .default([]),
  routes: Joi.array()
    .items(
      Joi.object({
        path: Joi.string().max(200).pattern(ROUTE_PATH, 'route path (/a/b, no ":")').required(),
        label: Joi.string().trim().max(128).default(''),
      }),
    )
    .unique('path')
    .max(100)
    .default([]),
  socket_providers: Joi.object({
    provides: Joi.array().items(Joi.string().pattern(PROVIDER_NAME, 'provider name')).unique().max(20).default([]),
    uses: Joi.array().items(Joi.string().pattern(PROVIDER_NAME, 'provider name')).unique().max(20).default([]),
  }).default({ provides: [], uses: [] }),
  auth_providers: Joi.array()
    .items(
      Joi.string()
        .pattern(AUTH_PROVIDER_ID, 'auth provider id')
        .invalid(...BUILTIN_AUTH_PROVIDERS),
    )
    .unique()
    .max(10)
    .default([]),
  settings: Joi.object()
    .pattern(
      Joi.string().pattern(SETTING_KEY, 'setting key (lower_snake_case)'),
      Joi.object({
        description: Joi.string().allow('').max(512).default(''),
        default: Joi.string().allow('').max(4096).allow(null).default(null),
        secret: Joi.boolean().default(false),
        sent_to: Joi.array().items(Joi.string().pattern(SETTING_KEY)).max(10).default([]),
        trusted_only: Joi.boolean(),
        guards: Joi.array().items(Joi.string().pattern(SETTING_KEY)).max(10),
      }),
    )
    .max(50)
    .default({})
    .custom((settings: Record<string, ManifestSetting>, helpers) => {
      for (const [key, def] of Object.entries(settings)) {
        for (const target of def.sent_to)
          if (!(target in settings) || target === key)
            return helpers.message({ custom: `settings.${key}.sent_to names ${target}, which is not another setting` });
        if (def.sent_to.length && !def.secret) return helpers.message({ custom: `settings.${key}.sent_to is for secret settings` });
        for (const target of def.guards ?? [])
          if (!(target in settings) || target === key)
            return helpers.message({ custom: `settings.${key}.guards names ${target}, which is not another setting` });
        if (def.guards?.length && !def.trusted_only) return helpers.message({ custom: `settings.${key}.guards is for trusted_only settings` });
      }
      return settings;
    }),
  client_events: Joi.array()
    .items(
      Joi.object({
        topic: Joi.string().max(128).pattern(TOPIC, 'topic (plugin:<id>:<name>)').required(),
        permission: Joi.string().max(256).pattern(PERMISSION_ID, 'permission id'),
      }),
    )
    .unique('topic')
    .max(32)
    .default([]),
  // free-form metadata an author may add
  author: Joi.string().max(256),
  license: Joi.string().max(64),
  homepage: Joi.string().uri({ scheme: ['http', 'https'] }),
});

export class ManifestError extends Error {
  constructor(readonly details: FieldError[]) {
    super(`invalid manifest: ${details.map((d) => `${d.field}: ${d.message}`).join('; ')}`);
    this.name = 'ManifestError';
  }
}

/** Every permission id a plugin brings: the catalog entries IAM lists. */
export function pluginCatalog(m: PluginManifest): CatalogEntry[] {
  const p = `plugin:${m.id}`;
  return [
    { id: p, description: `see and use the ${m.name} plugin`, plugin: m.id },
    { id: `${p}:api:read`, description: `read through the ${m.name} plugin's API`, plugin: m.id },
    { id: `${p}:api:write`, description: `write through the ${m.name} plugin's API`, plugin: m.id },
    ...m.routes.map((r) => ({ id: `${p}:route:${r.path}`, description: r.label || `open ${r.path} of ${m.name}`, plugin: m.id })),
    ...m.permissions_declared.map((d) => ({ id: `${p}:${d.id}`, description: d.description, plugin: m.id })),
  ];
}

/**
 * The catalog entries of every plugin installed in `pluginsDir` whose plugin.json is valid,
 * read without loading any plugin (the CLI grants plugin permissions with the service stopped).
 */
export function installedCatalog(pluginsDir: string): CatalogEntry[] {
  let folders: string[];
  try {
    folders = fs.readdirSync(pluginsDir);
  } catch {
    return [];
  }
  return folders.flatMap((name) => {
    try {
      return pluginCatalog(parseManifest(JSON.parse(fs.readFileSync(path.join(pluginsDir, name, 'plugin.json'), 'utf8'))));
    } catch {
      return [];
    }
  });
}

/**
 * Validates a parsed plugin.json. Throws ManifestError naming every bad field. Rules beyond
 * the schema: a role grants only this plugin's own permission ids (a plugin must not hand out
 * core rights), and reserved topics cannot be claimed.
 */
export function parseManifest(raw: unknown): PluginManifest {
  const { error, value } = manifestSchema.validate(raw, { abortEarly: false, convert: false });
  if (error) throw new ManifestError(fieldErrorsOf(error, 'manifest'));
  const details: FieldError[] = [];
  const m = value as PluginManifest;
  const own = new Set(pluginCatalog(m).map((e) => e.id));
  m.roles.forEach((role, r) => {
    role.permissions.forEach((perm, i) => {
      if (!own.has(perm)) {
        details.push({
          field: `roles[${r}].permissions[${i}]`,
          message: `${perm} is not a permission of this plugin (plugin:${m.id}, plugin:${m.id}:api:read|write, its routes and permissions_declared)`,
        });
      }
    });
  });
  const both = m.socket_providers.provides.filter((p) => m.socket_providers.uses.includes(p));
  if (both.length) details.push({ field: 'socket_providers.uses', message: `${both.join(', ')} is already in provides` });
  // a plugin pushes only its own events, ones it may emit, to holders of one of its permissions
  m.client_events.forEach((e, i) => {
    e.permission ??= `plugin:${m.id}`;
    if (!e.topic.startsWith(`plugin:${m.id}:`)) details.push({ field: `client_events[${i}].topic`, message: `must start with plugin:${m.id}:` });
    else if (!m.permissions.emit.includes(e.topic)) details.push({ field: `client_events[${i}].topic`, message: `${e.topic} must be in permissions.emit` });
    if (!own.has(e.permission)) details.push({ field: `client_events[${i}].permission`, message: `${e.permission} is not a permission of this plugin` });
  });
  if (details.length) throw new ManifestError(details);
  return m;
}
