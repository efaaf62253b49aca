import type { Context } from 'koa';
import type { User } from '../iam/store.js';
import type { AuthComponent } from './component.js';
import { HttpError } from '../http/errors.js';
import { markRecorded } from '../errors.js';
import { MFA_TOKEN_TTL_MS, type MfaTokenRecord, type RedirectResume } from './mfa/step.js';
import type { FactorKind, SecondFactorProof } from './mfa/factor.js';
import { rememberDevice } from './device-cookie.js';
import { hasSessionCookie, sessionMiddlewareRuns } from './web-session.js';

export interface IssuedSession {
  token: string;
  key_id: string;
  expires_at: number;
}

/**
 * Mints a web-session token (kind session) that expires with SERVICE_SESSION_TTL; `mfaAt`: when
 * its holder proved a second factor (null: none yet). Only completeLogin() calls it.
 */
export async function mintSession(auth: AuthComponent, user: User, via: string, mfaAt: number | null = null): Promise<IssuedSession> {
  const expiresAt = Date.now() + auth.config.sessionTtlMs;
  const { token, key } = await auth.apiKeys.create(user.id, 'session', { label: `web session (${via})`, expiresAt, mfaAt });
  return { token, key_id: key.id, expires_at: expiresAt };
}

/** How a sign-in ends: a web session, or a second step the account must pass first. */
export type LoginCompletion =
  { kind: 'session'; user: User; session: IssuedSession } | { kind: 'second_step'; user: User; mfaToken: string; methods: string[] };

export interface CompletionOptions {
  /** the provider that proved the first factor (local, ldap, oidc, webauthn) */
  provider: string;
  /** the door: the login API, the login form, a redirect provider, a passkey */
  via: 'login' | 'form' | 'redirect' | 'passkey' | 'second_step';
  /** the second factor was proved already (a passkey sign-in, the second step itself) */
  secondFactor?: boolean;
  /** the factor that was proved (the event names it: an app code, a passkey, a recovery code) */
  factor?: FactorKind;
  /** a redirect sign-in: how it ends after a second step */
  resume?: RedirectResume;
}

/**
 * Where every way of signing in ends (the login API and form, the OIDC callback, a passkey, the
 * second step): an account with a second factor that has not proved it gets a second-step
 * token instead of a session (docs/auth.md, "Second factor"); everyone else a web session,
 * which records when its holder last proved a factor (for step-up).
 */
export async function completeLogin(auth: AuthComponent, ctx: Context, user: User, opts: CompletionOptions): Promise<LoginCompletion> {
  if (user.mfaEnabled && !opts.secondFactor) {
    const browser = opts.via === 'form' || opts.via === 'redirect' || Boolean(ctx.get('origin'));
    const mfaToken = await auth.secondStep.issue(ctx, user, { provider: opts.provider, via: opts.via, browser, resume: opts.resume ?? null });
    ctx.log.info({ provider: opts.provider, user_id: user.id }, 'first factor passed: second step required');
    return { kind: 'second_step', user, mfaToken, methods: await auth.mfa.methods(user.id) };
  }
  const session = await mintSession(auth, user, opts.provider, opts.secondFactor ? Date.now() : null);
  ctx.log.info({ provider: opts.provider, user_id: user.id, second_factor: Boolean(opts.secondFactor) }, 'login');
  auth.iam.commands.record({
    action: 'auth.login',
    actor: { user_id: user.id, username: user.username, method: opts.via, ip: ctx.ip },
    target: { type: 'user', id: user.id, name: user.username },
    details: {
      provider: opts.provider,
      second_factor: Boolean(opts.secondFactor),
      ...(opts.factor ? { factor: opts.factor } : {}),
      session_id: session.key_id,
    },
  });
  return { kind: 'session', user, session };
}

/** The outcome of a second step: a session, or why not (a fresh token to try again with, unless it expired). */
export type SecondStepOutcome =
  | { ok: true; user: User; session: IssuedSession; record: MfaTokenRecord }
  | { ok: false; reason: 'expired' | 'invalid_code' | 'rate_limited' | 'locked_out' | 'account_disabled'; retryAfter?: number; mfaToken?: string };

/**
 * The second step of a sign-in: redeems the token (single use), takes the same budget and
 * lockout as a password guess, checks the code or passkey. A wrong code spends the token and
 * answers a new one (same record, same expiry), so the browser can try again without a second
 * password but never more often than the lockout lets it.
 */
