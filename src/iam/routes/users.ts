import type Router from '@koa/router';
import Joi from 'joi';
import type { IamComponent } from '../component.js';
import { ApiRouter } from '../../http/api.js';
import { callerOf, ownSession } from './caller.js';
import { createUserSchema, patchUserSchema, publicUser, userFieldsOf, uuidParam } from '../schemas.js';

export const ADMIN_USERS = 'feature:admin.users';

export const userIdParams = Joi.object({ id: uuidParam.description('the user id (UUID)') });

const userView = Joi.object({
  id: Joi.string().guid(),
  username: Joi.string(),
  display_name: Joi.string().allow(null),
  email: Joi.string().allow(null),
  groups: Joi.array().items(Joi.string()),
  roles: Joi.array().items(Joi.string()),
  extra_permissions: Joi.array().items(Joi.string()),
  disabled: Joi.boolean(),
  mfa: Joi.boolean().description('has a second factor (an authenticator app or a passkey)'),
  identities: Joi.array().items(Joi.object({ provider: Joi.string(), provider_user_id: Joi.string() })),
  created_at: Joi.string().isoDate(),
});

/**
 * /api/users: the user administration of the model, translated to HTTP; the rules are
 * UserAdmin's (src/iam/users.ts). A user's password and keys are credentials: src/auth/routes/user-credentials.ts.
 */
export function userRoutes(iam: IamComponent): Router {
  const api = new ApiRouter({ prefix: '/api/users', tag: 'users' });
  const ADMIN = { permission: ADMIN_USERS };

  const users = iam.users;
  const load = (id: string) => users.find({ id });
  const idParams = userIdParams;

  api.endpoint(
    { method: 'GET', path: '/', summary: 'List users', auth: ADMIN, responses: { 200: { description: 'the users', schema: Joi.object({ users: Joi.array().items(userView) }) } } },
    async () => {
      const all = await iam.store.listUsers();
      const ids = await iam.store.identitiesOf(all.map((u) => u.id));
      return { users: all.map((u) => publicUser(u, ids.get(u.id))) };
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/',
      summary: 'Create a user',
      description: 'Without a password the user can only sign in through single sign-on. `roles` only by a superadmin or the system key.',
      auth: ADMIN,
      body: createUserSchema,
      responses: { 201: { description: 'the user', schema: userView }, 409: 'the username is taken' },
    },
    async (ctx, { body }) => {
      const user = await users.create(callerOf(ctx), userFieldsOf(body));
      ctx.status = 201;
      return publicUser(user, body.password ? [{ provider: 'local', providerUserId: user.username }] : []);
    },
  );

  // a bootstrap account's password may be set by the environment whenever its value changes
  const oneUserView = userView.keys({
    password_pinned_by: Joi.string().allow(null).description('the environment variable (SERVICE_ADMIN_PASSWORD, SERVICE_BOT_PASSWORD) that sets this password again at a start where its value has changed; null: none'),
  });
  api.endpoint(
    { method: 'GET', path: '/:id', summary: 'One user with linked identities', auth: ADMIN, params: idParams, responses: { 200: { description: 'the user', schema: oneUserView }, 404: 'no such user' } },
    async (_ctx, { params }) => {
      const user = await load(params.id);
      return { ...publicUser(user, (await iam.store.identitiesOf([user.id])).get(user.id)), password_pinned_by: iam.passwordPinnedBy(user.username) };
    },
  );

  api.endpoint(
    {
      method: 'PATCH',
      path: '/:id',
      summary: 'Change a user (groups, extra permissions, profile, disabled, password)',
      description: 'The last enabled member of INT_ADMIN cannot leave it or be disabled (409). An account that reaches the host (or a superadmin or bot account) is changed only by itself or a superadmin, but for taking access away (disabling, leaving groups, dropping permissions).',
      auth: ADMIN,
      params: idParams,
      body: patchUserSchema,
      responses: { 200: { description: 'the user', schema: userView }, 403: 'the change hands out host access', 404: 'no such user', 409: 'last administrator' },
    },
    async (ctx, { params, body }) => {
      const updated = await users.update(callerOf(ctx), await load(params.id), userFieldsOf(body), ownSession(ctx, params.id));
      return publicUser(updated, (await iam.store.identitiesOf([updated.id])).get(updated.id));
    },
  );

  api.endpoint(
    { method: 'DELETE', path: '/:id', summary: 'Delete a user', auth: ADMIN, params: idParams, responses: { 204: 'deleted', 404: 'no such user', 409: 'last administrator' } },
    async (ctx, { params }) => {
      await users.remove(callerOf(ctx), await load(params.id));
      ctx.status = 204;
    },
  );

  return api.router;
}
