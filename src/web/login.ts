import Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { AuthComponent } from '../auth/component.js';
import { checkOrigin, credentialsLogin, loginSchema, nextSchema, providerList, type LoginBody } from '../auth/sessions.js';
import { startCookieSession } from '../auth/complete-login.js';
import { isRefusalReason, REFUSAL_TEXT } from '../auth/providers/refusal.js';
import { passSecondStep, SECOND_STEP_COOKIE, toSecondStep, type SecondStepOutcome } from '../auth/complete-login.js';
import { handOverSession } from '../auth/routes/oidc.js';
import { secondStepOptions } from '../auth/routes/webauthn.js';
import { requestOrigin } from '../auth/authenticate.js';
import { formBody } from '../http/body.js';
import { HttpError } from '../http/errors.js';
import { validate } from '../http/validate.js';
import { html, type SafeHtml } from './html.js';
import { htmlDocument, siteFooter } from './layout.js';

/**
 * The server-rendered login page (GET /login): one credentials form for every
 * credentials provider of the chain (local and LDAP share it), one button per redirect provider,
 * a passkey button, and the message of `/login?error=<code>`. The forms work without script and
 * post to POST /login and POST /login/mfa, which answer with redirects only; the one script,
 * /static/login.js, adds the passkey ceremonies (src/web/browser/login.ts).
 */

/** The page's own policy: scripts and calls only from here (no inline script), the forms only post here. */
const CSP =
  "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

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
  second_step_expired: 'The second step expired. Please sign in again.',
};

/** Messages of the second step (/login/mfa?error=<code>). */
const SECOND_STEP_MESSAGES: Record<string, string> = {
  invalid_code: 'That code is not right, or it was used already. Try the next one.',
  passkey_failed: 'The passkey was not accepted. Try it again, or use a code.',
  locked_out: 'Too many wrong codes. Wait a minute and try again.',
  rate_limited: 'Too many sign-in attempts from your network. Please wait a minute and try again.',
};

const pageQuery = Joi.object({
  error: Joi.string().pattern(/^[a-z_]{1,40}$/),
  next: Joi.string().max(2048),
  retry_after: Joi.number().integer().min(1).max(3600),
  signed_out: Joi.valid('1'),
}).unknown(true);

/** The API's login body plus the form's `next`: one validation for both paths (NUL included). */
const formSchema = loginSchema.append<LoginBody & { next?: string }>({ next: Joi.string().max(2048).allow('') }).unknown(true);

function safeNext(value: unknown): string {
  const { error, value: next } = nextSchema.validate(value);
  return !error && typeof next === 'string' ? next : '/';
}

function page(body: SafeHtml): string {
  // same-origin: the form posts to us, and under no-referrer its Origin would be "null" (sendHtml)
  return htmlDocument({
    title: 'Sign in',
    referrer: 'same-origin',
    bodyClass: 'auth',
    module: 'login.js',
    body: html`<main class="card">
${body}
</main>
${siteFooter()}`,
  }).value;
}

/**
 * The page opened at an address other than the public URL (127.0.0.1 rather than the public
 * name): password sign-in works here, but single sign-on returns to the public URL, so say so.
 */
function addressNote(publicUrl: string, requestOrigin: string | undefined, sso: boolean) {
  if (!atOtherAddress(publicUrl, requestOrigin)) return '';
  return html`<p class="note" data-address-note>You opened this page at <code>${requestOrigin}</code>; the service's address is <code>${publicUrl}</code>.
${sso ? 'Single sign-on returns there, so use that address to sign in with it. ' : ''}Passkeys work only there. <a href="${publicUrl}/login">Sign in at ${publicUrl}</a></p>`;
}

/** The page was opened at an address other than the public URL's (where no passkey works: it belongs to the public host name). */
const atOtherAddress = (publicUrl: string, requestOrigin: string | undefined) => Boolean(requestOrigin) && requestOrigin !== new URL(publicUrl).origin;

