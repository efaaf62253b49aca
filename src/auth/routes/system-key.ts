import type Router from '@koa/router';
import type { AuthComponent } from '../component.js';
import { lockableSecretRoutes } from '../../http/secret-routes.js';
import { setting } from '../../settings-table.js';
import { actor } from '../guards.js';

/** Settings of the IAM area: the system API key (stored encrypted; env-set = locked, 409). */
export function systemKeyRoutes(auth: AuthComponent): Router {
  return lockableSecretRoutes({
    prefix: '/api/settings/system-api-key',
    what: 'system API key',
    setting: setting('SERVICE_SYSTEM_API_KEY'),
    field: 'key',
    clearing: 'disables it',
    secret: auth.systemKey,
    actorOf: actor,
    // whoever holds the system key passes every check: its writer lets only a trusted actor set it
    refusal: 'not a superadmin or the system key',
    stepUp: true,
  });
}
