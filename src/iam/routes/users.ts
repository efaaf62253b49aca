import Router from '@koa/router';
import bcrypt from 'bcryptjs';
import type { Context } from 'koa';
import type { IamComponent } from '../component.js';
import type { EventBus } from '../../bus/bus.js';
import { identity, requireIdentity, requirePermission } from '../../auth/guards.js';
import { publicKey } from '../../auth/api-keys.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';
import { badField, conflict, forbidden, forbiddenBecause, notFound } from '../../http/errors.js';
import { isUniqueViolation } from '../../db/knex.js';
import { ADMIN_GROUP } from '../permissions.js';
import { BCRYPT_COST } from '../seed.js';
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

export function userRoutes(iam: IamComponent, bus: EventBus): Router {
  const r = new Router({ prefix: '/api/users' });
  const admin = requirePermission(ADMIN_USERS);

  const load = async (ctx: Context) => {
    const id = validate(uuidParam, ctx.params.id, 'params');
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

  const rolesAllowed = (ctx: Context) => {
    const id = identity(ctx);
    if (!(id.is_system || id.is_superadmin)) throw forbiddenBecause('only a superadmin may set roles');
  };

  r.get('/', admin, async (ctx) => {
    const users = await iam.store.listUsers();
    const ids = await iam.store.identitiesOf(users.map((u) => u.id));
    ctx.body = { users: users.map((u) => publicUser(u, ids.get(u.id))) };
  });

  r.post('/', admin, async (ctx) => {
    const body = validate(createUserSchema, jsonBody(ctx));
    if (body.roles?.length) rolesAllowed(ctx);
    await checkRefs(body);
    let user: User;
    try {
      user = await iam.store.createUser({
        username: body.username,
        email: body.email ?? null,
        display_name: body.display_name || null,
        hashed_password: body.password ? await bcrypt.hash(body.password, BCRYPT_COST) : null,
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
    ctx.status = 201;
    ctx.body = publicUser(user, body.password ? [{ provider: 'local', provider_user_id: user.username }] : []);
  });

  r.get('/:id', admin, async (ctx) => {
    const user = await load(ctx);
    ctx.body = publicUser(user, (await iam.store.identitiesOf([user.id])).get(user.id));
  });

  r.patch('/:id', admin, async (ctx) => {
    const user = await load(ctx);
    const body = validate(patchUserSchema, jsonBody(ctx));
    if (body.roles) rolesAllowed(ctx);
    await checkRefs(body);
    await guardLastAdmin(user, { groups: body.groups ?? user.groups, disabled: body.disabled ?? user.disabled });
    const { password, ...rest } = body;
    await iam.store.updateUser(user.id, {
      ...rest,
      display_name: rest.display_name === '' ? null : rest.display_name,
      ...(password ? { hashed_password: await bcrypt.hash(password, BCRYPT_COST) } : {}),
    });
    if (password) {
      await iam.store.linkIdentity(user.id, 'local', user.username);
      bus.emit('iam:password_changed', { user_id: user.id });
    }
    bus.emit('iam:permissions_changed', { user_id: user.id });
    const updated = (await iam.store.userById(user.id))!;
    ctx.body = publicUser(updated, (await iam.store.identitiesOf([user.id])).get(user.id));
  });

  r.delete('/:id', admin, async (ctx) => {
    const user = await load(ctx);
    await guardLastAdmin(user, null);
    await iam.store.deleteUser(user.id);
    bus.emit('iam:permissions_changed', { user_id: user.id });
    bus.emit('iam:password_changed', { user_id: user.id });
    ctx.status = 204;
  });

  // oneself (current password required) or an administrator of users
  r.post('/:id/password', requireIdentity, async (ctx) => {
    const id = identity(ctx);
    const user = await load(ctx);
    const self = id.user_id === user.id;
    if (!self && !id.allows(ADMIN_USERS)) throw forbidden(ADMIN_USERS);
    const body = validate(passwordSchema, jsonBody(ctx));
    if (self) {
      if (!body.current_password) throw badField('current_password', 'is required to change your own password');
      if (!user.hashed_password || !(await bcrypt.compare(body.current_password, user.hashed_password))) {
        throw badField('current_password', 'is not correct');
      }
    }
    await iam.store.updateUser(user.id, { hashed_password: await bcrypt.hash(body.new_password, BCRYPT_COST) });
    await iam.store.linkIdentity(user.id, 'local', user.username);
    bus.emit('iam:password_changed', { user_id: user.id });
    ctx.status = 204;
  });

  r.get('/:id/api-keys', admin, async (ctx) => {
    const user = await load(ctx);
    ctx.body = { keys: (await iam.apiKeys.listFor(user.id)).map(publicKey) };
  });

  r.delete('/:id/api-keys/:keyId', admin, async (ctx) => {
    const user = await load(ctx);
    if (!(await iam.apiKeys.revoke(user.id, String(ctx.params.keyId)))) throw notFound('key');
    ctx.status = 204;
  });

  return r;
}
