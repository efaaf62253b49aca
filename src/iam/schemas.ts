import Joi from 'joi';
import { PERMISSION_ID } from './permissions.js';
import type { Identity, User } from './store.js';

import { GROUP_NAME, USERNAME } from '../settings-table.js';

export { GROUP_NAME, USERNAME };
export const PASSWORD = Joi.string().min(8).max(200);

const permissionList = Joi.array().items(Joi.string().max(256)).max(500).unique();
const groupList = Joi.array().items(Joi.string().pattern(GROUP_NAME)).max(100).unique();

/** The bodies of POST /api/users and PATCH /api/users/:id, as clients write them. */
export interface CreateUserBody {
  username: string;
  password?: string;
  email?: string | null;
  display_name?: string | null;
  groups?: string[];
  extra_permissions?: string[];
  roles?: string[];
}
export type PatchUserBody = Partial<Omit<CreateUserBody, 'username'>> & { disabled?: boolean };

export const createUserSchema = Joi.object<CreateUserBody>({
  username: Joi.string().pattern(USERNAME).required(),
  password: PASSWORD,
  email: Joi.string().email({ tlds: false }).max(320).allow(null),
  display_name: Joi.string().trim().max(256).allow(null, ''),
  groups: groupList,
  extra_permissions: permissionList,
  roles: Joi.array().items(Joi.string().valid('superadmin', 'bot')).unique(),
});

export const patchUserSchema = Joi.object<PatchUserBody>({
  email: Joi.string().email({ tlds: false }).max(320).allow(null),
  display_name: Joi.string().trim().max(256).allow(null, ''),
  groups: groupList,
  extra_permissions: permissionList,
  roles: Joi.array().items(Joi.string().valid('superadmin', 'bot')).unique(),
  disabled: Joi.boolean(),
  password: PASSWORD,
}).min(1);

export const passwordSchema = Joi.object({
  new_password: PASSWORD.required(),
  current_password: Joi.string().max(200),
});

export const createGroupSchema = Joi.object({
  name: Joi.string().pattern(GROUP_NAME).required(),
  description: Joi.string().max(1000).allow(''),
  permissions: permissionList,
});

export const patchGroupSchema = Joi.object({
  name: Joi.string().pattern(GROUP_NAME),
  description: Joi.string().max(1000).allow(''),
  permissions: permissionList,
}).min(1);

export const uuidParam = Joi.string().guid().required();

export const createKeySchema = Joi.object({
  label: Joi.string().trim().min(1).max(128).required(),
  scopes: Joi.array().items(Joi.string().pattern(PERMISSION_ID).max(256)).max(100).unique(),
  expires_at: Joi.date().iso().greater('now').description('a time in the future'),
});

/**
 * A validated create or change body (wire names) -> the fields UserAdmin takes. After
 * validation, so a 400 still names the field as the client wrote it.
 */
export function userFieldsOf<T extends { display_name?: string | null; extra_permissions?: string[] }>(body: T): Omit<T, 'display_name' | 'extra_permissions'> & { displayName?: string | null; extraPermissions?: string[] } {
  const { display_name: displayName, extra_permissions: extraPermissions, ...rest } = body;
  return { ...rest, ...(displayName !== undefined ? { displayName } : {}), ...(extraPermissions !== undefined ? { extraPermissions } : {}) };
}

/** A user as the API (and the CLI's --json) shows it: wire names, never the password hash. */
export function publicUser(u: User, identities: Identity[] = []) {
  return {
    id: u.id,
    username: u.username,
    display_name: u.displayName,
    email: u.email,
    groups: u.groups,
    roles: u.roles,
    extra_permissions: u.extraPermissions,
    disabled: u.disabled,
    /** has a second factor */
    mfa: Boolean(u.mfaEnabled),
    identities: identities.map((i) => ({ provider: i.provider, provider_user_id: i.providerUserId })),
    created_at: new Date(u.createdAt).toISOString(),
  };
}

