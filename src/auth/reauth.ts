import type { Context } from 'koa';
import { fieldError } from '../errors.js';
import type { User } from '../iam/store.js';
import type { AuthComponent } from './component.js';

/**
 * Checks a signed-in user's current password (to change it): a guess like any other, through
 * the attempt gate (the address's budget and lockout, a `login_failed` event when wrong).
 * Throws 429 when locked, 400 naming `field` when wrong.
 */
export async function verifyCurrentPassword(auth: AuthComponent, ctx: Context, user: User, password: string, field = 'current_password'): Promise<void> {
  const ok = await auth.gate.guard({ secret: 'password', username: user.username, ip: ctx.ip, via: 'password_change', provider: 'local', log: ctx.log }, () =>
    auth.iam.passwords.verify(password, user.hashedPassword),
  );
  if (!ok) throw fieldError(field, 'is not correct');
}
