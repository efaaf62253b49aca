import type Router from '@koa/router';
import Joi from 'joi';
import type { Context, Next } from 'koa';
import type { AuthComponent } from '../component.js';
import { HttpError, unauthenticated, UNAUTHENTICATED, unauthorized } from '../../http/errors.js';
import { lockedOut } from '../attempt-gate.js';
import { ApiRouter } from '../../http/api.js';
import { checkOrigin, credentialsLogin, loginSchema, logout, noStore, providerList } from '../sessions.js';
import { signedIn } from '../complete-login.js';
import { REFUSAL_TEXT } from '../providers/refusal.js';
import { secondStepView, sessionView } from './views.js';

/** The login API: password login, logout, and the providers a login page offers. */

const providersResponse = Joi.object({
  providers: Joi.array().items(
    Joi.alternatives().try(
      Joi.object({ id: Joi.string(), kind: Joi.string().valid('credentials'), label: Joi.string() }),
      Joi.object({
        id: Joi.string(),
        kind: Joi.string().valid('redirect'),
        label: Joi.string(),
        start_url: Joi.string().uri().description('where the SSO button leads (GET /api/auth/oidc/start)'),
      }),
    ),
  ),
});

const loginAnswerView = Joi.alternatives().try(sessionView, secondStepView);

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
      operationId: 'login',
      summary: 'Log in with username and password (runs the provider chain)',
      description:
        'Five failures per (username, client IP) within 60 s answer 429 with Retry-After. A success also sets the device cookie `svc.device` (HttpOnly, SameSite=Lax, 180 days): a later login for the same name presenting it is counted apart from its address and checked ahead of unknown clients (docs/security.md, "Known devices").',
      auth: 'none',
      body: loginSchema,
      middleware: [sameOrigin],
      responses: {
        200: {
          description: 'the session; or, for an account with a second factor, the second step it must pass first (`mfa_required`)',
          schema: loginAnswerView,
        },
        401: 'wrong credentials; or the directory proved the password and refused the account: `details.reason` says why (`account_disabled`, `account_expired`, `password_expired`, `password_must_change`, `logon_restricted`); or `directory_unavailable`: no directory server could check the password (unreachable, TLS refused, paused), never read as a wrong password',
        429: { description: 'locked out, or over the per-address budget', headers: { 'Retry-After': 'seconds' } },
        503: {
          description: 'unavailable: too many password checks waiting; or booting / the database not reachable (as on every route)',
          headers: { 'Retry-After': 'seconds to wait' },
        },
      },
    },
    async (ctx, { body }) => {
      const outcome = await credentialsLogin(auth, ctx, body.username, body.password, 'login');
      if (!outcome.ok) {
        // the gate answered and recorded the lockout
        if (outcome.retryAfter > 0) throw lockedOut(outcome.retryAfter);
        if (outcome.refusal)
          throw new HttpError(
            401,
            'unauthorized',
            REFUSAL_TEXT[outcome.refusal],
            { reason: outcome.refusal },
            { 'WWW-Authenticate': 'Bearer, Basic realm="service"' },
          );
        throw unauthorized(UNAUTHENTICATED.basic);
      }
      if (outcome.kind === 'second_step') return secondStepBody(outcome);
      return signedIn(ctx, outcome.user, outcome.session);
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/logout',
      operationId: 'logout',
      summary: 'Log out: revokes the presented session token and the cookie session',
      auth: 'none',
      documentedAuth: 'identity',
      responses: { 204: 'logged out', 401: 'no session presented' },
    },
    async (ctx) => {
      noStore(ctx);
      if (!(await logout(auth, ctx))) throw unauthenticated(ctx.headers);
      ctx.status = 204;
    },
  );

  api.endpoint(
    {
      method: 'GET',
      path: '/api/auth/providers',
      operationId: 'listAuthProviders',
      summary: 'Login providers (the login page renders one SSO button per redirect provider)',
      auth: 'none',
      responses: { 200: { description: 'the providers in chain order', schema: providersResponse } },
    },
    () => ({ providers: providerList(auth) }),
  );

  return api.router;
}
