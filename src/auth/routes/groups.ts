import type Router from '@koa/router';
import type { IamComponent } from '../../iam/component.js';
import type { EventBus } from '../../bus/bus.js';
import { ApiRouter } from '../../http/api.js';
import type { Context } from 'koa';
import { identity } from '../guards.js';
import { conflict, forbiddenBecause, notFound } from '../../http/errors.js';
import { addedHostPermissions, isTrusted } from '../../iam/policy.js';
import { isUniqueViolation } from '../../db/knex.js';
import { DEFAULT_GROUP_NAMES, requireKnownPermissions } from '../../iam/permissions.js';
import { createGroupSchema, GROUP_NAME, patchGroupSchema } from '../../iam/schemas.js';
import type { Group } from '../../iam/store.js';
import Joi from 'joi';

const nameParams = Joi.object({ name: Joi.string().pattern(GROUP_NAME).required().description('the group name') });

const groupView = Joi.object({
  name: Joi.string(),
  description: Joi.string().allow(''),
  permissions: Joi.array().items(Joi.string()),
  members: Joi.array().items(Joi.string()).description('usernames'),
});

const catalogView = Joi.object({
  permissions: Joi.array().items(Joi.object({ id: Joi.string(), description: Joi.string(), plugin: Joi.string() })),
});

export function groupRoutes(iam: IamComponent, bus: EventBus): Router {
  const api = new ApiRouter({ tag: 'groups' });
  const ADMIN = { permission: 'feature:admin.groups' };

  const view = async (g: Group) => ({
    name: g.name,
    description: g.description,
    permissions: g.permissions,
    members: (await iam.store.membersOf(g.name)).map((u) => u.username),
  });

  const load = async (name: string) => {
    const g = await iam.store.group(name);
    if (!g) throw notFound('group');
    return g;
  };

  const checkPermissions = (perms: string[] | undefined) => requireKnownPermissions('permissions', perms, (p) => iam.isKnownPermission(p));

  /** Host permissions added to a group: a superadmin's grant only, logged as an audit line. */
  const guardHostGrants = (ctx: Context, before: string[], after: string[] | undefined) => {
    const granted = after ? addedHostPermissions(before, after) : [];
    if (granted.length === 0) return () => undefined;
    const actor = identity(ctx);
    if (!isTrusted(actor)) throw forbiddenBecause(`only a superadmin may grant permissions that reach the host (${granted.join(', ')})`);
    return (group: string) => ctx.log.info({ audit: 'host_permission_granted', actor: actor.username, group, permissions: granted }, 'audit: host permission granted');
  };

  api.endpoint(
    { method: 'GET', path: '/api/permissions', summary: 'The permission catalog (core and plugin-declared ids)', auth: 'identity', responses: { 200: { description: 'the catalog', schema: catalogView } } },
    () => ({ permissions: iam.catalog() }),
  );

  api.endpoint(
    { method: 'GET', path: '/api/groups', summary: 'List groups with their permissions and members', auth: ADMIN, responses: { 200: { description: 'the groups', schema: Joi.object({ groups: Joi.array().items(groupView) }) } } },
    async () => ({ groups: await Promise.all((await iam.store.listGroups()).map(view)) }),
  );

  api.endpoint(
    { method: 'POST', path: '/api/groups', summary: 'Create a group', auth: ADMIN, body: createGroupSchema, responses: { 201: { description: 'the group', schema: groupView }, 409: 'the name is taken' } },
    async (ctx, { body }) => {
      checkPermissions(body.permissions);
      const audit = guardHostGrants(ctx, [], body.permissions);
      try {
        const g = await iam.store.createGroup(body);
        audit(g.name);
        ctx.status = 201;
        return await view(g);
      } catch (err) {
        if (isUniqueViolation(err)) throw conflict(`group ${body.name} exists`);
        throw err;
      }
    },
  );

  api.endpoint(
    { method: 'GET', path: '/api/groups/:name', summary: 'One group', auth: ADMIN, params: nameParams, responses: { 200: { description: 'the group', schema: groupView }, 404: 'no such group' } },
    async (_ctx, { params }) => view(await load(params.name)),
  );

  api.endpoint(
    {
      method: 'PATCH',
      path: '/api/groups/:name',
      summary: 'Change a group (rename, description, permissions)',
      description: 'Renaming updates every member. Built-in groups cannot be renamed.',
      auth: ADMIN,
      params: nameParams,
      body: patchGroupSchema,
      responses: { 200: { description: 'the group', schema: groupView }, 404: 'no such group', 409: 'built-in group or name taken' },
    },
    async (ctx, { params, body }) => {
      const g = await load(params.name);
      checkPermissions(body.permissions);
      const audit = guardHostGrants(ctx, g.permissions, body.permissions);
      let name = g.name;
      if (body.name && body.name !== g.name) {
        if (DEFAULT_GROUP_NAMES.includes(g.name)) throw conflict(`built-in group ${g.name} cannot be renamed`);
        if (await iam.store.group(body.name)) throw conflict(`group ${body.name} exists`);
        try {
          await iam.store.renameOrDeleteGroup(g.name, body.name);
        } catch (err) {
          if (isUniqueViolation(err)) throw conflict(`group ${body.name} exists`);
          throw err;
        }
        name = body.name;
      }
      await iam.store.updateGroup(name, { description: body.description, permissions: body.permissions });
      bus.emit('iam:permissions_changed', { group: name });
      audit(name);
      return view((await iam.store.group(name))!);
    },
  );

  api.endpoint(
    { method: 'DELETE', path: '/api/groups/:name', summary: 'Delete a group (removed from every member)', auth: ADMIN, params: nameParams, responses: { 204: 'deleted', 404: 'no such group', 409: 'built-in group' } },
    async (ctx, { params }) => {
      const g = await load(params.name);
      if (DEFAULT_GROUP_NAMES.includes(g.name)) throw conflict(`built-in group ${g.name} cannot be deleted`);
      await iam.store.renameOrDeleteGroup(g.name, null);
      bus.emit('iam:permissions_changed', { group: g.name });
      ctx.status = 204;
    },
  );

  return api.router;
}
