import type { UserDirectory, UserRef } from './types.js';

/** The part of the IAM store that user:notify needs. */
export interface UserLookup {
  usersByIdOrName(ids: string[], names: string[]): Promise<Array<{ id: string; username: string }>>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** `user` of user:notify is a user id or a username: an id wins when a ref names both. One query for many refs. */
export function userDirectory(store: UserLookup): UserDirectory {
  return {
    async findMany(refs) {
      const out = new Map<string, UserRef>();
      if (refs.length === 0) return out;
      const users = await store.usersByIdOrName(refs.filter((r) => UUID.test(r)), refs);
      const byName = new Map(users.map((u) => [u.username, u]));
      const byId = new Map(users.map((u) => [u.id, u]));
      for (const ref of refs) {
        const u = (UUID.test(ref) ? byId.get(ref) : undefined) ?? byName.get(ref);
        if (u) out.set(ref, { id: u.id, username: u.username });
      }
      return out;
    },
  };
}
