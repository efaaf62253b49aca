import Joi from 'joi';

/**
 * The answers of the registry's own routes under /api/socket (src/sockets/component.ts), as
 * the API document lists them: what provider:list, mounts:check and mounts:repair resolve to.
 */

const MOUNT_ERRORS = ['not_managed', 'not_found', 'not_a_directory', 'not_writable', 'invalid_path', 'inaccessible'] as const;

/** One directory as mounts:check found it (MountStatus of src/sockets/mount-guardian.ts). */
const mountStatus = Joi.object({
  exists: Joi.boolean().allow(null).description('null when the path was not inspected (not managed, invalid)'),
  writable: Joi.boolean().allow(null),
  is_mount_point: Joi.boolean().allow(null),
  owner_uid: Joi.number().integer().min(0).allow(null),
  mode: Joi.string()
    .pattern(/^[0-7]{4}$/)
    .allow(null)
    .description('four octal digits, e.g. "0755"'),
  error: Joi.string()
    .valid(...MOUNT_ERRORS)
    .allow(null)
    .description('null when healthy'),
});

/** Present when the caller administers no host service: owners, modes and socket paths are then hidden (null or empty). */
const hostFactsHidden = Joi.boolean().valid(true).optional().description('the caller holds no socket permission: owners, modes and socket paths are hidden');

export const mountCheckResult = Joi.object({
  healthy: Joi.boolean().description('every path exists, is a directory and is writable'),
  mounts: Joi.object().pattern(Joi.string(), mountStatus).description('{<path>: its status}, for each path asked'),
  host_facts_hidden: hostFactsHidden,
});

/** A provider as provider:list shows it (ProviderListEntry of src/sockets/registry.ts). */
const providerEntry = Joi.object({
  name: Joi.string(),
  socket_path: Joi.string(),
  available: Joi.boolean(),
  reason: Joi.string()
    .allow(null)
    .description('why it is unavailable ("not available" with host_facts_hidden: the reason names sockets and paths); null when available'),
  capabilities: Joi.object({
    can_verify_mounts: Joi.boolean(),
    can_repair_permissions: Joi.boolean(),
    can_spawn: Joi.boolean(),
    can_cleanup: Joi.boolean(),
    can_query_mounts: Joi.boolean(),
  }),
  plugin: Joi.string().allow(null).description('the plugin that registered it; null for the core'),
});

export const providerListResult = Joi.object({
  providers: Joi.array().items(providerEntry),
  available: Joi.array().items(Joi.string()).description('the names of the available ones'),
  total: Joi.number().integer().min(0),
  instance: Joi.string().description('the instance that answered: each lists the providers of its own host'),
  host_facts_hidden: hostFactsHidden,
});

/** RepairResult of src/sockets/mount-guardian.ts. */
export const repairResult = Joi.object({
  status: Joi.string().valid('repaired'),
  target_dir: Joi.string().description('the directory repaired, symlinks resolved'),
  changed: Joi.number().integer().min(0).description('entries whose mode or owner changed'),
  failed: Joi.number().integer().min(0).description('entries that could not be changed'),
  skipped: Joi.number().integer().min(0).description('entries left alone on purpose: private files, files with several hard links, the data dir'),
});