export async function passSecondStep(auth: AuthComponent, ctx: Context, token: unknown, proof: SecondFactorProof): Promise<SecondStepOutcome> {
  const record = await auth.secondStep.redeem(ctx, token);
  if (!record) return { ok: false, reason: 'expired' };
  const user = await auth.iam.store.userById(record.user_id);
  if (!user || user.disabled) return { ok: false, reason: 'account_disabled' };
  const again = () => auth.secondStep.issue(ctx, user, { provider: record.provider, via: record.via, browser: false }, record);
  const proved = await auth.secondStep.prove(ctx, user, proof, 'second_step');
  if (!proved.ok) {
    const reason = proved.reason === 'invalid_credentials' || proved.reason === 'account_disabled' ? 'invalid_code' : proved.reason;
    return { ok: false, reason, retryAfter: proved.retryAfter || undefined, mfaToken: await again() };
  }
  auth.secondStep.clearBinding(ctx);
  // the device passed both factors: it is the owner's known device from now on (its own budget
  // in the attempt gate; the account-wide count of wrong factors does not hold it)
  rememberDevice(ctx, auth.gate.cookies, user.username, proved.admitted.device, auth.config.publicUrl.startsWith('https:'));
  const done = await completeLogin(auth, ctx, user, { provider: record.provider, via: 'second_step', secondFactor: true, factor: proved.value });
  if (done.kind !== 'session') throw new Error('a verified second step must end in a session');
  ctx.log.info({ user_id: user.id, factor: proved.value }, 'second step passed');
  return { ok: true, user, session: done.session, record };
}

/** The answer of a second step that did not pass (429 with a token to retry later, or 401). */
export function secondStepRefused(outcome: Extract<SecondStepOutcome, { ok: false }>, wrong = 'wrong code'): HttpError {
  const details = outcome.mfaToken ? { reason: outcome.reason, mfa_token: outcome.mfaToken } : { reason: outcome.reason };
  if (outcome.retryAfter) {
    const locked = new HttpError(
      429,
      'rate_limited',
      'too many attempts, try again later',
      { ...details, retry_after: outcome.retryAfter },
      { 'Retry-After': String(outcome.retryAfter) },
    );
    // the gate recorded the lockout: the transport answering it records nothing more
    markRecorded(locked);
    return locked;
  }
  return new HttpError(401, 'unauthorized', outcome.reason === 'invalid_code' ? wrong : 'sign in again: the second step expired', details);
}

/** The session body of every sign-in answer. */
export function loginBody(user: User, session: { token: string; expires_at: number }) {
  return {
    token: session.token,
    token_type: 'session' as const,
    expires_at: new Date(session.expires_at).toISOString(),
    user: { id: user.id, username: user.username, display_name: user.displayName, email: user.email, groups: user.groups },
  };
}

/**
 * Starts the UI cookie session under a fresh session id: a request that carried a session
 * cookie has its old id destroyed and a new one issued (no fixation). One without it already
 * has a fresh id: saved once, by the session middleware as the request ends where it runs
 * (the sign-in routes), else here (the second step's routes), instead of destroyed, saved and
 * saved again.
 */
export async function startCookieSession(ctx: Context, keyId: string): Promise<void> {
  ctx.session = { key_id: keyId };
  const session = ctx.session as { regenerate?: () => Promise<void>; save?: () => Promise<void> } | null;
  if (hasSessionCookie(ctx.req.headers.cookie)) await session?.regenerate?.();
  else if (!sessionMiddlewareRuns(ctx)) await session?.save?.();
}

/**
 * The end of a sign-in over the API (password, second step, passkey): the browser's cookie
 * session starts under a fresh id, and the answer is the session body. (The login form and the
 * SSO handoff redirect instead: src/web/login.ts, src/auth/routes/oidc.ts.)
 */
export async function signedIn(ctx: Context, user: User, session: IssuedSession) {
  await startCookieSession(ctx, session.key_id);
  return loginBody(user, session);
}

/** Carries the second-step token of a form or redirect sign-in between the pages (never in a URL). */
export const SECOND_STEP_COOKIE = 'svc.mfa_token';

/** Hands a form or redirect sign-in to the second step: the token in an HttpOnly cookie, the browser to /login/mfa. */
export function toSecondStep(auth: AuthComponent, ctx: Context, mfaToken: string, next: string, error?: string): void {
  ctx.cookies.set(SECOND_STEP_COOKIE, mfaToken, {
    httpOnly: true,
    sameSite: 'lax',
    secure: auth.config.publicUrl.startsWith('https:'),
    path: '/login',
    maxAge: MFA_TOKEN_TTL_MS,
    overwrite: true,
  });
  const q = new URLSearchParams();
  if (error) q.set('error', error);
  if (next !== '/') q.set('next', next);
  ctx.status = 303;
  ctx.redirect(`/login/mfa${q.size ? `?${q}` : ''}`);
}
