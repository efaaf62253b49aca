import type Router from '@koa/router';
import type { IamComponent } from '../component.js';
import { ApiRouter } from '../../http/api.js';
import { callerOf } from './caller.js';
import { changedGroupView, createGroupSchema, groupNameRule, groupView, patchGroupSchema, permissionView } from '../schemas.js';
import type { Group, User } from '../store.js';
import { passwordClearedWarning } from '../afresh.js';
import Joi from 'joi';

interface NameParams {
  name: string;
}

const nameParams = Joi.object<NameParams, true>({ name: groupNameRule.required().description('the group name') });

const catalogView = Joi.object({ permissions: Joi.array().items(permissionView) });
const groupListView = Joi.object({ groups: Joi.array().items(groupView) });

export function groupRoutes(iam: IamComponent): Router {
  const api = new ApiRouter({ tag: 'groups' });
  const ADMIN_GROUPS = 'feature:admin.groups';
  const ADMIN = { permission: ADMIN_GROUPS };
  const STEP_UP = 'or step_up_required: a superadmin must verify the second factor again first';

  const view = async (g: Group, members?: User[]) => ({
    name: g.name,
    description: g.description,
    permissions: g.permissions,
    members: (members ?? (await iam.store.membersOf(g.name))).map((u) => u.username),
  });

  const groups = iam.groups;

  api.endpoint(
    {
      method: 'GET',
      path: '/api/permissions',
      operationId: 'listPermissions',
      summary: 'The permission catalog (core and plugin-declared ids)',
      auth: 'identity',
      responses: { 200: { description: 'the catalog', schema: catalogView } },
    },
    () => ({ permissions: iam.catalog() }),
  );

  api.endpoint(
    {
      method: 'GET',
      path: '/api/groups',
      operationId: 'listGroups',
      summary: 'List groups with their permissions and members',
      auth: ADMIN,
      responses: { 200: { description: 'the groups', schema: groupListView } },
    },
    async () => ({ groups: await Promise.all((await iam.store.listGroups()).map((g) => view(g))) }),
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/groups',
      operationId: 'createGroup',
      summary: 'Create a group',
      auth: ADMIN,
      body: createGroupSchema,
      responses: {
        201: { description: 'the group', schema: groupView },
        403: `forbidden: the caller lacks ${ADMIN_GROUPS}, or grants a permission that reaches the host without being a superadmin, or one the caller does not hold themself; ${STEP_UP}`,
        409: 'the name is taken, in any case (INT_ADMIN holds int_admin too)',
      },
    },
    async (ctx, { body }) => {
      const g = await groups.create(callerOf(ctx), body);
      ctx.status = 201;
      return view(g);
    },
  );

  api.endpoint(
    {
      method: 'GET',
      path: '/api/groups/:name',
      operationId: 'getGroup',
      summary: 'One group',
      auth: ADMIN,
      params: nameParams,
      responses: { 200: { description: 'the group', schema: groupView }, 404: 'no such group' },
    },
    async (_ctx, { params }) => view(await groups.find(params.name)),
  );

  api.endpoint(
    {
      method: 'PATCH',
      path: '/api/groups/:name',
      operationId: 'updateGroup',
      summary: 'Change a group (rename, description, permissions)',
      description:
        'Renaming updates every member. Built-in groups cannot be renamed. Adding a permission that reaches the host, or renaming a group that holds one, is for a superadmin; each member it first brings to the host starts afresh (its keys, sessions and second factors end, and a password no superadmin set is cleared: `warnings` names them).',
      auth: ADMIN,
      params: nameParams,
      body: patchGroupSchema,
      responses: {
        200: { description: 'the group, and `warnings` for each member whose password the change cleared', schema: changedGroupView },
        403: `forbidden: the caller lacks ${ADMIN_GROUPS}, or adds a permission that reaches the host, or renames a group that holds one, without being a superadmin; or adds a permission the caller does not hold themself; ${STEP_UP}`,
        404: 'no such group',
        409: 'built-in group, or the name is taken (in any case but by this group itself)',
      },
    },
    async (ctx, { params, body }) => {
      const group = await groups.find(params.name);
      const before = new Map((await iam.store.membersOf(group.name)).map((u) => [u.id, u]));
      const updated = await groups.update(callerOf(ctx), group, body);
      const members = await iam.store.membersOf(updated.name);
      // a member the change first brought to the host may have lost a password no superadmin set
      const warnings = members.flatMap((u) => {
        const was = before.get(u.id);
        const said = was ? passwordClearedWarning(was, u) : null;
        return said ? [said] : [];
      });
      const shown = await view(updated, members);
      return warnings.length ? { ...shown, warnings } : shown;
    },
  );

  api.endpoint(
    {
      method: 'DELETE',
      path: '/api/groups/:name',
      operationId: 'deleteGroup',
      summary: 'Delete a group (removed from every member)',
      auth: ADMIN,
      params: nameParams,
      responses: {
        204: 'deleted',
        403: `forbidden: the caller lacks ${ADMIN_GROUPS}, or deletes a group that reaches the host while the login settings name it without being a superadmin`,
        404: 'no such group',
        409: 'built-in group',
      },
    },
    async (ctx, { params }) => {
      await groups.remove(callerOf(ctx), await groups.find(params.name));
      ctx.status = 204;
    },
  );

  return api.router;
}
