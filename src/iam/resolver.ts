import type { EventBus } from '../bus/bus.js';
import type { IamStore, User } from './store.js';

export interface ResolvedUser {
  user: User;
  /** union of the user's groups' permissions plus extra_permissions; roles are never read */
  permissions: Set<string>;
}

/**
 * Effective permissions, resolved in one place and cached per user for a short TTL.
 * Any change to a user, a group or a membership emits iam:permissions_changed, which drops
 * the affected entries (a later bus bridge carries it to other instances).
 */
export class PermissionResolver {
  private readonly cache = new Map<string, { value: ResolvedUser | null; expires: number }>();

  constructor(
    private readonly store: IamStore,
    private readonly ttlMs: number,
    bus: EventBus,
  ) {
    bus.on('iam:permissions_changed', (change) => {
      if (change.scope === 'user') this.cache.delete(change.user_id);
      else this.cache.clear();
    });
    // the cached record holds the password hash that Basic and live connections are checked against
    bus.on('iam:password_changed', ({ user_id }) => {
      this.cache.delete(user_id);
    });
  }

  async resolve(userId: string): Promise<ResolvedUser | null> {
    const hit = this.cache.get(userId);
    const now = Date.now();
    if (hit && hit.expires > now) return hit.value;
    const user = await this.store.userById(userId);
    let value: ResolvedUser | null = null;
    if (user) {
      const permissions = new Set<string>(user.extraPermissions);
      for (const g of await this.store.groupsNamed(user.groups)) for (const p of g.permissions) permissions.add(p);
      value = { user, permissions };
    }
    if (this.ttlMs > 0) {
      this.cache.set(userId, { value, expires: now + this.ttlMs });
      if (this.cache.size > 50_000) this.cache.delete(this.cache.keys().next().value!);
    }
    return value;
  }

  invalidate(userId?: string): void {
    if (userId) this.cache.delete(userId);
    else this.cache.clear();
  }
}
