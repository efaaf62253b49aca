import bcrypt from 'bcryptjs';
import type { IamStore, User } from '../store.js';
import type { CredentialsProvider, ExternalProfile } from './types.js';

// verifying against a fixed hash when the user is unknown keeps timing from telling who exists
const DUMMY_HASH = bcrypt.hashSync('not-a-real-password', 10);

/** Local IAM: bcrypt-hashed passwords. A user without a password (SSO-only) cannot log in here. */
export class LocalProvider implements CredentialsProvider {
  readonly id = 'local';
  readonly kind = 'credentials' as const;
  readonly label = 'Local account';

  constructor(private readonly store: IamStore) {}

  /** The user when the password is right (used by HTTP Basic too). */
  async verifyUser(username: string, password: string): Promise<User | null> {
    if (!username || !password || password.length > 1024) return null;
    const user = await this.store.userByUsername(username);
    const ok = await bcrypt.compare(password, user?.hashed_password ?? DUMMY_HASH);
    if (!ok || !user || !user.hashed_password || user.disabled) return null;
    return user;
  }

  async verify(username: string, password: string): Promise<string | null> {
    return (await this.verifyUser(username, password))?.id ?? null;
  }

  async authenticate(username: string, password: string): Promise<ExternalProfile | null> {
    const id = await this.verify(username, password);
    if (!id) return null;
    const user = (await this.store.userById(id))!;
    return { provider: 'local', provider_user_id: user.username, username: user.username, email: user.email, display_name: user.display_name };
  }
}
