import Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { AuthComponent } from '../auth/component.js';
import { checkOrigin, credentialsLogin, loginSchema, nextSchema, providerList, startCookieSession } from '../auth/sessions.js';
import { isRefusalReason, REFUSAL_TEXT } from '../auth/providers/refusal.js';
import { requestOrigin } from '../auth/authenticate.js';
import { formBody } from '../http/body.js';
import { HttpError } from '../http/errors.js';
import { validate } from '../http/validate.js';
import { html, type SafeHtml } from './html.js';
import { htmlDocument, siteFooter } from './layout.js';

/**
 * The server-rendered login page (GET /login): one credentials form for every
 * credentials provider of the chain (local and LDAP share it), one button per redirect provider,
 * and the message of `/login?error=<code>`. No scripts at all; the form posts to POST /login,
 * which answers with redirects only.
 */

/** The page's own policy: no scripts, styles only from here, the form only posts here. */
const CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

const MESSAGES: Record<string, string> = {
  invalid_credentials: 'Wrong username or password.',
  locked_out: 'Too many failed attempts.',
  rate_limited: 'Too many sign-in attempts from your network. Please wait a minute and try again.',
  account_disabled: 'This account is disabled.',
  state_mismatch: 'The sign-in attempt expired or was started in another browser. Please try again.',
  invalid_code: 'The sign-in link expired or was already used. Please sign in again.',
  idp_unreachable: 'The identity provider could not be reached. Please try again later.',
  idp_error: 'The identity provider refused the sign-in.',
  exchange_failed: 'The answer of the identity provider could not be verified.',
  nonce_mismatch: 'The answer of the identity provider could not be verified.',
  id_token_invalid: 'The answer of the identity provider could not be verified.',
  userinfo_failed: 'The identity provider did not tell who you are.',
  provider_unavailable: 'That sign-in method is not available.',
  unavailable: 'The service is starting. Please try again in a moment.',
  bad_request: 'The sign-in form was incomplete.',
};

const pageQuery = Joi.object({
  error: Joi.string().pattern(/^[a-z_]{1,40}$/),
  next: Joi.string().max(2048),
  retry_after: Joi.number().integer().min(1).max(3600),
  signed_out: Joi.valid('1'),
}).unknown(true);

/** The API's login body plus the form's `next`: one validation for both paths (NUL included). */
const formSchema = loginSchema.keys({ next: Joi.string().max(2048).allow('') }).unknown(true);

function safeNext(value: unknown): string {
  const { error, value: next } = nextSchema.validate(value);
  return !error && typeof next === 'string' ? next : '/';
}

function page(body: SafeHtml): string {
  // same-origin: the form posts to us, and under no-referrer its Origin would be "null" (sendHtml)
  return htmlDocument({ title: 'Sign in', referrer: 'same-origin', bodyClass: 'auth', body: html`<main class="card">
${body}
</main>
${siteFooter()}` }).value;
}

/**
 * The page opened at an address other than the public URL (127.0.0.1 rather than the public
 * name): password sign-in works here, but single sign-on returns to the public URL, so say so.
 */
function addressNote(publicUrl: string, requestOrigin: string | undefined, sso: boolean) {
  if (!requestOrigin || requestOrigin === new URL(publicUrl).origin) return '';
  return html`<p class="note" data-address-note>You opened this page at <code>${requestOrigin}</code>; the service's address is <code>${publicUrl}</code>.
${sso ? 'Single sign-on returns there, so use that address to sign in with it. ' : ''}<a href="${publicUrl}/login">Sign in at ${publicUrl}</a></p>`;
}

