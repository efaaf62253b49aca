import type { UserDirectory, UserRef } from './types.js';

/** The part of the IAM store that user:notify needs. */
export interface UserLookup {
  usersByIdOrName(ids: string[], names: string[]): Promise<Array<{ id: string; username: string }>>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** how long a resolved target is reused; a rename or delete drops it at once (forget) */
const TTL_MS = 30_000;
const MAX_ENTRIES = 10_000;

/**
 * `user` of user:notify is a user id or a username: an id wins when a ref names both. Many refs
 * are resolved in one query, and recent answers are kept briefly (a sender notifies the same
 * people again and again); `forget` drops them when users change.
 */
export function userDirectory(store: UserLookup): UserDirectory & { forget(): void } {
  const cache = new Map<string, { user: UserRef; until: number }>();
  return {
    forget() {
      cache.clear();
    },
    async findMany(refs) {
      const out = new Map<string, UserRef>();
      const now = Date.now();
      const missing: string[] = [];
      for (const ref of refs) {
        const hit = cache.get(ref);
        if (hit && hit.until > now) out.set(ref, hit.user);
        else missing.push(ref);
      }
      if (missing.length === 0) return out;
      const users = await store.usersByIdOrName(
        missing.filter((r) => UUID.test(r)),
        missing,
      );
      const byName = new Map(users.map((u) => [u.username, u]));
      const byId = new Map(users.map((u) => [u.id, u]));
      for (const ref of missing) {
        const u = (UUID.test(ref) ? byId.get(ref) : undefined) ?? byName.get(ref);
        if (!u) continue;
        const user = { id: u.id, username: u.username };
        out.set(ref, user);
        if (cache.size >= MAX_ENTRIES) cache.delete(cache.keys().next().value!);
        cache.set(ref, { user, until: now + TTL_MS });
      }
      return out;
    },
  };
}
