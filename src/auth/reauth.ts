import type { Context } from 'koa';
import { fieldError } from '../errors.js';
import type { User } from '../iam/store.js';
import type { AuthComponent } from './component.js';
import type { AttemptVia } from './attempt-gate.js';

/** How recent a sign-in of the session stands in for the password before a first second factor. */
export const FRESH_SIGN_IN_MS = 5 * 60_000;

/**
 * Checks a signed-in user's current password (to change it, or before a first factor): a guess
 * like any other, through the attempt gate (the address's budget and lockout, a `login_failed`
 * event when wrong). Throws 429 when locked, 400 naming `field` when wrong.
 */
export async function verifyCurrentPassword(
  auth: AuthComponent,
  ctx: Context,
  user: User,
  password: string,
  field = 'current_password',
  via: AttemptVia = 'password_change',
): Promise<void> {
  const ok = await auth.gate.guard({ secret: 'password', username: user.username, ip: ctx.ip, via, provider: 'local', log: ctx.log }, () =>
    auth.iam.passwords.verify(password, user.hashedPassword),
  );
  if (!ok) throw fieldError(field, 'is not correct');
}

/**
 * Before an account's first second factor (whoever enrols it holds the account from then on:
 * the other sessions end, the recovery codes are theirs): proof that the person at this session
 * is the account's, not a stolen session. The current password (`password`, through the attempt
 * gate), or a sign-in of this session within FRESH_SIGN_IN_MS; an account without a local
 * password signs in through its provider again. An account with a factor proves that instead
 * (the routes' step-up).
 */
export async function requireFreshSignIn(auth: AuthComponent, ctx: Context, user: User, password: string | undefined): Promise<void> {
  if (user.mfaEnabled) return;
  const proof = ctx.state.identity?.proof;
  const signedInAt = proof?.kind === 'credential' ? proof.signed_in_at : undefined;
  if (signedInAt !== undefined && Date.now() - signedInAt <= FRESH_SIGN_IN_MS) return;
  if (password !== undefined && user.hashedPassword) return verifyCurrentPassword(auth, ctx, user, password, 'current_password', 'factor_enrolment');
  throw fieldError(
    'current_password',
    user.hashedPassword
      ? 'is required: a first second factor needs your current password, or a sign-in within the last 5 minutes'
      : 'cannot stand in here (this account signs in through its provider): sign in again, then set up the factor within 5 minutes',
  );
}