export function renderLoginPage(auth: AuthComponent, opts: { error?: string; next: string; retryAfter?: number; requestOrigin?: string; signedOut?: boolean }): string {
  const providers = auth.chain.ready ? providerList(auth) : [];
  const credentials = providers.filter((p) => p.kind === 'credentials');
  const redirects = providers.filter((p): p is typeof p & { start_url: string } => p.kind === 'redirect' && 'start_url' in p);
  let message: string | null = null;
  if (!auth.chain.ready) message = MESSAGES.unavailable!;
  else if (opts.error) message = MESSAGES[opts.error] ?? (isRefusalReason(opts.error) ? REFUSAL_TEXT[opts.error] : 'Sign-in failed. Please try again.');
  if (opts.error === 'locked_out' && opts.retryAfter) message = `Too many failed attempts. Try again in ${opts.retryAfter} seconds.`;
  const nextParam = opts.next !== '/' ? opts.next : null;
  const ssoHref = (startUrl: string) => {
    const u = new URL(startUrl);
    if (nextParam) u.searchParams.set('next', nextParam);
    return u.pathname + u.search;
  };

  return page(html`<h1>Sign in</h1>
${message ? html`<p class="error" role="alert">${message}</p>` : ''}
${opts.signedOut && !message ? html`<p class="form-msg ok" role="status">You are signed out.</p>` : ''}
${addressNote(auth.config.publicUrl, opts.requestOrigin, redirects.length > 0)}
${credentials.length
    ? html`<form method="post" action="/login">
<input type="hidden" name="next" value="${opts.next}">
<label for="username">Username</label>
<input id="username" name="username" type="text" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
<p class="note">${credentials.map((p) => p.label).join(' or ')}</p>
</form>`
    : ''}
${credentials.length && redirects.length ? html`<p class="or">or</p>` : ''}
${redirects.map((p) => html`<a class="sso" href="${ssoHref(p.start_url)}">Sign in with ${p.label}</a>`)}
${!credentials.length && !redirects.length && auth.chain.ready ? html`<p class="note">No sign-in method is configured.</p>` : ''}`);
}

function sendPage(ctx: Context, body: string, status = 200) {
  ctx.status = status;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set('Content-Security-Policy', CSP);
  ctx.set('Cache-Control', 'no-store');
  // a form posted under no-referrer carries "Origin: null", which the login CSRF check must
  // refuse; same-origin still sends no referrer to any other site
  ctx.set('Referrer-Policy', 'same-origin');
  ctx.body = body;
}

export function loginPageRoutes(auth: AuthComponent): Router {
  const r = new Router();

  r.get('/login', (ctx) => {
    const { value } = pageQuery.validate(ctx.query);
    const q = (value ?? {}) as { error?: string; next?: string; retry_after?: number; signed_out?: string };
    sendPage(ctx, renderLoginPage(auth, { error: q.error, next: safeNext(q.next), retryAfter: q.retry_after, requestOrigin: requestOrigin(ctx), signedOut: q.signed_out === '1' }));
  });

  /** The form's target: answers only with redirects (303), so a reload never re-posts a password. */
  r.post('/login', async (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    checkOrigin(auth, ctx);
    const form = formBody(ctx);
    const next = safeNext(form.next || '/');
    const back = (params: Record<string, string>) => {
      const q = new URLSearchParams(params);
      if (next !== '/') q.set('next', next);
      ctx.status = 303; // kept by ctx.redirect
      ctx.redirect(`/login?${q}`);
    };
    if (!auth.chain.ready) return back({ error: 'unavailable' });
    let value: { username: string; password: string };
    try {
      value = validate(formSchema, form);
    } catch (err) {
      if (err instanceof HttpError && err.status === 400) return back({ error: 'bad_request' });
      throw err;
    }
    const outcome = await credentialsLogin(auth, ctx, value.username, value.password, 'form');
    if (!outcome.ok) {
      return outcome.retryAfter > 0 ? back({ error: 'locked_out', retry_after: String(outcome.retryAfter) }) : back({ error: outcome.refusal ?? 'invalid_credentials' });
    }
    await startCookieSession(ctx, outcome.session.key_id);
    ctx.status = 303;
    ctx.redirect(next);
  });

  return r;
}
