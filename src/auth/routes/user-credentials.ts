import type Router from '@koa/router';
import Joi from 'joi';
import type { AuthComponent } from '../component.js';
import { actor, identity } from '../guards.js';
import { ApiRouter } from '../../http/api.js';
import { publicKey, publicKeySchema } from '../api-keys.js';
import { verifyCurrentPassword } from '../reauth.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';
import { notFound } from '../../http/errors.js';
import { createKeySchema, passwordSchema, uuidParam } from '../../iam/schemas.js';
import { issuingCredential, newKeyView } from './views.js';
import { ADMIN_USERS, userIdParams as idParams } from '../../iam/routes/users.js';
import { ownSession } from '../../iam/routes/caller.js';

/** A user's API key or web session as an administrator sees it (publicKey(): never the token). */
export const apiKeyView = Joi.object(publicKeySchema).id('ApiKey');

interface KeyParams {
  id: string;
  keyId: string;
}

const keyParams = Joi.object<KeyParams, true>({
  id: uuidParam.description('the user id (UUID)'),
  keyId: uuidParam.description('the key id'),
});

const userKeysView = Joi.object({ keys: Joi.array().items(apiKeyView) });

/** A user's credentials under /api/users/:id: their password, their API keys and sessions. */
export function userCredentialRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ prefix: '/api/users', tag: 'users' });
  const ADMIN = { permission: ADMIN_USERS };

  const users = auth.iam.users;
  const load = (id: string) => users.find({ id });

  // oneself (current password required) or an administrator of users
  api.endpoint(
    {
      method: 'POST',
      path: '/:id/password',
      operationId: 'setUserPassword',
      summary: 'Set a password',
      description: `Oneself (with \`current_password\`, counted like a login attempt) or a caller holding \`${ADMIN_USERS}\` (a superadmin for an account that reaches the host).`,
      auth: 'identity',
      // oneself or ADMIN_USERS (with the key's scopes): the users service judges which
      permissionCheck: 'operation',
      params: idParams,
      body: passwordSchema,
      bodyMode: 'manual',
      responses: {
        204: 'changed',
        400: 'validation_failed: the body is invalid, or (oneself) `current_password` is missing or not correct',
        403: `forbidden: neither oneself nor ${ADMIN_USERS}; or an account that reaches the host (or a superadmin or bot account) and the caller is not a superadmin; or a scoped API key of this very user; or step_up_required: a superadmin must verify the second factor again first`,
        404: 'no such user',
        429: {
          description: 'rate_limited: too many wrong current passwords (the login lockout), or too many attempts from this address',
          headers: { 'Retry-After': 'seconds to wait' },
        },
      },
    },
    async (ctx, { params }) => {
      const user = await load(params.id);
      const body = validate(passwordSchema, jsonBody(ctx));
      // the rules are the user writer's; the current password is a guess like a login (the attempt gate)
      const current = body.current_password;
      await users.setPassword(actor(ctx), user, body.new_password, {
        field: 'new_password',
        keepSession: ownSession(ctx, user.id),
        current: current ? () => verifyCurrentPassword(auth, ctx, user, current) : null,
      });
      ctx.status = 204;
    },
  );

  api.endpoint(
    {
      method: 'GET',
      path: '/:id/api-keys',
      operationId: 'listUserKeys',
      summary: "A user's API keys and sessions",
      auth: ADMIN,
      params: idParams,
      responses: { 200: { description: 'the keys', schema: userKeysView }, 404: 'no such user' },
    },
    async (_ctx, { params }) => {
      const user = await load(params.id);
      return { keys: (await auth.apiKeys.listFor(user.id)).map(publicKey) };
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/:id/api-keys',
      operationId: 'issueUserKey',
      summary: 'Create an API key for a user',
      description: `A key for another account (the \`bot\` account's, for a program), as \`POST /api/me/api-keys\` makes one's own and \`service-core key issue --user\` any: the token is in this answer only; \`scopes\` narrow the owner's permissions. Issuing a key lets its holder act as the owner, so the owner must be one the caller may take over: a superadmin or bot account, or one whose access reaches the host, only by a superadmin (with a fresh second factor where it has one).`,
      auth: ADMIN,
      stepUp: true,
      params: idParams,
      body: createKeySchema,
      responses: {
        201: { description: 'the key with its token (shown once)', schema: newKeyView },
        403: `forbidden: the caller lacks ${ADMIN_USERS}; or the owner is a superadmin or bot account, or reaches the host, and the caller is not a superadmin; or an API key of an account with a second factor (issue keys from a signed-in session that verified it lately)`,
        404: 'no such user',
        409: 'conflict: the owner is disabled',
      },
    },
    async (ctx, { params, body }) => {
      const owner = await load(params.id);
      const id = identity(ctx);
      const { token, key } = await auth.keys.issue(
        actor(ctx),
        owner,
        { label: body.label, scopes: body.scopes ?? null, expiresAt: body.expires_at ? body.expires_at.getTime() : null },
        { issuedWith: issuingCredential(id) },
      );
      ctx.status = 201;
      return { ...publicKey(key), token };
    },
  );

  api.endpoint(
    {
      method: 'DELETE',
      path: '/:id/api-keys/:keyId',
      operationId: 'revokeUserKey',
      summary: "Revoke a user's API key or session",
      auth: ADMIN,
      params: keyParams,
      responses: {
        204: 'revoked',
        403: `forbidden: the caller lacks ${ADMIN_USERS}, or revokes a key of a superadmin or bot account without being a superadmin`,
        404: 'no such user or key',
      },
    },
    async (ctx, { params }) => {
      const user = await load(params.id);
      if (!(await auth.keys.revoke(actor(ctx), user, params.keyId))) throw notFound('key');
      ctx.status = 204;
    },
  );

  return api.router;
}
