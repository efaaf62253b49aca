import type { Context } from 'koa';
import type { ApiIdentity } from '../auth/identity.js';
import { VERSION } from '../version.js';
import { html, type SafeHtml } from './html.js';
import { ADMIN_INDEX, ADMIN_PAGES, allowedPages, uiPermissions, type PageDef } from './access.js';

/**
 * The page shell every signed-in page shares: navigation (only the pages this identity may
 * open), the notification bell, sign out, the toast area; and the headers every page sends.
 */

/** Scripts only from this origin (no inline script, no eval); nothing may frame a page. */
export const PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "object-src 'none'",
].join('; ');

/**
 * Pages keep Referrer-Policy no-referrer (set for every answer in src/http/app.ts). A page whose
 * plain HTML form posts to us uses same-origin instead: under no-referrer a form post carries
 * "Origin: null", which the cookie CSRF check refuses (fetch() calls are not affected).
 */
export function sendHtml(ctx: Context, body: string | SafeHtml, opts: { status?: number; csp?: string; formPosts?: boolean } = {}): void {
  ctx.status = opts.status ?? 200;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Content-Security-Policy', opts.csp ?? PAGE_CSP);
  ctx.set('Cache-Control', 'no-store');
  ctx.set('Cross-Origin-Opener-Policy', 'same-origin');
  ctx.set('Referrer-Policy', opts.formPosts ? 'same-origin' : 'no-referrer');
  ctx.body = typeof body === 'string' ? body : body.value;
}

