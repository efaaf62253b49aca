import type { Context } from 'koa';
import { badField, rateLimited } from '../http/errors.js';
import type { User } from '../iam/store.js';
import type { AuthComponent } from './component.js';
import { logLoginFailure } from './attempts.js';

/**
 * Checks a signed-in user's current password (to change it): a guess like any other, so it
 * takes from the same per-address budget and the same lockout per (username, address) as a
 * login, and a wrong one is a `login_failed` line. Throws 429 when locked, 400 naming `field`
 * when wrong.
 */
export async function verifyCurrentPassword(auth: AuthComponent, ctx: Context, user: User, password: string, field = 'current_password'): Promise<void> {
  const ip = ctx.ip;
  const failed = (reason: 'invalid_credentials' | 'locked_out' | 'rate_limited') =>
    logLoginFailure(ctx.log, { username: user.username, ip, provider: 'local', reason, via: 'password_change' }, auth.iam.audit);
  const slow = auth.attempts.take(ip);
  if (slow > 0) {
    failed('rate_limited');
    throw rateLimited(slow);
  }
  const wait = await auth.lockout.begin(user.username, ip);
  if (wait > 0) {
    failed('locked_out');
    throw rateLimited(wait);
  }
  if (!(await auth.iam.passwords.verify(password, user.hashedPassword))) {
    failed('invalid_credentials');
    throw badField(field, 'is not correct');
  }
  await auth.lockout.succeed(user.username, ip);
}
