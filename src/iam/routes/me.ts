import Router from '@koa/router';
import Joi from 'joi';
import type { IamComponent } from '../component.js';
import { identity, requireIdentity } from '../../auth/guards.js';
import { publicKey } from '../../auth/api-keys.js';
import { jsonBody } from '../../http/body.js';
import { validate } from '../../http/validate.js';
import { badField, forbiddenBecause, notFound } from '../../http/errors.js';
import { expandGrants, PERMISSION_ID } from '../permissions.js';
import type { ApiIdentity } from '../../auth/identity.js';

export const createKeySchema = Joi.object({
  label: Joi.string().trim().min(1).max(128).required(),
  scopes: Joi.array().items(Joi.string().pattern(PERMISSION_ID).max(256)).max(100).unique(),
  expires_at: Joi.date().iso().greater('now'),
});

/** The access view: effective permissions and what each plugin lets this caller do. */
export function accessView(iam: IamComponent, id: ApiIdentity) {
  const catalog = iam.catalog();
  const all = id.is_system || id.is_superadmin;
  let permissions = all ? expandGrants(catalog.map((e) => e.id), catalog) : expandGrants(id.permissions, catalog);
  if (id.key_scopes) permissions = permissions.filter((p) => id.allows(p));
  const plugins: Record<string, { visible: boolean; can_read: boolean; can_write: boolean; routes: string[] }> = {};
  for (const p of iam.pluginAccessEntries()) {
    plugins[p.id] = {
      visible: id.allows(`plugin:${p.id}`),
      can_read: id.allows(`plugin:${p.id}:api:read`),
      can_write: id.allows(`plugin:${p.id}:api:write`),
      routes: p.routes.filter((r) => id.allows(`plugin:${p.id}:route:${r}`)),
    };
  }
  return { username: id.username, groups: [...id.groups], is_superadmin: id.is_superadmin, permissions, plugins };
}

export function meRoutes(iam: IamComponent): Router {
  const r = new Router({ prefix: '/api/me' });

  r.get('/', requireIdentity, async (ctx) => {
    const id = identity(ctx);
    const user = id.user_id ? await iam.store.userById(id.user_id) : null;
    ctx.body = {
      id: id.user_id,
      username: id.username,
      display_name: user?.display_name ?? null,
      email: user?.email ?? null,
      groups: [...id.groups],
      roles: [...id.roles],
      method: id.method,
      is_system: id.is_system,
    };
  });

  r.get('/access', requireIdentity, (ctx) => {
    ctx.body = accessView(iam, identity(ctx));
  });

  const ownerOf = (ctx: { state: { identity: ApiIdentity | null } }) => {
    const id = identity(ctx as any);
    if (!id.user_id) throw forbiddenBecause('the system key owns no keys');
    return id;
  };

  r.get('/api-keys', requireIdentity, async (ctx) => {
    const id = ownerOf(ctx);
    ctx.body = { keys: (await iam.apiKeys.listFor(id.user_id!)).map((k) => ({ ...publicKey(k), current: k.id === id.credential_id })) };
  });

  r.post('/api-keys', requireIdentity, async (ctx) => {
    const id = ownerOf(ctx);
    const body = validate(createKeySchema, jsonBody(ctx));
    const unknown = (body.scopes ?? []).filter((s: string) => !iam.isKnownPermission(s));
    if (unknown.length) throw badField('scopes', `unknown permission ${unknown.join(', ')}`);
    // a scoped key cannot mint a broader one
    if (id.key_scopes) {
      if (!body.scopes?.length) throw badField('scopes', 'a scoped key can only create keys with scopes within its own');
      const outside = body.scopes.filter((s: string) => !id.allows(s));
      if (outside.length) throw badField('scopes', `outside this key's scopes: ${outside.join(', ')}`);
    }
    const { token, key } = await iam.apiKeys.create(id.user_id!, 'key', {
      label: body.label,
      scopes: body.scopes ?? null,
      expiresAt: body.expires_at ? body.expires_at.getTime() : null,
    });
    ctx.status = 201;
    ctx.body = { ...publicKey(key), token };
  });

  r.delete('/api-keys/:id', requireIdentity, async (ctx) => {
    const id = ownerOf(ctx);
    if (!(await iam.apiKeys.revoke(id.user_id!, ctx.params.id))) throw notFound('key');
    ctx.status = 204;
  });

  return r;
}
