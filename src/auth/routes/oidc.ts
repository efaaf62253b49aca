import type Router from '@koa/router';
import Joi from 'joi';
import crypto from 'node:crypto';
import type { Context, Next } from 'koa';
import type { AuthComponent } from '../component.js';
import type { User } from '../../iam/store.js';
import { checkedProfile } from '../chain.js';
import { badField, notFound, unauthorized } from '../../http/errors.js';
import { ApiRouter } from '../../http/api.js';
import { sameOriginOnly } from './login.js';
import { sessionView } from './views.js';
import { sha256 } from '../../digest.js';
import { completeLogin, loginBody, startCookieSession, toSecondStep } from '../complete-login.js';
import type { RedirectResume } from '../mfa/step.js';
import {
  bindingMatches,
  bindingOf,
  CALLBACK_PATH,
  errorCode,
  EXCHANGE_CODE_TTL_MS,
  LOGIN_BINDING_COOKIE,
  loginErrorUrl,
  nextSchema,
  type IssuedSession,
  noStore,
  OIDC_STATE_TTL_MS,
} from '../sessions.js';

/**
 * The OIDC redirect login: start (PKCE, state, nonce), the provider's callback, and the
 * one-time exchange code that hands the session to the page or to a client's redirect_uri.
 * Login state never lives in process memory: states and codes are one-time database values.
 */

interface ExchangeBody {
  code: string;
}

const exchangeSchema = Joi.object<ExchangeBody, true>({ code: Joi.string().min(16).max(512).required() });

/** The query of GET /api/auth/oidc/start, defaults applied. */
interface StartQuery {
  next: string;
  redirect_uri?: string;
  provider: string;
}

const startSchema = Joi.object<StartQuery, true>({
  next: nextSchema.default('/'),
  redirect_uri: Joi.string()
    .max(2048)
    .uri({ scheme: ['http', 'https'] }),
  provider: Joi.string()
    .pattern(/^[a-z0-9][a-z0-9_.-]{0,63}$/)
    .default('oidc'),
});

/**
 * The redirects of the sign-in carry no body: Koa's redirect writes a "Redirecting to …" text,
 * HTML or plain by the Accept header, which no browser shows (they follow the Location).
 */
async function bareRedirect(ctx: Context, next: Next): Promise<void> {
  await next();
  if (ctx.status >= 300 && ctx.status < 400) {
    ctx.body = '';
    ctx.remove('Content-Type');
  }
}

interface StateRecord {
  provider: string;
  state: string;
  nonce: string;
  code_verifier: string;
  redirect_uri: string;
  next: string;
  client_redirect: string | null;
  binding: string;
}

/**
 * The end of a redirect sign-in (right after the callback, or after its second step): the
 * session goes under a one-time exchange code to /auth/complete (this browser) or to the
 * client's redirect_uri. The token itself is never in a URL.
 */
export async function handOverSession(auth: AuthComponent, ctx: Context, user: User, session: IssuedSession, resume: RedirectResume): Promise<void> {
  const code = await auth.oneTime.put(
    'exchange_code',
    { user_id: user.id, key_id: session.key_id, token: session.token, expires_at: session.expires_at, binding: resume.binding } satisfies CodeRecord,
    EXCHANGE_CODE_TTL_MS,
  );
  if (resume.client_redirect) {
    const target = new URL(resume.client_redirect);
    target.searchParams.set('code', code);
    ctx.redirect(target.href);
  } else {
    ctx.redirect(`/auth/complete?${new URLSearchParams({ code, next: resume.next })}`);
  }
}

interface CodeRecord {
  user_id: string;
  key_id: string;
  token: string;
  expires_at: number;
  /** hash of the binding cookie for the server-rendered flow; null for a client redirect_uri */
  binding: string | null;
}

