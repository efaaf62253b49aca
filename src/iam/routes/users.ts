import { ADMIN_USERS_PERMISSION } from '../permissions.js';
import type Router from '@koa/router';
import Joi from 'joi';
import type { IamComponent } from '../component.js';
import { ApiRouter } from '../../http/api.js';
import { callerOf, ownSession } from './caller.js';
import { createUserSchema, patchUserSchema, publicUsers, userDetailView, userFieldsOf, userView, uuidParam, withWarnings } from '../schemas.js';
import type { User } from '../store.js';
import { passwordClearedWarning } from '../afresh.js';

export const ADMIN_USERS = ADMIN_USERS_PERMISSION;

/** `:id` of a user's routes. */
export interface UserIdParams {
  id: string;
}

export const userIdParams = Joi.object<UserIdParams, true>({ id: uuidParam.description('the user id (UUID)') });

const userListView = Joi.object({ users: Joi.array().items(userView) });
const usersQuery = Joi.object<{ username?: string }, true>({ username: Joi.string().max(64).description('a username, in any case') });

/** What the users API asks of other areas. */
export interface UserRouteOptions {
  /** why nobody can sign in to an account created without a password, or null (AuthComponent.noPasswordWarning) */
  noPasswordWarning?(user: User): Promise<string | null>;
}

const createdUserView = withWarnings(
  userView,
  'CreatedUser',
  'without a password: why nobody can sign in to it yet (no single sign-on configured, or none that would link it rather than make a new account); absent when a password was given or a sign-on can reach it',
);

const changedUserView = withWarnings(
  userView,
  'ChangedUser',
  'the change first brought the account to the host and its password, which no superadmin had set, was cleared: what to do (docs/security.md)',
);

/**
 * /api/users: the user administration of the model, translated to HTTP; the rules are
 * UserAdmin's (src/iam/users.ts). A user's password and keys are credentials: src/auth/routes/user-credentials.ts.
 */
export function userRoutes(iam: IamComponent, opts: UserRouteOptions = {}): Router {
  const api = new ApiRouter({ prefix: '/api/users', tag: 'users' });
  const ADMIN = { permission: ADMIN_USERS };

  const users = iam.users;
  const load = (id: string) => users.find({ id });
  const idParams = userIdParams;
  // the host boundary (src/iam/policy.ts) and a second factor not fresh enough also answer 403
  const HOST_REFUSAL = 'or step_up_required: a superadmin must verify the second factor again first';

  api.endpoint(
    {
      method: 'GET',
      path: '/',
      operationId: 'listUsers',
      summary: 'List users',
      description: 'Every user, by name; `username` finds one by name, in any case (an empty list when there is none).',
      auth: ADMIN,
      query: usersQuery,
      responses: { 200: { description: 'the users', schema: userListView } },
    },
    async (_ctx, { query }) => {
      return { users: await publicUsers(iam.store, await iam.store.listUsers({ username: query.username })) };
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/',
      operationId: 'createUser',
      summary: 'Create a user',
      description: 'Without a password the user can only sign in through single sign-on. `roles` only by a superadmin or the system key.',
      auth: ADMIN,
      body: createUserSchema,
      responses: {
        201: { description: 'the user, and `warnings` when nobody can sign in with it yet', schema: createdUserView },
        403: `forbidden: the caller lacks ${ADMIN_USERS}, or hands out \`roles\` or permissions that reach the host (directly or through a group) without being a superadmin; or gives (through \`groups\` or \`extra_permissions\`) a permission the caller does not hold themself (no self-escalation); ${HOST_REFUSAL}`,
        409: 'the username is taken',
      },
    },
    async (ctx, { body }) => {
      const user = await users.create(callerOf(ctx), userFieldsOf(body));
      ctx.status = 201;
      const [view] = await publicUsers(iam.store, [user]);
      const warning = body.password ? null : ((await opts.noPasswordWarning?.(user)) ?? null);
      return warning ? { ...view, warnings: [warning] } : view;
    },
  );

  api.endpoint(
    {
      method: 'GET',
      path: '/:id',
      operationId: 'getUser',
      summary: 'One user with linked identities',
      auth: ADMIN,
      params: idParams,
      responses: { 200: { description: 'the user', schema: userDetailView }, 404: 'no such user' },
    },
    async (_ctx, { params }) => {
      const user = await load(params.id);
      const [view] = await publicUsers(iam.store, [user]);
      return { ...view, password_pinned_by: iam.passwordPinnedBy(user.username) };
    },
  );

  api.endpoint(
    {
      method: 'PATCH',
      path: '/:id',
      operationId: 'updateUser',
      summary: 'Change a user (groups, extra permissions, profile, disabled, password)',
      description:
        "The last enabled member of INT_ADMIN cannot leave it or be disabled (409). An account that reaches the host (or a superadmin or bot account) is changed only by itself or a superadmin, but for taking access away (disabling, leaving groups, dropping permissions). One's own `password` is not changed here (400): `POST /api/users/{id}/password` with `current_password`. A change that first brings an account to the host (or a protected role) starts it afresh: its keys and sessions end, and a password no superadmin set is cleared with its second factors (`warnings` says so).",
      auth: ADMIN,
      params: idParams,
      body: patchUserSchema,
      responses: {
        200: { description: 'the user, and `warnings` when the change cleared its password', schema: changedUserView },
        403: `forbidden: the caller lacks ${ADMIN_USERS}, or the change hands out host access or \`roles\`, or changes an account that reaches the host (or a superadmin or bot account) without being a superadmin, or a scoped API key changes its owner's password or e-mail address; or gives (through \`groups\` or \`extra_permissions\`) a permission the caller does not hold themself (no self-escalation); ${HOST_REFUSAL}`,
        404: 'no such user',
        409: "the last enabled member of INT_ADMIN, or the last enabled superadmin (losing the role or disabled); or a change of the bootstrap admin's superadmin flag (every start sets it from SERVICE_ADMIN_FORCE_SUPERADMIN)",
      },
    },
    async (ctx, { params, body }) => {
      const user = await load(params.id);
      const updated = await users.update(callerOf(ctx), user, userFieldsOf(body), ownSession(ctx, params.id));
      const [view] = await publicUsers(iam.store, [updated]);
      const warning = passwordClearedWarning(user, updated);
      return warning ? { ...view, warnings: [warning] } : view;
    },
  );

  api.endpoint(
    {
      method: 'DELETE',
      path: '/:id',
      operationId: 'deleteUser',
      summary: 'Delete a user',
      auth: ADMIN,
      params: idParams,
      responses: {
        204: 'deleted',
        403: `forbidden: the caller lacks ${ADMIN_USERS}, or deletes an account that reaches the host (or a superadmin or bot account) without being a superadmin; ${HOST_REFUSAL}`,
        404: 'no such user',
        409: 'the last enabled member of INT_ADMIN, or the last enabled superadmin; or a bootstrap account (admin, bot: every start makes it again; disable it instead)',
      },
    },
    async (ctx, { params }) => {
      await users.remove(callerOf(ctx), await load(params.id));
      ctx.status = 204;
    },
  );

  return api.router;
}
