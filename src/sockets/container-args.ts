/**
 * The argument schemas of the container provider's operations (container-provider.ts): those
 * without arguments, resolve_mounts, and the ones that depend on the runner prefix.
 */
import Joi from 'joi';
import { absolutePath, MAX_AGE_MINUTES, prefixSchema, spawnSchema } from './container-shapes.js';

/** the operations that take no arguments */
export const NO_ARGS = Joi.object({});

/** one target or several (a query string repeats `targets`, or gives one) */
export const RESOLVE_MOUNTS_ARGS = Joi.object({
  targets: Joi.array().items(absolutePath).single().min(1).max(64).required().description('paths inside this container (repeat the parameter for several)'),
});

/**
 * The argument schemas that depend on the runner prefix (SERVICE_RUNNER_PREFIX), made once per
 * prefix: operations() is asked at every request, and the services of a process share them (and
 * their conversion into the API document).
 */
const argsByPrefix = new Map<string, { runners: Joi.ObjectSchema; cleanup: Joi.ObjectSchema; spawn: Joi.ObjectSchema }>();
export function argsFor(runnerPrefix: string) {
  let args = argsByPrefix.get(runnerPrefix);
  if (!args) {
    const prefix = prefixSchema.default(runnerPrefix).description('name prefix of the runner containers; default SERVICE_RUNNER_PREFIX');
    const cleanup = Joi.object({
      prefix,
      max_age_minutes: Joi.number().min(0).max(MAX_AGE_MINUTES).default(60).description('only containers older than this'),
      dry_run: Joi.boolean().default(false).description('list what would be removed, remove nothing'),
    });
    argsByPrefix.set(runnerPrefix, (args = { runners: Joi.object({ prefix }), cleanup, spawn: spawnSchema(runnerPrefix) }));
  }
  return args;
}
