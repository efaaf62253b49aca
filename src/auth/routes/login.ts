import type Router from '@koa/router';
import Joi from 'joi';
import type { Context, Next } from 'koa';
import type { AuthComponent } from '../component.js';
import { HttpError, rateLimited, unauthorized } from '../../http/errors.js';
import { ApiRouter } from '../../http/api.js';
import { checkOrigin, credentialsLogin, loginBody, loginSchema, logout, noStore, providerList, startCookieSession } from '../sessions.js';
import { REFUSAL_TEXT } from '../providers/refusal.js';

/** The login API: password login, logout, and the providers a login page offers. */

export const sessionResponse = Joi.object({
  token: Joi.string().description('the web-session token (Bearer); also starts the UI cookie session'),
  token_type: Joi.string().valid('session'),
  expires_at: Joi.string().isoDate(),
  user: Joi.object({ id: Joi.string().guid(), username: Joi.string(), display_name: Joi.string().allow(null), email: Joi.string().allow(null), groups: Joi.array().items(Joi.string()) }),
});

/** An account with a second factor: no session yet, the second step (POST /api/auth/login/mfa) first. */
export const secondStepResponse = Joi.object({
  mfa_required: Joi.valid(true),
  mfa_token: Joi.string().description('single use, five minutes; bound to this browser when a browser asked'),
  methods: Joi.array().items(Joi.string().valid('totp', 'webauthn', 'recovery_code')),
});

const providersResponse = Joi.object({
  providers: Joi.array().items(Joi.object({ id: Joi.string(), kind: Joi.string().valid('credentials', 'redirect'), label: Joi.string(), start_url: Joi.string().uri() })),
});

/** A foreign page may not post here (checked before the body is read): browsers only. */
export function sameOriginOnly(auth: AuthComponent) {
  return async (ctx: Context, next: Next) => {
    noStore(ctx);
    checkOrigin(auth, ctx);
    await next();
  };
}

export function secondStepBody(outcome: { mfaToken: string; methods: string[] }) {
  return { mfa_required: true as const, mfa_token: outcome.mfaToken, methods: outcome.methods };
}

export function authRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ tag: 'auth' });
  const sameOrigin = sameOriginOnly(auth);

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/login',
      summary: 'Log in with username and password (runs the provider chain)',
      description:
        'Five failures per (username, client IP) within 60 s answer 429 with Retry-After. A success also sets the device cookie `svc.device` (HttpOnly, SameSite=Lax, 180 days): a later login for the same name presenting it is counted apart from its address and checked ahead of unknown clients (docs/security.md, "Known devices").',
      auth: 'none',
      body: loginSchema,
      middleware: [sameOrigin],
      responses: {
        200: { description: 'the session; or, for an account with a second factor, the second step it must pass first (`mfa_required`)', schema: Joi.alternatives().try(sessionResponse, secondStepResponse) },
        401: 'wrong credentials; or the directory proved the password and refused the account: `details.reason` says why (`account_disabled`, `account_expired`, `password_expired`, `password_must_change`, `logon_restricted`)',
        429: { description: 'locked out, or over the per-address budget', headers: { 'Retry-After': 'seconds' } },
        503: { description: 'too many password checks waiting', headers: { 'Retry-After': 'seconds' } },
      },
    },
    async (ctx, { body }) => {
      const outcome = await credentialsLogin(auth, ctx, body.username, body.password, 'login');
      if (!outcome.ok) {
        if (outcome.retryAfter > 0) throw rateLimited(outcome.retryAfter);
        if (outcome.refusal) throw new HttpError(401, 'unauthorized', REFUSAL_TEXT[outcome.refusal], { reason: outcome.refusal }, { 'WWW-Authenticate': 'Bearer, Basic realm="service"' });
        throw unauthorized('invalid username or password');
      }
      if (outcome.kind === 'second_step') return secondStepBody(outcome);
      await startCookieSession(ctx, outcome.session.key_id);
      return loginBody(outcome.user, outcome.session);
    },
  );

  api.endpoint(
    { method: 'POST', path: '/api/auth/logout', summary: 'Log out: revokes the presented session token and the cookie session', auth: 'none', responses: { 204: 'logged out', 401: 'no session presented' } },
    async (ctx) => {
      noStore(ctx);
      if (!(await logout(auth, ctx))) throw unauthorized();
      ctx.status = 204;
    },
  );

  api.endpoint(
    { method: 'GET', path: '/api/auth/providers', summary: 'Login providers (the login page renders one SSO button per redirect provider)', auth: 'none', responses: { 200: { description: 'the providers in chain order', schema: providersResponse } } },
    () => ({ providers: providerList(auth) }),
  );

  return api.router;
}
