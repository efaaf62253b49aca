import type Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { IamComponent } from '../component.js';
import type { EventBus } from '../../bus/bus.js';
import { identity } from '../../auth/guards.js';
import { ApiRouter } from '../../http/api.js';
import { publicKey, publicKeySchema } from '../../auth/api-keys.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';
import { badField, conflict, forbidden, forbiddenBecause, notFound } from '../../http/errors.js';
import { isUniqueViolation } from '../../db/knex.js';
import { ADMIN_GROUP } from '../permissions.js';
import { addedHostPermissions, hostPermissionsOfGroups, isProtectedAccount, isTrusted } from '../policy.js';
import { createUserSchema, patchUserSchema, passwordSchema, uuidParam } from '../schemas.js';
import type { User, Identity } from '../store.js';

const ADMIN_USERS = 'feature:admin.users';

export function publicUser(u: User, identities: Identity[] = []) {
  return {
    id: u.id,
    username: u.username,
    display_name: u.display_name,
    email: u.email,
    groups: u.groups,
    roles: u.roles,
    extra_permissions: u.extra_permissions,
    disabled: u.disabled,
    identities,
    created_at: new Date(u.created_at).toISOString(),
  };
}

/** The web session a user changes their own password from: it stays, their others end. */
function sessionOf(ctx: Context, userId: string): string | null {
  const id = ctx.state.identity;
  return id?.user_id === userId && (id.method === 'session_cookie' || id.method === 'session_token') ? id.credential_id : null;
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

export function userRoutes(iam: IamComponent, bus: EventBus): Router {
  const api = new ApiRouter({ prefix: '/api/users', tag: 'users' });
  const ADMIN = { permission: ADMIN_USERS };

  const load = async (id: string) => {
    const user = await iam.store.userById(id);
    if (!user) throw notFound('user');
    return user;
  };

  const checkRefs = async (body: { groups?: string[]; extra_permissions?: string[] }) => {
    if (body.groups?.length) {
      const found = new Set((await iam.store.groupsNamed(body.groups)).map((g) => g.name));
      const missing = body.groups.filter((g) => !found.has(g));
      if (missing.length) throw badField('groups', `unknown group ${missing.join(', ')}`);
    }
    const unknown = (body.extra_permissions ?? []).filter((p) => !iam.isKnownPermission(p));
    if (unknown.length) throw badField('extra_permissions', `unknown permission ${unknown.join(', ')}`);
  };

  /** Would this change leave INT_ADMIN without an enabled member? */
  const guardLastAdmin = async (user: User, next: { groups: string[]; disabled: boolean } | null) => {
    if (!user.groups.includes(ADMIN_GROUP) || user.disabled) return;
    if (next && next.groups.includes(ADMIN_GROUP) && !next.disabled) return;
    const others = (await iam.store.membersOf(ADMIN_GROUP)).filter((m) => m.id !== user.id && !m.disabled);
    if (others.length === 0) throw conflict(`${user.username} is the last enabled member of ${ADMIN_GROUP}`);
  };

  /** A superadmin or bot account is changed only by a superadmin, the system key, or (its password) itself. */
  const guardPrivileged = (ctx: Context, user: User) => {
    if (isProtectedAccount(user) && !isTrusted(identity(ctx))) {
      throw forbiddenBecause(`only a superadmin may change the ${user.roles.includes('superadmin') ? 'superadmin' : 'bot'} account ${user.username}`);
    }
  };

  /**
   * Permissions that reach the host, directly or through a group joined, are granted only by a
   * superadmin (or the system key); each such grant is an audit line.
   */
  const guardHostGrants = async (ctx: Context, before: { groups: string[]; extra_permissions: string[] }, after: { groups?: string[]; extra_permissions?: string[] }) => {
    const direct = after.extra_permissions ? addedHostPermissions(before.extra_permissions, after.extra_permissions) : [];
    const joined = (after.groups ?? []).filter((g) => !before.groups.includes(g));
    const viaGroups = joined.length ? hostPermissionsOfGroups(await iam.store.groupsNamed(joined), joined) : [];
    const granted = [...new Set([...direct, ...viaGroups])];
    if (granted.length === 0) return () => undefined;
    const actor = identity(ctx);
    if (!isTrusted(actor)) throw forbiddenBecause(`only a superadmin may grant permissions that reach the host (${granted.join(', ')})`);
    return (userId: string, username: string) =>
      ctx.log.info({ audit: 'host_permission_granted', actor: actor.username, user_id: userId, username, permissions: granted, groups: joined }, 'audit: host permission granted');
  };

  const rolesAllowed = (ctx: Context) => {
    if (!isTrusted(identity(ctx))) throw forbiddenBecause('only a superadmin may set roles');
  };

  api.endpoint(
    { method: 'GET', path: '/', summary: 'List users', auth: ADMIN, responses: { 200: { description: 'the users', schema: Joi.object({ users: Joi.array().items(userView) }) } } },
    async () => {
      const users = await iam.store.listUsers();
      const ids = await iam.store.identitiesOf(users.map((u) => u.id));
      return { users: users.map((u) => publicUser(u, ids.get(u.id))) };
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
      if (body.roles?.length) rolesAllowed(ctx);
      await checkRefs(body);
      const audit = await guardHostGrants(ctx, { groups: [], extra_permissions: [] }, body);
      let user: User;
      try {
        user = await iam.store.createUser({
          username: body.username,
          email: body.email ?? null,
          display_name: body.display_name || null,
          hashed_password: body.password ? await iam.passwords.hash(body.password) : null,
          groups: body.groups ?? [],
          extra_permissions: body.extra_permissions ?? [],
          roles: body.roles ?? [],
        });
      } catch (err) {
        if (isUniqueViolation(err)) throw conflict(`username ${body.username} is taken`);
        throw err;
      }
      // a user created without a password is SSO-only: no local identity until one is set
      if (body.password) await iam.store.linkIdentity(user.id, 'local', user.username);
      audit(user.id, user.username);
      ctx.status = 201;
      return publicUser(user, body.password ? [{ provider: 'local', provider_user_id: user.username }] : []);
    },
  );

  api.endpoint(
    { method: 'GET', path: '/:id', summary: 'One user with linked identities', auth: ADMIN, params: idParams, responses: { 200: { description: 'the user', schema: userView }, 404: 'no such user' } },
    async (_ctx, { params }) => {
      const user = await load(params.id);
      return publicUser(user, (await iam.store.identitiesOf([user.id])).get(user.id));
    },
  );

  api.endpoint(
    {
      method: 'PATCH',
      path: '/:id',
      summary: 'Change a user (groups, extra permissions, profile, disabled, password)',
      description: 'The last enabled member of INT_ADMIN cannot leave it or be disabled (409).',
      auth: ADMIN,
      params: idParams,
      body: patchUserSchema,
      responses: { 200: { description: 'the user', schema: userView }, 404: 'no such user', 409: 'last administrator' },
    },
    async (ctx, { params, body }) => {
      const user = await load(params.id);
      guardPrivileged(ctx, user);
      if (body.roles) rolesAllowed(ctx);
      await checkRefs(body);
      const audit = await guardHostGrants(ctx, user, body);
      await guardLastAdmin(user, { groups: body.groups ?? user.groups, disabled: body.disabled ?? user.disabled });
      const { password, ...rest } = body;
      await iam.store.updateUser(user.id, {
        ...rest,
        display_name: rest.display_name === '' ? null : rest.display_name,
        ...(password ? { hashed_password: await iam.passwords.hash(password) } : {}),
      });
      if (password) {
        await iam.store.linkIdentity(user.id, 'local', user.username);
        await iam.passwordChanged(user.id, sessionOf(ctx, user.id));
      }
      bus.emit('iam:permissions_changed', { user_id: user.id });
      audit(user.id, user.username);
      const updated = (await iam.store.userById(user.id))!;
      return publicUser(updated, (await iam.store.identitiesOf([user.id])).get(user.id));
    },
  );

  api.endpoint(
    { method: 'DELETE', path: '/:id', summary: 'Delete a user', auth: ADMIN, params: idParams, responses: { 204: 'deleted', 404: 'no such user', 409: 'last administrator' } },
    async (ctx, { params }) => {
      const user = await load(params.id);
      guardPrivileged(ctx, user);
      await guardLastAdmin(user, null);
      await iam.store.deleteUser(user.id);
      bus.emit('iam:permissions_changed', { user_id: user.id });
      bus.emit('iam:password_changed', { user_id: user.id });
      ctx.status = 204;
    },
  );

  // oneself (current password required) or an administrator of users
  api.endpoint(
    {
      method: 'POST',
      path: '/:id/password',
      summary: 'Set a password',
      description: `Oneself (with \`current_password\`) or a caller holding \`${ADMIN_USERS}\`.`,
      auth: 'identity',
      params: idParams,
      body: passwordSchema,
      bodyMode: 'manual',
      responses: { 204: 'changed', 403: `neither oneself nor ${ADMIN_USERS}`, 404: 'no such user' },
    },
    async (ctx, { params }) => {
      const id = identity(ctx);
      const user = await load(params.id);
      const self = id.user_id === user.id;
      if (!self && !id.allows(ADMIN_USERS)) throw forbidden(ADMIN_USERS);
      if (!self) guardPrivileged(ctx, user);
      // a narrowly scoped key must not be able to take over its owner's account
      if (id.key_scopes) throw forbiddenBecause('a scoped API key cannot change passwords');
      const body = validate(passwordSchema, jsonBody(ctx));
      if (self) {
        if (!body.current_password) throw badField('current_password', 'is required to change your own password');
        if (!(await iam.passwords.verify(body.current_password, user.hashed_password))) {
          throw badField('current_password', 'is not correct');
        }
      }
      await iam.store.updateUser(user.id, { hashed_password: await iam.passwords.hash(body.new_password) });
      await iam.store.linkIdentity(user.id, 'local', user.username);
      await iam.passwordChanged(user.id, sessionOf(ctx, user.id));
      ctx.status = 204;
    },
  );

  const keyView = Joi.object(publicKeySchema);

  api.endpoint(
    { method: 'GET', path: '/:id/api-keys', summary: "A user's API keys and sessions", auth: ADMIN, params: idParams, responses: { 200: { description: 'the keys', schema: Joi.object({ keys: Joi.array().items(keyView) }) }, 404: 'no such user' } },
    async (_ctx, { params }) => {
      const user = await load(params.id);
      return { keys: (await iam.apiKeys.listFor(user.id)).map(publicKey) };
    },
  );

  api.endpoint(
    { method: 'DELETE', path: '/:id/api-keys/:keyId', summary: "Revoke a user's API key or session", auth: ADMIN, params: keyParams, responses: { 204: 'revoked', 404: 'no such user or key' } },
    async (ctx, { params }) => {
      const user = await load(params.id);
      guardPrivileged(ctx, user);
      if (!(await iam.apiKeys.revoke(user.id, params.keyId))) throw notFound('key');
      ctx.status = 204;
    },
  );

  return api.router;
}
