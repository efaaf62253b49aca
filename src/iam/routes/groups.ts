import Router from '@koa/router';
import type { Context } from 'koa';
import type { IamComponent } from '../component.js';
import type { EventBus } from '../../bus/bus.js';
import { requireIdentity, requirePermission } from '../../auth/guards.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';
import { badField, conflict, notFound } from '../../http/errors.js';
import { isUniqueViolation } from '../../db/knex.js';
import { DEFAULT_GROUP_NAMES } from '../permissions.js';
import { createGroupSchema, GROUP_NAME, patchGroupSchema } from '../schemas.js';
import type { Group } from '../store.js';
import Joi from 'joi';

export function groupRoutes(iam: IamComponent, bus: EventBus): Router {
  const r = new Router();
  const admin = requirePermission('feature:admin.groups');

  const view = async (g: Group) => ({
    name: g.name,
    description: g.description,
    permissions: g.permissions,
    members: (await iam.store.membersOf(g.name)).map((u) => u.username),
  });

  const load = async (ctx: Context) => {
    const name = validate(Joi.string().pattern(GROUP_NAME).required(), ctx.params.name, 'params');
    const g = await iam.store.group(name);
    if (!g) throw notFound('group');
    return g;
  };

  const checkPermissions = (perms: string[] | undefined) => {
    const unknown = (perms ?? []).filter((p) => !iam.isKnownPermission(p));
    if (unknown.length) throw badField('permissions', `unknown permission ${unknown.join(', ')}`);
  };

  r.get('/api/permissions', requireIdentity, (ctx) => {
    ctx.body = { permissions: iam.catalog() };
  });

  r.get('/api/groups', admin, async (ctx) => {
    ctx.body = { groups: await Promise.all((await iam.store.listGroups()).map(view)) };
  });

  r.post('/api/groups', admin, async (ctx) => {
    const body = validate(createGroupSchema, jsonBody(ctx));
    checkPermissions(body.permissions);
    try {
      const g = await iam.store.createGroup(body);
      ctx.status = 201;
      ctx.body = await view(g);
    } catch (err) {
      if (isUniqueViolation(err)) throw conflict(`group ${body.name} exists`);
      throw err;
    }
  });

  r.get('/api/groups/:name', admin, async (ctx) => {
    ctx.body = await view(await load(ctx));
  });

  r.patch('/api/groups/:name', admin, async (ctx) => {
    const g = await load(ctx);
    const body = validate(patchGroupSchema, jsonBody(ctx));
    checkPermissions(body.permissions);
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
    ctx.body = await view((await iam.store.group(name))!);
  });

  r.delete('/api/groups/:name', admin, async (ctx) => {
    const g = await load(ctx);
    if (DEFAULT_GROUP_NAMES.includes(g.name)) throw conflict(`built-in group ${g.name} cannot be deleted`);
    await iam.store.renameOrDeleteGroup(g.name, null);
    bus.emit('iam:permissions_changed', { group: g.name });
    ctx.status = 204;
  });

  return r;
}