export function oidcRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ tag: 'auth' });
  const sameOrigin = sameOriginOnly(auth);
  const cookieOpts = () => ({
    httpOnly: true,
    sameSite: 'lax' as const,
    secure: auth.config.publicUrl.startsWith('https:'),
    signed: true,
    path: '/',
    maxAge: OIDC_STATE_TTL_MS,
    overwrite: true,
  });

  api.endpoint(
    {
      method: 'GET',
      path: '/api/auth/oidc/start',
      operationId: 'startOidcLogin',
      summary: 'Start the OIDC redirect login (PKCE, state, nonce)',
      description:
        '`next` is a local path to land on after login; `redirect_uri` (an allowed origin) receives a one-time `code` for POST /api/auth/token-exchange instead.',
      auth: 'none',
      query: startSchema,
      middleware: [bareRedirect],
      responses: {
        302: {
          description:
            "to the identity provider's authorization endpoint (the login binding cookie is set); or, when the start fails or this address is over its budget, to the login page with `error` (`/login?error=…`)",
          headers: { Location: "the identity provider's authorization URL, or /login?error=<code>&next=<next>" },
        },
        404: 'no such redirect provider',
      },
    },
    async (ctx, { query: q }) => {
      noStore(ctx);
      if (q.redirect_uri) {
        // joi's uri() accepts some hosts the URL parser refuses (256.256.256.256): parse defensively
        let target: URL;
        try {
          target = new URL(q.redirect_uri);
        } catch {
          throw badField('redirect_uri', 'is not a valid URL');
        }
        if (!auth.authenticator.originAllowed(target.origin) || target.username || target.password || target.hash) {
          throw badField('redirect_uri', 'must be on an allowed origin (SERVICE_PUBLIC_URL or SERVICE_ALLOWED_ORIGINS)');
        }
      }
      const provider = auth.chain.redirect(q.provider);
      if (!provider) throw notFound(`redirect provider ${q.provider}`);
      // each start stores a state row: one address cannot fill the table (the same budget as password attempts)
      if (auth.gate.spend(ctx.ip) > 0) {
        ctx.redirect(loginErrorUrl('rate_limited', q.next));
        return;
      }
      // one binding per browser, reused so two tabs can sign in at once
      const binding = bindingOf(ctx) ?? crypto.randomBytes(32).toString('base64url');
      const redirectUri = `${auth.config.publicUrl}${CALLBACK_PATH}`;
      let started;
      try {
        started = await provider.start(redirectUri);
      } catch (err) {
        ctx.log.warn({ provider: provider.id, reason: (err as Error).message }, 'redirect login could not start');
        ctx.redirect(loginErrorUrl(errorCode(err), q.next));
        return;
      }
      const record: StateRecord = {
        provider: provider.id,
        state: started.state,
        nonce: started.nonce,
        code_verifier: started.code_verifier,
        redirect_uri: redirectUri,
        next: q.next,
        client_redirect: q.redirect_uri ?? null,
        binding: sha256(binding),
      };
      await auth.oneTime.put('oidc_state', record, OIDC_STATE_TTL_MS, started.state);
      ctx.cookies.set(LOGIN_BINDING_COOKIE, binding, cookieOpts());
      ctx.redirect(started.url);
    },
  );

  api.endpoint(
    {
      method: 'GET',
      path: CALLBACK_PATH,
      operationId: 'finishOidcLogin',
      summary: 'OIDC redirect callback (browser)',
      description:
        'The identity provider sends the browser here with `code` and `state` (or `error`). Validates state, nonce and the ID token, links the identity and redirects to /auth/complete with a one-time code. Failures redirect to /login?error=<code>.',
      auth: 'none',
      middleware: [bareRedirect],
      responses: {
        302: {
          description: 'signed in: to /auth/complete with a one-time code, or to the client redirect_uri with `code`; failed: to the login page with `error`',
          headers: { Location: '/auth/complete?code=…&next=…, <redirect_uri>?code=…, or /login?error=<code>' },
        },
        303: {
          description: 'an account with a second factor: to the second step page (the token in an HttpOnly cookie)',
          headers: { Location: '/login/mfa?next=…' },
        },
      },
    },
    async (ctx) => {
      noStore(ctx);
      let next: string | null = null;
      const fail = (code: string, reason?: string) => {
        ctx.log.warn({ code, reason }, 'redirect login failed');
        ctx.redirect(loginErrorUrl(code, next));
      };
      if (!auth.chain.ready) return fail('unavailable');
      const state = typeof ctx.query.state === 'string' ? ctx.query.state : null;
      const record = await auth.oneTime.take<StateRecord>('oidc_state', state);
      if (!record) return fail('state_mismatch', 'unknown, used or expired state');
      next = record.next;
      if (!bindingMatches(ctx, record.binding)) return fail('state_mismatch', 'state was issued to another browser');
      const provider = auth.chain.redirect(record.provider);
      if (!provider) return fail('provider_unavailable');

      let user: User;
      try {
        const callbackUrl = new URL(ctx.originalUrl, auth.config.publicUrl);
        const profile = checkedProfile(provider, await provider.callback(callbackUrl, record));
        user = (await auth.linker.link(profile)).user;
      } catch (err) {
        return fail(errorCode(err), (err as Error).message);
      }
      if (user.disabled) return fail('account_disabled', `user ${user.id} is disabled`);

      const resume: RedirectResume = { next: record.next, client_redirect: record.client_redirect, binding: record.client_redirect ? null : record.binding };
      const done = await completeLogin(auth, ctx, user, { provider: provider.id, via: 'redirect', resume });
      // an account with a second factor passes it on our login page first
      if (done.kind === 'second_step') return toSecondStep(auth, ctx, done.mfaToken, record.next);
      ctx.log.info({ provider: provider.id, user_id: user.id }, 'redirect login');
      await handOverSession(auth, ctx, user, done.session, resume);
    },
  );

  /** Redeems an exchange code; a code bound to a browser only by that browser. Unusable codes burn their token. */
  const redeem = async (ctx: Context, code: unknown, requireBinding: boolean): Promise<{ user: User; record: CodeRecord } | null> => {
    const record = await auth.oneTime.take<CodeRecord>('exchange_code', typeof code === 'string' ? code : null);
    if (!record) return null;
    const bound = record.binding !== null;
    const usable = bound ? bindingMatches(ctx, record.binding) : !requireBinding;
    const key = usable ? await auth.apiKeys.lookupById(record.key_id) : null;
    const user = key ? await auth.iam.store.userById(key.userId) : null;
    if (!key || !user || user.disabled) {
      await auth.apiKeys.revoke(record.user_id, record.key_id);
      return null;
    }
    return { user, record };
  };

  api.endpoint(
    {
      method: 'GET',
      path: '/auth/complete',
      operationId: 'completeSsoLogin',
      summary: 'Single sign-on handoff (browser): redeems the one-time code and starts the cookie session',
      description:
        'Query: `code`, the one-time code of the callback (bound to this browser); `next`, a local path to land on. Anything unusable lands on the login page rather than an error body.',
      auth: 'none',
      middleware: [bareRedirect],
      responses: {
        302: {
          description: 'the cookie session is started: to `next`; or the code is refused: to the login page',
          headers: { Location: '`next` (a local path, / by default), or /login?error=invalid_code&next=…' },
        },
      },
    },
    async (ctx) => {
      noStore(ctx);
      const { error, value: next } = nextSchema.default('/').validate(ctx.query.next);
      const target = error ? '/' : (next as string);
      const redeemed = await redeem(ctx, ctx.query.code, true);
      if (!redeemed) {
        ctx.log.warn('exchange code refused at /auth/complete');
        ctx.redirect(loginErrorUrl('invalid_code', target));
        return;
      }
      await startCookieSession(ctx, redeemed.record.key_id);
      ctx.redirect(target);
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/token-exchange',
      operationId: 'exchangeLoginCode',
      summary: 'Exchange a one-time code (from a client redirect_uri) for the session token',
      auth: 'none',
      body: exchangeSchema,
      middleware: [sameOrigin],
      responses: { 200: { description: 'the session', schema: sessionView }, 401: 'code invalid, used or expired' },
    },
    async (ctx, { body }) => {
      const redeemed = await redeem(ctx, body.code, false);
      if (!redeemed) throw unauthorized('exchange code invalid, used or expired');
      return loginBody(redeemed.user, redeemed.record);
    },
  );

  return api.router;
}
