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

export type RefusalReason =
  | 'account_disabled'
  | 'account_expired'
  | 'password_expired'
  | 'password_must_change'
  | 'logon_restricted'
  // the directory could not be asked (no server answered, TLS failed): said whatever was typed, and it reveals nothing of the name
  | 'directory_unavailable';

/**
 * What a directory says of an account whatever password was typed (AD's locked account): the
 * log line and the audit event carry it, the person is told nothing (it would reveal that the
 * name exists), and the chain goes on as after a wrong password.
 */
export type QuietRefusal = 'account_locked';

/** What the person is told, on the login page and as the API's message. */
export const REFUSAL_TEXT: Record<RefusalReason, string> = {
  account_disabled: 'Your account is disabled in the directory.',
  account_expired: 'Your account has expired in the directory.',
  password_expired: 'Your password has expired: change it in the directory (for example when signing in to Windows), then sign in again.',
  password_must_change: 'Your password must be changed in the directory before you can sign in.',
  logon_restricted: 'Your account may not sign in at this time or from here.',
  directory_unavailable: 'The directory is unavailable, so your password cannot be checked now. Try again in a few minutes, or tell your administrator.',
};

export class LoginRefused extends Error {
  constructor(
    /** the provider that refused */
    readonly provider: string,
    readonly reason: RefusalReason | QuietRefusal,
  ) {
    super(`${provider} refused the login: ${reason}`);
    this.name = 'LoginRefused';
  }

  /** whether the person may be told why (the directory said it only because the password was right) */
  get told(): boolean {
    return isRefusalReason(this.reason);
  }
}

export function isRefusalReason(value: unknown): value is RefusalReason {
  return typeof value === 'string' && Object.hasOwn(REFUSAL_TEXT, value);
}