export function htmlDocument(opts: {
  title: string;
  body: SafeHtml;
  module?: string;
  bodyAttrs?: SafeHtml;
  bodyClass?: string;
  referrer?: string;
  head?: SafeHtml;
}): SafeHtml {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="${opts.referrer ?? 'no-referrer'}">
<title>${opts.title} · service-core</title>
<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
${opts.head ?? ''}
<link rel="stylesheet" href="/static/app.css">
${opts.module ? html`<script type="module" src="/static/${opts.module}"></script>` : ''}
</head>
<body class="${opts.bodyClass ?? 'app'}"${opts.bodyAttrs ?? ''}>
${opts.body}
</body>
</html>
`;
}

const BELL_ICON = html`<svg aria-hidden="true" viewBox="0 0 24 24" width="20" height="20"><path fill="currentColor" d="M12 22a2.5 2.5 0 0 0 2.5-2.5h-5A2.5 2.5 0 0 0 12 22Zm7-6V11a7 7 0 0 0-5.5-6.84V3.5a1.5 1.5 0 0 0-3 0v.66A7 7 0 0 0 5 11v5l-2 2v1h18v-1l-2-2Z"/></svg>`;
/** The unread count, linking to the dashboard's feed: only for those who may open it (live toasts come on every page). */
const BELL_LINK = html`<a class="bell" href="/#notifications" title="Notifications" aria-label="Notifications" data-bell>${BELL_ICON}<span class="badge" data-bell-count hidden>0</span></a>`;

/** The release under every page, so a report can say which one it was seen on. */
export function siteFooter(): SafeHtml {
  return html`<footer class="site-footer">service-core <span data-version>${VERSION}</span></footer>`;
}

/**
 * The top bar: brand, the pages this identity may open (the administration pages as one
 * "Administration" link, to the first of them it may open), the bell, who is signed in and sign
 * out (or a sign-in link on the public /docs). On a phone the navigation becomes a second row
 * that scrolls sideways inside the bar.
 */
function topBar(id: ApiIdentity | null, page: PageDef, pages: PageDef[], displayName?: string | null): SafeHtml {
  const current = (key: string) => (key === page.key ? html` aria-current="page"` : '');
  const main = pages.filter((p) => !p.admin);
  const admin = pages.some((p) => p.admin) ? html`<a href="${ADMIN_INDEX.path}"${page.admin ? html` aria-current="true"` : ''}>${ADMIN_INDEX.title}</a>` : '';
  return html`<header class="topbar">
<a class="brand" href="/">service-core</a>
<nav aria-label="Main">
${main.map((p) => html`<a href="${p.path}"${current(p.key)}>${p.title}</a>`)}
${admin}
<a href="/docs"${current('docs')}>API docs</a>
</nav>
<div class="who">
${
  id
    ? html`${pages.some((p) => p.key === 'dashboard') ? BELL_LINK : ''}
<span class="username" title="${id.username}">${displayName || id.username}</span>
<form method="post" action="/logout" class="inline"><button type="submit" class="link" data-logout>Sign out</button></form>`
    : html`<a href="/login?${new URLSearchParams({ next: page.path })}">Sign in</a>`
}
</div>
</header>`;
}

/**
 * An administration page's content, beside the list of the administration pages this identity
 * may open (above it on a phone, scrolling sideways like the top bar).
 */
function adminLayout(page: PageDef, pages: PageDef[], content: SafeHtml): SafeHtml {
  const links = pages.filter((p) => p.admin).map((p) => html`<a href="${p.path}"${p.key === page.key ? html` aria-current="page"` : ''}>${p.title}</a>`);
  return html`<div class="admin-layout">
<nav class="admin-nav" aria-label="${ADMIN_INDEX.title}">${links}</nav>
<div class="admin-main">
<h1>${page.title}</h1>
${content}
</div>
</div>`;
}

/** A page of the app: top bar, navigation, main content, footer, toasts. `id` is null only on the public /docs. */
export function appPage(id: ApiIdentity | null, page: PageDef, content: SafeHtml, displayName?: string | null, head?: SafeHtml): SafeHtml {
  const attrs = html` data-page="${page.key}" data-username="${id?.username ?? ''}" data-user-id="${id?.userId ?? ''}" data-permissions="${id ? uiPermissions(id).join(' ') : ''}"`;
  const pages = id ? allowedPages(id) : [];
  return htmlDocument({
    title: page.title,
    module: page.module,
    bodyAttrs: attrs,
    bodyClass: `app page-${page.key}${page.admin ? ' admin' : ''}`,
    head,
    body: html`${topBar(id, page, pages, displayName)}
<p class="conn" data-conn-state hidden>Live updates paused, reconnecting…</p>
<main id="main">
${
  page.admin
    ? adminLayout(page, pages, content)
    : html`<h1>${page.title}</h1>
${content}`
}
</main>
${siteFooter()}
<div class="toasts" data-toasts role="status" aria-live="polite"></div>`,
  });
}

/** `a`, `a` or `b`, `a`, `b` or `c`: each as code. */
const orList = (items: readonly string[]): SafeHtml =>
  html`${items.map((p, i) => html`${i === 0 ? '' : i === items.length - 1 ? ' or ' : ', '}<code>${p}</code>`)}`;

/**
 * A page opened by its route permission without the permission its data needs (PageDef.data):
 * said once, instead of panels that would each answer 403.
 */
export function withoutData(id: ApiIdentity, page: PageDef): SafeHtml {
  const opened = page.anyOf.find((p) => p.startsWith('route:') && id.allows(p));
  return html`<p class="note" data-without-data>You may open this page${opened ? html` (<code>${opened}</code>)` : ''}, but what it shows comes from the API, which needs <code>${page.data ?? ''}</code>. Ask an administrator for that permission.</p>`;
}

/** 403 for a signed-in identity that may not open the page (naming what would open it; for /admin, page by page). */
export function forbiddenPage(id: ApiIdentity, page: PageDef): SafeHtml {
  return htmlDocument({
    title: 'Access denied',
    bodyClass: 'auth',
    referrer: 'same-origin',
    body: html`<main class="card">
<h1>Access denied</h1>
${
  page === ADMIN_INDEX
    ? html`<p>You are signed in as <strong>${id.username}</strong>, but the administration pages each need a permission of their own:</p>
<ul>${ADMIN_PAGES.map((p) => html`<li>${p.title}: ${orList(p.anyOf)}</li>`)}</ul>`
    : html`<p>You are signed in as <strong>${id.username}</strong>, but the <em>${page.title}</em> page needs one of these permissions:</p>
<ul>${page.anyOf.map((p) => html`<li><code>${p}</code></li>`)}</ul>`
}
<p>Ask an administrator for access, or <a href="/">go to the start page</a>.</p>
<form method="post" action="/logout"><button type="submit">Sign in as someone else</button></form>
</main>
${siteFooter()}`,
  });
}
