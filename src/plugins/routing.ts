import type Router from '@koa/router';
import type { Context, Middleware, Next } from 'koa';
import { requirePermission } from '../auth/guards.js';

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
