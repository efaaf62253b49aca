import type { Context } from 'koa';
import type { User } from '../iam/store.js';
import type { AuthComponent } from './component.js';
import { logLoginFailure } from './attempts.js';
import type { Admission } from './device-cookie.js';
import { SECOND_FACTOR_CLIENT, SECOND_FACTOR_RULE } from './lockout.js';
import { MFA_TOKEN_TTL_MS, type MfaTokenRecord, type RedirectResume, type SecondFactorProof } from './mfa/step.js';

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
  | { kind: 'session'; user: User; session: IssuedSession }
  | { kind: 'second_step'; user: User; mfaToken: string; methods: string[] };

export interface CompletionOptions {
  /** the provider that proved the first factor (local, ldap, oidc, webauthn) */
  provider: string;
  /** the door: the login API, the login form, a redirect provider, a passkey */
  via: 'login' | 'form' | 'redirect' | 'passkey' | 'second_step';
  /** the second factor was proved already (a passkey sign-in, the second step itself) */
  secondFactor?: boolean;
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
  auth.iam.audit.record({
    action: 'auth.login',
    actor: { user_id: user.id, username: user.username, method: opts.via, ip: ctx.ip },
    target: { type: 'user', id: user.id, name: user.username },
    details: { provider: opts.provider, second_factor: Boolean(opts.secondFactor), session_id: session.key_id },
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
  const failed = (reason: 'invalid_credentials' | 'locked_out' | 'rate_limited') =>
    logLoginFailure(ctx.log, { username: user.username, ip: ctx.ip, provider: 'second_factor', reason, via: 'second_step' }, auth.iam.audit);
  const admission = await admitSecondFactor(auth, ctx, user);
  if (!admission.ok) {
    failed(admission.reason);
    return { ok: false, reason: admission.reason, retryAfter: admission.retryAfter, mfaToken: await again() };
  }
  const by = await auth.secondStep.verify(user, proof);
  if (!by) {
    failed('invalid_credentials');
    return { ok: false, reason: 'invalid_code', mfaToken: await again() };
  }
  await secondFactorPassed(auth, user, admission);
  auth.secondStep.clearBinding(ctx);
  const done = await completeLogin(auth, ctx, user, { provider: record.provider, via: 'second_step', secondFactor: true });
  if (done.kind !== 'session') throw new Error('a verified second step must end in a session');
  ctx.log.info({ user_id: user.id, factor: by }, 'second step passed');
  return { ok: true, user, session: done.session, record };
}

/**
 * Admits an attempt at `user`'s second factor (the second step, step-up): the address's (or
 * known device's) budget and lockout as for a password, then the account's own second-factor
 * lockout (SECOND_FACTOR_RULE), which guesses spread over many addresses cannot escape. Like a
 * password guess, the attempt counts as a failure until secondFactorPassed().
 */
export async function admitSecondFactor(auth: AuthComponent, ctx: Context, user: User): Promise<Admission> {
  const admission = await auth.devices.admit(ctx, user.username);
  if (!admission.ok) return admission;
  const wait = await auth.lockout.begin(user.username, SECOND_FACTOR_CLIENT, SECOND_FACTOR_RULE);
  return wait > 0 ? { ok: false, reason: 'locked_out', retryAfter: wait } : admission;
}

/** A passed second factor clears the client's failures and the account's second-factor count. */
export async function secondFactorPassed(auth: AuthComponent, user: User, admission: Extract<Admission, { ok: true }>): Promise<void> {
  await auth.lockout.succeed(user.username, admission.client);
  await auth.lockout.succeed(user.username, SECOND_FACTOR_CLIENT);
}

/** Carries the second-step token of a form or redirect sign-in between the pages (never in a URL). */
export const SECOND_STEP_COOKIE = 'svc.mfa_token';

/** Hands a form or redirect sign-in to the second step: the token in an HttpOnly cookie, the browser to /login/mfa. */
export function toSecondStep(auth: AuthComponent, ctx: Context, mfaToken: string, next: string, error?: string): void {
  ctx.cookies.set(SECOND_STEP_COOKIE, mfaToken, { httpOnly: true, sameSite: 'lax', secure: auth.config.publicUrl.startsWith('https:'), path: '/login', maxAge: MFA_TOKEN_TTL_MS, overwrite: true });
  const q = new URLSearchParams();
  if (error) q.set('error', error);
  if (next !== '/') q.set('next', next);
  ctx.status = 303;
  ctx.redirect(`/login/mfa${q.size ? `?${q}` : ''}`);
}
