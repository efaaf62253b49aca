import type { Passwords } from '../../iam/passwords.js';
import { PASSWORD_MAX } from '../../iam/passwords.js';
import type { IamStore, User } from '../../iam/store.js';
import type { CredentialsProvider, ExternalProfile } from './types.js';

/** Local IAM: bcrypt-hashed passwords. A user without a password (SSO-only) cannot log in here. */
export class LocalProvider implements CredentialsProvider {
  readonly id = 'local';
  readonly kind = 'credentials' as const;
  readonly label = 'Local account';

  constructor(
    private readonly store: IamStore,
    private readonly passwords: Passwords,
  ) {}

  /** The user when the password is right (used by HTTP Basic too). An unknown user costs the same hash. */
  async verifyUser(username: string, password: string): Promise<User | null> {
    if (!username || !password || password.length > PASSWORD_MAX) return null;
    const user = await this.store.userByUsername(username);
    const ok = await this.passwords.verify(password, user?.hashedPassword ?? null);
    if (!ok || !user || !user.hashedPassword || user.disabled) return null;
    // the hash takes a while: a password cleared or changed meanwhile (an account starting afresh) proves nothing now
    const now = await this.store.userById(user.id);
    return now && now.hashedPassword === user.hashedPassword && !now.disabled ? now : null;
  }

  async authenticate(username: string, password: string): Promise<ExternalProfile | null> {
    const user = await this.verifyUser(username, password);
    if (!user) return null;
    return { provider: 'local', provider_user_id: user.username, username: user.username, email: user.email, display_name: user.displayName };
  }
}
