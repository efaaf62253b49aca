import Router from '@koa/router';
import type Koa from 'koa';
import type { Context, Next } from 'koa';
import type { AuthComponent } from '../auth/component.js';
import { checkOrigin, logout } from '../auth/sessions.js';
import { SESSION_COOKIE } from '../auth/web-session.js';
import { collectEndpoints, type Endpoint } from '../http/api.js';
import { buildOpenApi } from '../http/openapi.js';
import { VERSION } from '../version.js';
import { ADMIN_INDEX, allowedPages, DOCS_PAGE, PAGES, pageAllowed, type PageDef } from './access.js';
import { appPage, forbiddenPage, sendHtml, withoutData } from './layout.js';
import {
  accountContent,
  auditContent,
  authenticationContent,
  dashboardContent,
  docsContent,
  groupsContent,
  integrationsContent,
  pluginsContent,
  usersContent,
} from './pages.js';
import { serveStatic } from './static.js';
import { hostsContent } from './pages-hosts.js';
import { loginPageRoutes } from './login.js';
import { html, type SafeHtml } from './html.js';
import type { User } from '../iam/store.js';

/**
 * The web UI: the signed-in pages (each behind its permission, enforced here), sign out, the
 * OpenAPI document, Swagger UI at /docs and the static assets. docs/web.md describes them.
 */

/** Swagger UI's stylesheet (before ours, which adjusts it) and its bundle, which docs.js (a module, so run after it) starts. */
const DOCS_HEAD = html`<link rel="stylesheet" href="/static/swagger/swagger-ui.css">
<script src="/static/swagger/swagger-ui-bundle.js" defer></script>`;

/**
 * Routes that come and go (plugins', socket provider operations'), each source with a version
 * that changes when they do.
 */
export type ExtraEndpoints = () => Array<{ version: number; endpoints: Endpoint[] }>;

const documents = new WeakMap<Koa, { version: string; text: string }>();

/**
 * The OpenAPI document of every route mounted on this app and of `extra`, built again only
 * when `extra` changed.
 */
export function openApiDocument(app: Koa, extra?: ExtraEndpoints): string {
  const sources = extra?.() ?? [];
  const version = sources.map((s) => s.version).join('.');
  let doc = documents.get(app);
  if (!doc || doc.version !== version) {
    const text = JSON.stringify(
      buildOpenApi([...collectEndpoints(app).endpoints, ...sources.flatMap((s) => s.endpoints)], {
        title: 'service-core',
        version: VERSION,
        sessionCookie: SESSION_COOKIE,
        description:
          'Identity and access management, notifications and socket providers. Authorize with an API key (X-API-Key or Bearer), a session token (Bearer) or HTTP Basic; the browser session cookie works too. Before any operation is reached, the HTTP server itself answers 431 (no body) to request headers over 16 KiB, as it answers 405 to a method no route has: no operation lists them. The probes for operators, `GET /healthz` (liveness), `GET /readyz` (readiness, 503 naming the reason) and `GET /metrics` (Prometheus), are answered before routing too and are not operations here: docs/deploy.md describes them.',
      }),
    );
    doc = { version, text };
    documents.set(app, doc);
  }
  return doc.text;
}

/**
 * Unauthenticated -> the login page (coming back here after); not allowed -> a 403 page, except
 * the start page: someone who may not see the dashboard starts on their account page (where a
 * sign-in without `next` lands).
 */
function pageGuard(page: PageDef) {
  return async (ctx: Context, next: Next) => {
    const id = ctx.state.identity;
    if (!id) {
      ctx.set('Cache-Control', 'no-store');
      ctx.redirect(`/login?${new URLSearchParams({ next: ctx.originalUrl })}`);
      return;
    }
    if (!pageAllowed(id, page)) {
      if (page === PAGES.dashboard) {
        ctx.set('Cache-Control', 'no-store');
        ctx.redirect(PAGES.account.path);
      } else sendHtml(ctx, forbiddenPage(id, page), { status: 403, formPosts: true });
      return;
    }
    await next();
  };
}

export function webRoutes(auth: AuthComponent, extraEndpoints?: ExtraEndpoints): Router {
  const r = new Router();

  // the signed-in user's profile, from the resolver's cache (the identity was resolved through it)
  const userOf = async (id: { userId: string | null } | null) => (id?.userId ? ((await auth.iam.resolver.resolve(id.userId))?.user ?? null) : null);

  const page = (def: PageDef, content: (ctx: Context, user: User | null) => SafeHtml) => {
    r.get(def.path, pageGuard(def), async (ctx) => {
      const id = ctx.state.identity!;
      const user = await userOf(id);
      // opened by its route permission alone: one notice, and no module whose every call would answer 403
      if (def.data && !id.allows(def.data)) sendHtml(ctx, appPage(id, { ...def, module: '' }, withoutData(id, def), user?.displayName));
      else sendHtml(ctx, appPage(id, def, content(ctx, user), user?.displayName));
    });
  };

  page(PAGES.dashboard, (ctx) => dashboardContent(ctx.state.identity!));
  page(PAGES.account, (ctx, user) => accountContent(ctx.state.identity!, user));
  page(PAGES.users, () => usersContent());
  page(PAGES.groups, (ctx) => groupsContent(ctx.state.identity!));
  page(PAGES.authentication, () => authenticationContent());
  page(PAGES.integrations, (ctx) => integrationsContent(ctx.state.identity!));
  page(PAGES.plugins, () => pluginsContent());
  page(PAGES.audit, () => auditContent());
  page(PAGES.hosts, () => hostsContent());

  // the top bar's "Administration": the first administration page this identity may open
  r.get(ADMIN_INDEX.path, pageGuard(ADMIN_INDEX), (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    ctx.redirect(allowedPages(ctx.state.identity!).find((p) => p.admin)!.path);
  });

  /** Sign out without script: ends the session and lands on the login page. */
  r.post('/logout', async (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    checkOrigin(auth, ctx);
    await logout(auth, ctx);
    ctx.status = 303;
    ctx.redirect('/login?signed_out=1');
  });

  r.get('/openapi.json', (ctx) => {
    ctx.type = 'application/json';
    ctx.set('Cache-Control', 'no-cache');
    ctx.body = openApiDocument(ctx.app, extraEndpoints);
  });

  // Swagger UI runs under the same policy as every page: its own files only, no inline script.
  // Public; a signed-in visitor gets the top bar of the other pages.
  r.get('/docs', async (ctx) => {
    const id = ctx.state.identity ?? null;
    sendHtml(ctx, appPage(id, DOCS_PAGE, docsContent(), (await userOf(id))?.displayName, DOCS_HEAD));
  });

  r.get('/static/swagger/:name', (ctx) => {
    if (!serveStatic(ctx, String(ctx.params.name), 'swagger')) ctx.status = 404;
  });
  r.get('/static/:name', (ctx) => {
    if (!serveStatic(ctx, String(ctx.params.name))) ctx.status = 404;
  });
  r.get('/favicon.ico', (ctx) => {
    if (!serveStatic(ctx, 'favicon.svg')) ctx.status = 404;
  });

  return r;
}

/** Every router of the web UI, the login page included. */
export function webRouters(auth: AuthComponent, extraEndpoints?: ExtraEndpoints): Router[] {
  return [loginPageRoutes(auth), webRoutes(auth, extraEndpoints)];
}
