import type { Context } from 'koa';
import { html } from './html.js';
import type { PageDef } from './access.js';
import { appPage, htmlDocument, sendHtml, siteFooter } from './layout.js';

const TITLES: Record<number, string> = {
  400: 'Bad request',
  401: 'Sign-in needed',
  403: 'Request refused',
  404: 'Page not found',
  405: 'Not allowed here',
  413: 'Too large',
  429: 'Too many requests',
  500: 'Something went wrong',
  503: 'Not available right now',
};

/**
 * An error a browser asked for, as a page of the site (the API keeps the JSON error body):
 * what went wrong in words, the request id to quote, and a way back. A cross-origin refusal
 * names the address the service expects to be used at. Someone signed in keeps the top bar of
 * the other pages, with the shared page code behind it (error.ts: the bell, live toasts, Sign
 * out, which posts with fetch as on every page); anyone else gets the card of the login page.
 */
export function errorPage(
  ctx: Context,
  status: number,
  { code, message, details }: { code: string; message: string; details?: unknown },
  publicUrl: string,
): void {
  const title = TITLES[status] ?? (status >= 500 ? TITLES[500]! : TITLES[400]!);
  const crossOrigin = (details as { reason?: string } | undefined)?.reason === 'cross_origin';
  const explanation =
    status === 404
      ? html`<p>There is no page at <code>${ctx.path}</code>.</p>`
      : crossOrigin
        ? html`<p>The form was sent from a page at another address, so it was refused to protect your account. Open the service at <a href="${publicUrl}/">${publicUrl}</a> and try again.</p>`
        : status >= 500 && code === 'internal'
          ? html`<p>The service could not answer this request. Try again; if it keeps happening, give the request id below to an administrator.</p>`
          : html`<p>${message}</p>`;
  const footnote = html`<p class="note">Error ${status} · request id <code>${ctx.state.requestId}</code></p>
<p><a href="/">Go to the start page</a></p>`;
  const id = ctx.state.identity;
  if (id) {
    const page: PageDef = { key: 'error', path: ctx.path, title, anyOf: [], module: 'error.js', admin: false };
    sendHtml(ctx, appPage(id, page, html`<section class="panel">${explanation}${footnote}</section>`), { status });
    return;
  }
  sendHtml(
    ctx,
    htmlDocument({
      title,
      bodyClass: 'auth',
      body: html`<main class="card">
<a class="brand" href="/">service-core</a>
<h1>${title}</h1>
${explanation}
${footnote}
</main>
${siteFooter()}`,
    }),
    { status },
  );
}
