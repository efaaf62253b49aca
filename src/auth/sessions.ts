import Joi from 'joi';
import type { Context } from 'koa';
import type { AuthComponent } from './component.js';
import type { User } from '../iam/store.js';
import { PASSWORD_MAX } from '../iam/passwords.js';
import { crossOriginRefused } from '../http/errors.js';
import { isLocalPath } from '../http/links.js';
import { requestOrigin } from './authenticate.js';
import { safeEqual, sha256 } from '../digest.js';
import { normalizeLogin } from './attempts.js';
import { SESSION_COOKIE } from './web-session.js';
import { deviceCookieOf, rememberDevice } from './device-cookie.js';
import { Refused, type Attempt } from './attempt-gate.js';
import { completeLogin, type IssuedSession, type LoginCompletion } from './complete-login.js';
import { isRefusalReason, LoginRefused, type RefusalReason } from './providers/refusal.js';

/**
 * Signing in and out, shared by the login API, the OIDC flow and the login page: web sessions
 * are database rows, and the browser binding of an OIDC login is a signed cookie.
 */

export const OIDC_STATE_TTL_MS = 10 * 60_000;
export const EXCHANGE_CODE_TTL_MS = 60_000;
/** binds an OIDC login (and its exchange code) to the browser that started it */
export const LOGIN_BINDING_COOKIE = 'svc.login';
export const CALLBACK_PATH = '/auth/callback/oidc';

/** Where to land after login: a path on this service, as a browser reads it (src/http/links.ts). */
export const nextSchema = Joi.string()
  .max(2048)
  .custom((value: string, helpers) =>
    isLocalPath(value) && !/\s/.test(value) ? value : helpers.message({ custom: '"next" must be a local path starting with a single /' }),
  );

/** The body of POST /api/auth/login. */
export interface LoginBody {
  username: string;
  password: string;
}

export const loginSchema = Joi.object<LoginBody, true>({
  username: Joi.string().min(1).max(256).required(),
  password: Joi.string().min(1).max(PASSWORD_MAX).required(),
});

/** Refuses a browser request from a foreign page (login CSRF); requests without Origin are not from a browser form. */
export function checkOrigin(auth: AuthComponent, ctx: Context): void {
  const origin = ctx.get('origin');
  if (origin && !auth.authenticator.originAllowed(origin, requestOrigin(ctx))) throw crossOriginRefused();
}

/** `refusal`: the directory proved the password and refused the account, and the person may be told why */
export type { IssuedSession };

export type CredentialsOutcome = ({ ok: true } & LoginCompletion) | { ok: false; retryAfter: number; refusal?: RefusalReason };

/**
 * The credentials login shared by the API and the login form: lockout check, provider chain,
 * linking, session token. `retryAfter` > 0 means locked out (429), 0 means wrong credentials.
 */
export async function credentialsLogin(auth: AuthComponent, ctx: Context, typed: string, password: string, via: 'login' | 'form'): Promise<CredentialsOutcome> {
  // one name for the providers and the lockout: ' bob' and 'bob' share bob's five guesses
  const username = normalizeLogin(typed);
  const attempt: Attempt = {
    secret: 'password',
    username: typed,
    ip: ctx.ip,
    deviceCookie: deviceCookieOf(ctx),
    via,
    provider: auth.chain
      .credentials()
      .map((p) => p.id)
      .join(','),
    log: ctx.log,
  };
  const checked = await auth.gate.check<{ user: User; provider: string }, RefusalReason | null>(attempt, async () => {
    let result;
    try {
      result = await auth.chain.authenticate(username, password);
    } catch (err) {
      // the directory refused the account: the log and the trail say why; the person is told only
      // what the directory said because the password was right (a locked account: nothing)
      if (err instanceof LoginRefused) return new Refused(err.provider, isRefusalReason(err.reason) ? err.reason : null, err.reason);
      throw err;
    }
    if (!result) return null;
    const { user } = await auth.linker.link(result.profile);
    return user.disabled ? new Refused(result.provider.id, null) : { user, provider: result.provider.id };
  });
  if (!checked.ok) {
    const refusal = checked.reason === 'account_disabled' ? checked.refused.cause : null;
    return refusal ? { ok: false, retryAfter: 0, refusal } : { ok: false, retryAfter: checked.retryAfter };
  }
  const { user, provider } = checked.value;
  const done = await completeLogin(auth, ctx, user, { provider, via });
  // a device becomes known once it has passed every factor: for an account with a second
  // factor, after the second step (passSecondStep), never on the password alone
  if (done.kind === 'session') rememberDevice(ctx, auth.gate.cookies, username, checked.admitted.device, auth.config.publicUrl.startsWith('https:'));
  return { ok: true, ...done };
}

/** Revokes the session token behind the request and the cookie session's token, and ends the cookie session. */
export async function logout(auth: AuthComponent, ctx: Context): Promise<boolean> {
  const id = ctx.state.identity;
  let ended = false;
  if (id?.userId && id.credentialId && (id.method === 'session_token' || id.method === 'session_cookie')) {
    ended = (await auth.apiKeys.revoke(id.userId, id.credentialId)).length > 0 || ended;
  }
  if (ctx.cookies.get(SESSION_COOKIE)) {
    const keyId = ctx.session?.key_id;
    if (typeof keyId === 'string') {
      const key = await auth.apiKeys.get(keyId);
      if (key && key.kind === 'session') await auth.apiKeys.revoke(key.userId, key.id);
      ended = true;
    }
    ctx.session = null;
  }
  // an API key or Basic ends nothing (the call is answered 204, the key left as it is): no event
  if (id?.userId && ended)
    auth.iam.commands.record({
      action: 'auth.logout',
      actor: { user_id: id.userId, username: id.username, method: id.method, ip: ctx.ip },
      target: { type: 'user', id: id.userId, name: id.username },
    });
  return ended || Boolean(id);
}

export function bindingOf(ctx: Context): string | null {
  const value = ctx.cookies.get(LOGIN_BINDING_COOKIE, { signed: true });
  return value && /^[A-Za-z0-9_-]{43}$/.test(value) ? value : null;
}

export function bindingMatches(ctx: Context, expectedHash: string | null): boolean {
  const binding = bindingOf(ctx);
  return Boolean(binding && expectedHash && safeEqual(sha256(binding), expectedHash));
}

/** Where a failed browser login lands: the login page with a short, safe error code. */
export function loginErrorUrl(code: string, next?: string | null): string {
  const safe = /^[a-z_]{1,40}$/.test(code) ? code : 'login_failed';
  const q = new URLSearchParams({ error: safe });
  if (next && next !== '/' && isLocalPath(next)) q.set('next', next);
  return `/login?${q}`;
}

export function errorCode(err: unknown): string {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && /^[a-z_]{1,40}$/.test(code) ? code : 'login_failed';
}

function startUrl(auth: AuthComponent, id: string): string {
  return `${auth.config.publicUrl}/api/auth/oidc/start${id === 'oidc' ? '' : `?provider=${encodeURIComponent(id)}`}`;
}

export function providerList(auth: AuthComponent) {
  return auth.chain
    .providers()
    .map((p) =>
      p.kind === 'redirect' ? { id: p.id, kind: p.kind, label: p.label, start_url: startUrl(auth, p.id) } : { id: p.id, kind: p.kind, label: p.label },
    );
}

export function noStore(ctx: Context) {
  ctx.set('Cache-Control', 'no-store');
}
