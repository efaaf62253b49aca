import Joi from 'joi';
import { AUDIT_ACTIONS } from './audit.js';
import { unknownAuditAction } from './audit-types.js';
import { PERMISSION_ID } from './permissions.js';
import { PROTECTED_ROLES } from './policy.js';
import type { IamStore, Identity, User } from './store.js';

import { GROUP_NAME, groupNameRule, parseDuration, USERNAME, usernameRule } from '../settings-table.js';

export { GROUP_NAME, groupNameRule, USERNAME, usernameRule };
export const PASSWORD = Joi.string().min(8).max(200);

const permissionList = Joi.array().items(Joi.string().max(256)).max(500).unique();
const groupList = Joi.array().items(groupNameRule).max(100).unique();
const roleList = Joi.array()
  .items(Joi.string().valid(...PROTECTED_ROLES))
  .unique();

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

export const createUserSchema = Joi.object<CreateUserBody, true>({
  username: usernameRule.required(),
  password: PASSWORD,
  email: Joi.string().email({ tlds: false }).max(320).allow(null),
  display_name: Joi.string().trim().max(256).allow(null, ''),
  groups: groupList,
  extra_permissions: permissionList,
  roles: roleList,
});

export const patchUserSchema = Joi.object<PatchUserBody, true>({
  email: Joi.string().email({ tlds: false }).max(320).allow(null),
  display_name: Joi.string().trim().max(256).allow(null, ''),
  groups: groupList,
  extra_permissions: permissionList,
  roles: roleList,
  disabled: Joi.boolean(),
  password: PASSWORD,
}).min(1);

/** The body of PUT /api/users/:id/password and of a password change of one's own. */
export interface PasswordBody {
  new_password: string;
  current_password?: string;
}

export const passwordSchema = Joi.object<PasswordBody, true>({
  new_password: PASSWORD.required(),
  current_password: Joi.string().max(200),
});

/** The bodies of POST /api/groups and PATCH /api/groups/:name. */
export interface CreateGroupBody {
  name: string;
  description?: string;
  permissions?: string[];
}
export type PatchGroupBody = Partial<CreateGroupBody>;

export const createGroupSchema = Joi.object<CreateGroupBody, true>({
  name: groupNameRule.required(),
  description: Joi.string().max(1000).allow(''),
  permissions: permissionList,
});

export const patchGroupSchema = Joi.object<PatchGroupBody, true>({
  name: groupNameRule,
  description: Joi.string().max(1000).allow(''),
  permissions: permissionList,
}).min(1);

export const uuidParam = Joi.string().guid().required();

/** The body of POST /api/me/api-keys (and of `key issue` in the CLI); `expires_at` converted to a Date. */
export interface CreateKeyBody {
  label: string;
  scopes?: string[];
  expires_at?: Date;
}

export const createKeySchema = Joi.object<CreateKeyBody, true>({
  label: Joi.string().trim().min(1).max(128).required(),
  scopes: Joi.array()
    .items(
      Joi.string()
        .pattern(PERMISSION_ID)
        .max(256)
        .messages({ 'string.pattern.base': 'must be a permission, a name and its parts joined by colons such as api:read or feature:admin.users' }),
    )
    .max(100)
    .unique(),
  expires_at: Joi.date()
    .iso()
    .greater('now')
    .max('9999-12-31T23:59:59Z')
    .messages({ 'date.max': 'must be before 9999-12-31' })
    .description('a time in the future, before the year 10000'),
});

/**
 * A validated create or change body (wire names) -> the fields UserAdmin takes. After
 * validation, so a 400 still names the field as the client wrote it.
 */
