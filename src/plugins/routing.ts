import type Router from '@koa/router';
import type { Context, Middleware, Next } from 'koa';
import { requirePermission } from '../http/guards.js';
import type { Endpoint } from '../http/api.js';

const PLUGIN_PATH = /^\/api\/plugins\/([^/]+)(?:\/|$)/;
const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * The one dispatch middleware for every plugin route under /api/plugins/<id>/: a stopped
 * plugin's routes vanish at once (`dispatchOf` answers null). GET/HEAD/OPTIONS need
 * plugin:<id>:api:read, every other method plugin:<id>:api:write (global api:read / api:write
 * satisfy them).
 */
export function pluginRoutes(dispatchOf: (pluginId: string) => Middleware | null): Middleware {
  return async (ctx: Context, next: Next) => {
    const match = PLUGIN_PATH.exec(ctx.path);
    if (!match) return next();
    const id = match[1]!;
    const dispatch = dispatchOf(id);
    if (!dispatch) return next();
    const permission = `plugin:${id}:api:${READ_METHODS.has(ctx.method) ? 'read' : 'write'}`;
    await requirePermission(permission)(ctx, () => dispatch(ctx, next));
  };
}

/** A plugin's router as one middleware: its routes, then 405 / OPTIONS answers for its paths. */
export function routerDispatch(router: Router): Middleware {
  const routes = router.routes();
  const allowed = router.allowedMethods({ throw: false });
  return (koa, next) => routes(koa as any, () => allowed(koa as any, next)) as Promise<void>;
}

/**
 * A plugin's routes as the OpenAPI document lists them: path, method and the permission the
 * dispatch above asks for. A plugin describes no schemas, so none are claimed.
 */
export function routeEndpoints(pluginId: string, pluginName: string, router: Router): Endpoint[] {
  const out: Endpoint[] = [];
  for (const layer of router.stack) {
    if (typeof layer.path !== 'string') continue;
    for (const method of layer.methods) {
      if (method === 'HEAD' || method === 'OPTIONS') continue;
      const access = READ_METHODS.has(method) ? 'read' : 'write';
      out.push({
        method: method as Endpoint['method'],
        path: layer.path,
        fullPath: layer.path,
        tag: `plugin:${pluginId}`,
        summary: `${pluginName}: ${method} ${layer.path.slice(`/api/plugins/${pluginId}`.length) || '/'}`,
        description: `A route of the ${pluginName} plugin; its request and answer are the plugin's own (docs/plugins.md).`,
        auth: { permission: `plugin:${pluginId}:api:${access}` },
      });
    }
  }
  return out;
}
