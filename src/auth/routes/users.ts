import type Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { AuthComponent } from '../component.js';
import { identity } from '../guards.js';
import { ApiRouter } from '../../http/api.js';
import { publicKey, publicKeySchema } from '../api-keys.js';
import { verifyCurrentPassword } from '../reauth.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';
import { badField, forbidden, forbiddenBecause, notFound } from '../../http/errors.js';
import { createUserSchema, patchUserSchema, passwordSchema, publicUser, userFieldsOf, uuidParam } from '../../iam/schemas.js';

const ADMIN_USERS = 'feature:admin.users';

/** The web session a user changes their own password from: it stays, their others end. */
function sessionOf(ctx: Context, userId: string): string | null {
  const id = ctx.state.identity;
  return id?.userId === userId && (id.method === 'session_cookie' || id.method === 'session_token') ? id.credentialId : null;
}

const idParams = Joi.object({ id: uuidParam.description('the user id (UUID)') });
const keyParams = Joi.object({ id: uuidParam.description('the user id (UUID)'), keyId: Joi.string().max(128).required().description('the key id') });

const userView = Joi.object({
  id: Joi.string().guid(),
  username: Joi.string(),
  display_name: Joi.string().allow(null),
  email: Joi.string().allow(null),
  groups: Joi.array().items(Joi.string()),
  roles: Joi.array().items(Joi.string()),
  extra_permissions: Joi.array().items(Joi.string()),
  disabled: Joi.boolean(),
  identities: Joi.array().items(Joi.object({ provider: Joi.string(), provider_user_id: Joi.string() })),
  created_at: Joi.string().isoDate(),
});

export function userRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ prefix: '/api/users', tag: 'users' });
  const ADMIN = { permission: ADMIN_USERS };

  const users = auth.iam.users;
  const load = (id: string) => users.find({ id });

  api.endpoint(
    { method: 'GET', path: '/', summary: 'List users', auth: ADMIN, responses: { 200: { description: 'the users', schema: Joi.object({ users: Joi.array().items(userView) }) } } },
    async () => {
      const all = await auth.iam.store.listUsers();
      const ids = await auth.iam.store.identitiesOf(all.map((u) => u.id));
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
      const user = await users.create(identity(ctx), userFieldsOf(body), ctx.log);
      ctx.status = 201;
      return publicUser(user, body.password ? [{ provider: 'local', providerUserId: user.username }] : []);
    },
  );

  api.endpoint(
    { method: 'GET', path: '/:id', summary: 'One user with linked identities', auth: ADMIN, params: idParams, responses: { 200: { description: 'the user', schema: userView }, 404: 'no such user' } },
    async (_ctx, { params }) => {
      const user = await load(params.id);
      return publicUser(user, (await auth.iam.store.identitiesOf([user.id])).get(user.id));
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
      const updated = await users.update(identity(ctx), await load(params.id), userFieldsOf(body), ctx.log, sessionOf(ctx, params.id));
      return publicUser(updated, (await auth.iam.store.identitiesOf([updated.id])).get(updated.id));
    },
  );

  api.endpoint(
    { method: 'DELETE', path: '/:id', summary: 'Delete a user', auth: ADMIN, params: idParams, responses: { 204: 'deleted', 404: 'no such user', 409: 'last administrator' } },
    async (ctx, { params }) => {
      await users.remove(identity(ctx), await load(params.id));
      ctx.status = 204;
    },
  );

  // oneself (current password required) or an administrator of users
  api.endpoint(
    {
      method: 'POST',
      path: '/:id/password',
      summary: 'Set a password',
      description: `Oneself (with \`current_password\`, counted like a login attempt) or a caller holding \`${ADMIN_USERS}\` (a superadmin for an account that reaches the host).`,
      auth: 'identity',
      params: idParams,
      body: passwordSchema,
      bodyMode: 'manual',
      responses: { 204: 'changed', 403: `neither oneself nor ${ADMIN_USERS}`, 404: 'no such user', 429: 'too many wrong current passwords' },
    },
    async (ctx, { params }) => {
      const id = identity(ctx);
      const user = await load(params.id);
      const self = id.userId === user.id;
      if (!self && !id.allows(ADMIN_USERS)) throw forbidden(ADMIN_USERS);
      if (!self) await users.guardTakeover(id, user);
      // a narrowly scoped key must not be able to take over its owner's account
      if (id.keyScopes) throw forbiddenBecause('a scoped API key cannot change passwords');
      const body = validate(passwordSchema, jsonBody(ctx));
      if (self) {
        if (!body.current_password) throw badField('current_password', 'is required to change your own password');
        await verifyCurrentPassword(auth, ctx, user, body.current_password);
      }
      await users.setPassword(id, user, body.new_password, sessionOf(ctx, user.id));
      ctx.status = 204;
    },
  );

  const keyView = Joi.object(publicKeySchema);

  api.endpoint(
    { method: 'GET', path: '/:id/api-keys', summary: "A user's API keys and sessions", auth: ADMIN, params: idParams, responses: { 200: { description: 'the keys', schema: Joi.object({ keys: Joi.array().items(keyView) }) }, 404: 'no such user' } },
    async (_ctx, { params }) => {
      const user = await load(params.id);
      return { keys: (await auth.apiKeys.listFor(user.id)).map(publicKey) };
    },
  );

  api.endpoint(
    { method: 'DELETE', path: '/:id/api-keys/:keyId', summary: "Revoke a user's API key or session", auth: ADMIN, params: keyParams, responses: { 204: 'revoked', 404: 'no such user or key' } },
    async (ctx, { params }) => {
      const user = await load(params.id);
      if (!(await auth.keys.revoke(identity(ctx), user, params.keyId))) throw notFound('key');
      ctx.status = 204;
    },
  );

  return api.router;
}
