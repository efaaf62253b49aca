import Joi from 'joi';
import { PERMISSION_ID } from './permissions.js';

import { GROUP_NAME, USERNAME } from '../settings-table.js';

export { GROUP_NAME, USERNAME };
export const PASSWORD = Joi.string().min(8).max(200);

const permissionList = Joi.array().items(Joi.string().max(256)).max(500).unique();
const groupList = Joi.array().items(Joi.string().pattern(GROUP_NAME)).max(100).unique();

export const createUserSchema = Joi.object({
  username: Joi.string().pattern(USERNAME).required(),
  password: PASSWORD,
  email: Joi.string().email({ tlds: false }).max(320).allow(null),
  display_name: Joi.string().trim().max(256).allow(null, ''),
  groups: groupList,
  extra_permissions: permissionList,
  roles: Joi.array().items(Joi.string().valid('superadmin', 'bot')).unique(),
});

export const patchUserSchema = Joi.object({
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
  expires_at: Joi.date().iso().greater('now'),
});
