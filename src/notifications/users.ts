import type { UserDirectory } from './types.js';

/** The part of the IAM store that user:notify needs. */
export interface UserLookup {
  userById(id: string): Promise<{ id: string; username: string } | null>;
  userByUsername(username: string): Promise<{ id: string; username: string } | null>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** `user` of user:notify is a user id or a username: an id is tried first when it looks like one. */
export function userDirectory(store: UserLookup): UserDirectory {
  return {
    async find(ref) {
      const byId = UUID.test(ref) ? await store.userById(ref) : null;
      const user = byId ?? (await store.userByUsername(ref));
      return user ? { id: user.id, username: user.username } : null;
    },
  };
}
