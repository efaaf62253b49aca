/**
 * A login the provider knows to be right but may not let in: the directory proved the password
 * and refused the account (disabled, expired, its password expired or to be changed). Unlike a
 * wrong password, the person may be told why, since only whoever knows the password learns it.
 *
 * A provider throws LoginRefused; the chain goes on with the next provider (another one may
 * let the person in) and, when none does, hands the first refusal to the login, which answers
 * 401 with `details.reason` (and the login page shows the matching text). An unknown user, a
 * wrong password, and anything the directory says whatever password was typed (a locked
 * account) stay the generic 401: they must not tell whether a name exists.
 */

export type RefusalReason = 'account_disabled' | 'account_expired' | 'password_expired' | 'password_must_change' | 'logon_restricted';

/** What the person is told, on the login page and as the API's message. */
export const REFUSAL_TEXT: Record<RefusalReason, string> = {
  account_disabled: 'Your account is disabled in the directory.',
  account_expired: 'Your account has expired in the directory.',
  password_expired: 'Your password has expired: change it in the directory (for example when signing in to Windows), then sign in again.',
  password_must_change: 'Your password must be changed in the directory before you can sign in.',
  logon_restricted: 'Your account may not sign in at this time or from here.',
};

export class LoginRefused extends Error {
  constructor(
    /** the provider that refused */
    readonly provider: string,
    readonly reason: RefusalReason,
  ) {
    super(`${provider} refused the login: ${reason}`);
    this.name = 'LoginRefused';
  }
}

export function isRefusalReason(value: unknown): value is RefusalReason {
  return typeof value === 'string' && Object.hasOwn(REFUSAL_TEXT, value);
}
