// What a user change (UserAdmin.update, src/iam/users.ts) changes, as its audit event says it.
import type { User } from './store.js';

/** A change to a user (already validated in shape: patchUserSchema). */
export interface UserChange {
  email?: string | null;
  displayName?: string | null;
  groups?: string[];
  extraPermissions?: string[];
  roles?: string[];
  disabled?: boolean;
  password?: string;
}

/** Which of `before` are gone from `after`, and which are new in it. */
export const listDiff = (before: readonly string[], after: readonly string[]) => ({
  added: after.filter((x) => !before.includes(x)),
  removed: before.filter((x) => !after.includes(x)),
});

/** Whether a change's value for a field is what the user holds already (lists in any order; no display name and '' alike). */
export function unchanged(user: User, field: keyof Omit<UserChange, 'password'>, value: unknown): boolean {
  const now = user[field];
  if (Array.isArray(now) && Array.isArray(value)) {
    const { added, removed } = listDiff(now as string[], value as string[]);
    return added.length === 0 && removed.length === 0;
  }
  // false, null and '' alike: an enabled user is not disabled by `disabled: false`
  return (now || null) === (value || null);
}

/**
 * What changed, for the event: names of fields, and the values that are access (never a
 * password): the lists before and after, and what was added and removed, so a reader sees
 * "groups_added: [ops]" without comparing two lists.
 */
export function changeDetails(before: User, after: User, fields: string[], granted: string[]): Record<string, unknown> {
  const details: Record<string, unknown> = { fields };
  const lists = [
    ['groups', 'groups', after.groups, before.groups],
    ['extraPermissions', 'extra_permissions', after.extraPermissions, before.extraPermissions],
    ['roles', 'roles', after.roles, before.roles],
  ] as const;
  for (const [field, key, now, was] of lists) {
    if (!fields.includes(field)) continue;
    const { added, removed } = listDiff(was, now);
    Object.assign(details, { [key]: now, [`previous_${key}`]: was, [`${key}_added`]: added, [`${key}_removed`]: removed });
  }
  if (fields.includes('disabled')) details.disabled = after.disabled;
  if (after.directoryState !== before.directoryState) details.directory_state = after.directoryState;
  if (granted.length) details.host_permissions = granted;
  return details;
}
