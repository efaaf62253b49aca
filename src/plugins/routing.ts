import type Router from '@koa/router';
import type { RouterContext } from '@koa/router';
import type { Context, Middleware, Next } from 'koa';
import { requirePermission } from '../http/guards.js';
import { endpointsOf, type Endpoint } from '../http/api.js';
import { setRequestLogger } from '../http/app.js';
import type { Logger } from '../log.js';

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

/**
 * A plugin's router as one middleware: its routes, then 405 / OPTIONS answers for its paths. The
 * request's lines go to the plugin's logger (which conceals its secret settings), a failure's too.
 */
export function routerDispatch(router: Router, log: Logger): Middleware {
  const routes = router.routes();
  const allowed = router.allowedMethods({ throw: false });
  // the router's middleware sets ctx.params and ctx.router itself; its types ask for them beforehand
  return (koa, next) => {
    const ctx = koa as RouterContext;
    setRequestLogger(ctx, log);
    return routes(ctx, () => allowed(ctx, next)) as Promise<void>;
  };
}

/** The permission of each guard made by ctx.requirePermission, so the document can name it. */
const routeGuards = new WeakMap<Middleware, string>();

/** A route's own guard (ctx.requirePermission): what it checks is readable by routeEndpoints. */
export function routeGuard(permission: string): Middleware {
  const guard = requirePermission(permission) as Middleware;
  routeGuards.set(guard, permission);
  return guard;
}

/**
 * A plugin's routes as the OpenAPI document lists them. A route declared with ctx.endpoint
 * brings its own definition (input, answers, its further permission); a plain one of
 * ctx.router is listed with the guards found on it and an answer it does not describe. Either
 * way the permission documented is what a caller needs beyond the dispatch's
 * plugin:<id>:api:read / write, or that one when the route asks nothing more.
 */
export function routeEndpoints(pluginId: string, pluginName: string, router: Router): Endpoint[] {
  const declared = new Map(endpointsOf(router).map((e) => [`${e.method} ${e.fullPath}`, e]));
  const out: Endpoint[] = [];
  for (const layer of router.stack) {
    if (typeof layer.path !== 'string') continue;
    for (const method of layer.methods) {
      if (method === 'HEAD' || method === 'OPTIONS') continue;
      const dispatch = `plugin:${pluginId}:api:${READ_METHODS.has(method) ? 'read' : 'write'}`;
      const def = declared.get(`${method} ${layer.path}`);
      const own = def ? (typeof def.auth === 'object' ? [def.auth.permission] : []) : layer.stack.flatMap((mw) => routeGuards.get(mw as Middleware) ?? []);
      const permission = own.length ? own[own.length - 1]! : dispatch;
      const needs = [dispatch, ...own];
      const base = {
        method: method as Endpoint['method'],
        path: layer.path,
        fullPath: layer.path,
        tag: `plugin:${pluginId}`,
        auth: { permission },
      };
      const forbidden: Record<number, string> = own.length
        ? { 403: `forbidden: the caller lacks one of ${needs.join(', ')} (details.permission names it)` }
        : {};
      if (def) {
        const said = own.length ? `Besides ${dispatch} (the plugin dispatch), it needs the permission below.` : undefined;
        out.push({
          ...def,
          ...base,
          description: [def.description, said].filter(Boolean).join('\n\n') || undefined,
          responses: { ...forbidden, ...def.responses },
        });
        continue;
      }
      out.push({
        ...base,
        summary: `${pluginName}: ${method} ${layer.path.slice(`/api/plugins/${pluginId}`.length) || '/'}`,
        description: `A route of the ${pluginName} plugin that does not describe its request and answer (routes made with ctx.endpoint do; docs/plugins.md).${own.length ? ` Besides ${dispatch} (the plugin dispatch), it needs the permission below.` : ''}`,
        responses: {
          ...forbidden,
          default: {
            description: "the plugin's answer (any status and content), not described",
            contentType: '*/*',
            schema: { description: 'the route does not describe its answer' },
          },
        },
      });
    }
  }
  return out;
}