/** "Sign in with a passkey": shown by the page's script when the browser has WebAuthn. */
function passkeyButton(next: string, or: boolean): SafeHtml {
  return html`<div class="passkey-signin" data-passkey-block hidden>
${or ? html`<p class="or">or</p>` : ''}<button type="button" class="secondary" data-passkey-signin data-next="${next}">Sign in with a passkey</button>
<p class="form-msg" data-passkey-msg role="status"></p>
</div>`;
}

export function renderLoginPage(
  auth: AuthComponent,
  opts: { error?: string; next: string; retryAfter?: number; requestOrigin?: string; signedOut?: boolean },
): string {
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
${
  credentials.length
    ? html`<form method="post" action="/login">
<input type="hidden" name="next" value="${opts.next}">
<label for="username">Username</label>
<input id="username" name="username" type="text" autocomplete="username" required autofocus>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
<p class="note">${credentials.map((p) => p.label).join(' or ')}</p>
</form>`
    : ''
}
${credentials.length && redirects.length ? html`<p class="or">or</p>` : ''}
${auth.chain.ready && !atOtherAddress(auth.config.publicUrl, opts.requestOrigin) ? passkeyButton(opts.next, credentials.length > 0 && !redirects.length) : ''}
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

/**
 * The second step's page: the passkey (when the account has one; the page's script asks for it
 * and posts the answer with the hidden form), a code field, and where recovery codes go.
 * `methods`: what the account can pass the step with (MfaService.methods).
 */
export function renderSecondStepPage(opts: { error?: string; next: string; methods?: readonly string[] }): string {
  const message = opts.error ? (SECOND_STEP_MESSAGES[opts.error] ?? 'Sign-in failed. Please try again.') : null;
  const methods = opts.methods ?? ['totp', 'recovery_code'];
  const passkey = methods.includes('webauthn');
  const totp = methods.includes('totp') || !passkey;
  return page(html`<h1>Second step</h1>
${message ? html`<p class="error" role="alert">${message}</p>` : ''}
${
  passkey
    ? html`<div class="passkey-step" data-passkey-step hidden>
<p class="note">Confirm with the passkey or security key you registered.</p>
<button type="button" data-passkey-verify>Use your passkey</button>
<p class="form-msg" data-passkey-msg role="status"></p>
<p class="or">or</p>
</div>
<form method="post" action="/login/mfa" data-passkey-form hidden>
<input type="hidden" name="next" value="${opts.next}">
<input type="hidden" name="webauthn">
</form>`
    : ''
}
<form method="post" action="/login/mfa" data-second-step data-totp="${totp ? 'yes' : 'no'}">
<input type="hidden" name="next" value="${opts.next}">
<label for="code" data-code-label>${totp ? 'Code from your authenticator app' : 'Recovery code'}</label>
<input id="code" name="code" type="text" inputmode="${totp ? 'numeric' : 'text'}" autocomplete="${totp ? 'one-time-code' : 'off'}" maxlength="64" required${passkey ? '' : html` autofocus`}>
<button type="submit">Verify</button>
${
  totp
    ? html`<p class="note" data-recovery-note>Lost your device? Type one of your recovery codes instead (each works once). <button type="button" class="link" data-use-recovery hidden>Use a recovery code</button></p>`
    : html`<p class="note" data-recovery-note>Without your passkey, type one of your recovery codes (each works once).</p>`
}
</form>
<p class="note"><a href="/login">Start over</a></p>`);
}

/** A passkey's answer posted by the second step page's script (a JSON text field), or null. */
function assertionField(value: unknown): unknown {
  if (typeof value !== 'string' || !value || value.length > 32_768) return null;
  try {
    return JSON.parse(value) as unknown;
  } catch {
    return null;
  }
}

/** After the second step of a browser sign-in: the cookie session, or the redirect provider's own ending. */
async function finishBrowserLogin(auth: AuthComponent, ctx: Context, outcome: Extract<SecondStepOutcome, { ok: true }>, next: string): Promise<void> {
  if (outcome.record.resume) return handOverSession(auth, ctx, outcome.user, outcome.session, outcome.record.resume);
  await startCookieSession(ctx, outcome.session.key_id);
  ctx.status = 303;
  ctx.redirect(next);
}

export function loginPageRoutes(auth: AuthComponent): Router {
  const r = new Router();

  r.get('/login', (ctx) => {
    const { value } = pageQuery.validate(ctx.query);
    const q = (value ?? {}) as { error?: string; next?: string; retry_after?: number; signed_out?: string };
    sendPage(
      ctx,
      renderLoginPage(auth, {
        error: q.error,
        next: safeNext(q.next),
        retryAfter: q.retry_after,
        requestOrigin: requestOrigin(ctx),
        signedOut: q.signed_out === '1',
      }),
    );
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
      return outcome.retryAfter > 0
        ? back({ error: 'locked_out', retry_after: String(outcome.retryAfter) })
        : back({ error: outcome.refusal ?? 'invalid_credentials' });
    }
    if (outcome.kind === 'second_step') return toSecondStep(auth, ctx, outcome.mfaToken, next);
    await startCookieSession(ctx, outcome.session.key_id);
    ctx.status = 303;
    ctx.redirect(next);
  });

  r.get('/login/mfa', async (ctx) => {
    const { value } = pageQuery.validate(ctx.query);
    const q = (value ?? {}) as { error?: string; next?: string };
    if (!ctx.cookies.get(SECOND_STEP_COOKIE)) {
      ctx.status = 303;
      return ctx.redirect(`/login?${new URLSearchParams({ error: 'second_step_expired' })}`);
    }
    // which ways the account has (the token is only read here, not spent)
    const userId = await auth.secondStep.pendingUser(ctx, ctx.cookies.get(SECOND_STEP_COOKIE));
    const methods = userId ? await auth.mfa.methods(userId) : undefined;
    sendPage(ctx, renderSecondStepPage({ error: q.error, next: safeNext(q.next), methods }));
  });

  /** The passkey options of the pending second step (its token is the page's HttpOnly cookie). */
  r.post('/login/mfa/options', async (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    checkOrigin(auth, ctx);
    ctx.body = await secondStepOptions(auth, ctx, ctx.cookies.get(SECOND_STEP_COOKIE));
  });

  /** The second step of the form: a code from the authenticator app, a recovery code, or a passkey's answer. */
  r.post('/login/mfa', async (ctx) => {
    ctx.set('Cache-Control', 'no-store');
    checkOrigin(auth, ctx);
    const form = formBody(ctx);
    const next = safeNext(form.next || '/');
    const code = typeof form.code === 'string' ? form.code.slice(0, 64) : '';
    // the page's script posts a passkey's answer in `webauthn`; a malformed one is a failed attempt
    const passkey = form.webauthn !== undefined;
    const proof = passkey ? { webauthn: assertionField(form.webauthn) ?? {} } : { code };
    const outcome = await passSecondStep(auth, ctx, ctx.cookies.get(SECOND_STEP_COOKIE), proof);
    if (!outcome.ok) {
      if (outcome.mfaToken)
        return toSecondStep(auth, ctx, outcome.mfaToken, next, passkey && outcome.reason === 'invalid_code' ? 'passkey_failed' : outcome.reason);
      ctx.cookies.set(SECOND_STEP_COOKIE, null, { path: '/login' });
      ctx.status = 303;
      return ctx.redirect(`/login?${new URLSearchParams({ error: outcome.reason === 'account_disabled' ? 'account_disabled' : 'second_step_expired' })}`);
    }
    ctx.cookies.set(SECOND_STEP_COOKIE, null, { path: '/login' });
    await finishBrowserLogin(auth, ctx, outcome, next);
  });

  return r;
}