export function userFieldsOf<T extends { display_name?: string | null; extra_permissions?: string[] }>(
  body: T,
): Omit<T, 'display_name' | 'extra_permissions'> & { displayName?: string | null; extraPermissions?: string[] } {
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

/** Users as the API and the CLI show them, each with the sign-ins linked to it (one read for all). */
export async function publicUsers(store: Pick<IamStore, 'identitiesOf'>, users: User[]): Promise<Array<ReturnType<typeof publicUser>>> {
  const identities = await store.identitiesOf(users.map((u) => u.id));
  return users.map((u) => publicUser(u, identities.get(u.id)));
}

/*
 * The answers of the IAM routes, each shape named once (components of the API document). Every
 * key is sent unless it says optional.
 */

/** A user as publicUser() writes it: the list, a creation and a change answer it. */
export const userView = Joi.object({
  id: Joi.string().guid(),
  username: Joi.string(),
  display_name: Joi.string().allow(null),
  email: Joi.string().allow(null),
  groups: Joi.array().items(Joi.string()),
  // not an enum: the column may hold a value written outside the API, shown as it is (it grants nothing)
  roles: Joi.array()
    .items(Joi.string())
    .description(`the roles the account holds (the API sets ${PROTECTED_ROLES.join(', ')})`),
  extra_permissions: Joi.array().items(Joi.string()),
  disabled: Joi.boolean(),
  mfa: Joi.boolean().description('has a second factor (an authenticator app or a passkey)'),
  identities: Joi.array().items(Joi.object({ provider: Joi.string(), provider_user_id: Joi.string() })),
  created_at: Joi.string().isoDate(),
}).id('User');

/** One user (GET /api/users/:id): a bootstrap account's password may be set by the environment whenever its value changes. */
export const userDetailView = userView
  .keys({
    password_pinned_by: Joi.string()
      .allow(null)
      .description(
        'the environment variable (SERVICE_ADMIN_PASSWORD, SERVICE_BOT_PASSWORD) that sets this password again at a start where its value has changed; null: none',
      ),
  })
  .id('UserDetail');

/** `view` with the `warnings` an answer adds when there is something to tell (`about`: when, and what they say). */
export function withWarnings(view: Joi.ObjectSchema, id: string, about: string): Joi.ObjectSchema {
  return view.keys({ warnings: Joi.array().items(Joi.string()).optional().description(about) }).id(id);
}

export const groupView = Joi.object({
  name: Joi.string(),
  description: Joi.string().allow(''),
  permissions: Joi.array().items(Joi.string()),
  members: Joi.array().items(Joi.string()).description('usernames'),
}).id('Group');

/** A group as a change left it, with what to tell about the members it first brought to the host. */
export const changedGroupView = withWarnings(
  groupView,
  'ChangedGroup',
  'a member the change first brought to the host lost a password no superadmin had set: what to do (docs/security.md)',
);

/** An entry of the permission catalog (CatalogEntry). */
export const permissionView = Joi.object({
  id: Joi.string(),
  description: Joi.string(),
  plugin: Joi.string().optional().description('the plugin that declares it; absent for core permissions'),
}).id('Permission');

/** An event of the audit trail as AuditTrail.list() answers it (the `audit:event` frame carries the same). */
export const auditEventView = Joi.object({
  seq: Joi.number().integer(),
  id: Joi.string(),
  at: Joi.string().isoDate(),
  actor: Joi.object({ user_id: Joi.string().allow(null), username: Joi.string(), method: Joi.string().allow(null), ip: Joi.string().allow(null) }),
  // not an enum: events recorded by an older version stay in the trail with the actions of their time
  action: Joi.string().description(`what was done (this version records ${AUDIT_ACTIONS.join(', ')})`),
  target: Joi.object({ type: Joi.string(), id: Joi.string().allow(null), name: Joi.string().allow(null) }),
  outcome: Joi.string().valid('success', 'failure', 'denied'),
  // each action has its own details: an open object by design
  details: Joi.object().unknown(true).description('what changed (names of settings, never their values)'),
  hash: Joi.string().description("SHA-256 of the previous event's hash and this event's canonical JSON"),
}).id('AuditEvent');

/**
 * Where a look back at the audit trail starts (`since` of GET /api/audit, `--since` of the CLI):
 * a duration back from now (`7d`, `12h`, `30m`) or an ISO 8601 date; a Date once validated.
 */
// typed as the date schema it is to the query objects that hold it: either branch gives a Date
/** An audit filter's action: one this version records, or a prefix ending in a dot (`user.`); anything else names them. */
export const auditActionFilter = Joi.string()
  .max(64)
  .custom((value: string, helpers) => {
    const why = unknownAuditAction(value);
    return why ? helpers.message({ custom: why }) : value;
  })
  .description(`an action (${AUDIT_ACTIONS.join(', ')}), or a prefix ending in a dot (\`user.\`)`);

export const auditSince = Joi.alternatives()
  .try(
    // the durations of the configuration (a bare number is seconds); one too long for a date is refused
    Joi.string().custom((v: string, helpers) => {
      const ms = parseDuration(v);
      const at = ms === null ? null : new Date(Date.now() - ms);
      return at && !Number.isNaN(at.getTime()) ? at : helpers.error('any.invalid');
    }),
    Joi.date().iso(),
  )
  .messages({ 'alternatives.match': 'must be a duration back from now such as 7d or 12h, or an ISO 8601 date' })
  .description('events at or after this time: a duration back from now (7d, 12h, 30m) or an ISO 8601 date') as unknown as Joi.DateSchema<Date>;
