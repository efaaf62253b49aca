import type Router from '@koa/router';
import Joi from 'joi';
import type { AuthComponent } from '../component.js';
import type { Context } from 'koa';
import { actor, identity } from '../guards.js';
import { publicKey, publicKeySchema, type ApiKey } from '../api-keys.js';
import { ApiRouter } from '../../http/api.js';
import { forbiddenBecause, notFound } from '../../http/errors.js';
import { sendJson } from '../../http/body.js';
import { expandGrants } from '../../iam/permissions.js';
import { createKeySchema, uuidParam } from '../../iam/schemas.js';
import type { ApiIdentity } from '../identity.js';
import { issuingCredential, newKeyView } from './views.js';

const myKeysView = Joi.object({
  keys: Joi.array().items(Joi.object({ ...publicKeySchema, current: Joi.boolean().description('the credential of this request') })),
});
const revokedView = Joi.object({ revoked: Joi.number().integer().min(0).description('the keys revoked now') });

/** The access view: effective permissions and what each plugin lets this caller do. */
export function accessView(auth: AuthComponent, id: ApiIdentity) {
  const catalog = auth.iam.catalog();
  const all = id.isSystem || id.isSuperadmin;
  let permissions = all
    ? expandGrants(
        catalog.map((e) => e.id),
        catalog,
      )
    : expandGrants(id.permissions, catalog);
  if (id.keyScopes) permissions = permissions.filter((p) => id.allows(p));
  const plugins: Record<string, { visible: boolean; can_read: boolean; can_write: boolean; routes: string[] }> = {};
  for (const p of auth.iam.pluginAccessEntries()) {
    // a disabled or failed plugin is listed, as nothing anyone can see or use
    plugins[p.id] = p.running
      ? {
          visible: id.allows(`plugin:${p.id}`),
          can_read: id.allows(`plugin:${p.id}:api:read`),
          can_write: id.allows(`plugin:${p.id}:api:write`),
          routes: p.routes.filter((r) => id.allows(`plugin:${p.id}:route:${r}`)),
        }
      : { visible: false, can_read: false, can_write: false, routes: [] };
  }
  return { username: id.username, groups: [...id.groups], is_superadmin: id.isSuperadmin, permissions, plugins };
}

/**
 * `userId`'s live API keys issued before their oldest second factor: they never passed one and
 * keep working (automation goes on), so every enrolment answers them for a revoke. Newest first,
 * and a key minted with another before it: revoked in this order, none ends with its parent
 * unrecorded.
 */
export async function keysBeforeFactor(auth: AuthComponent, userId: string): Promise<ApiKey[]> {
  const since = await auth.mfa.enrolledSince(userId);
  if (since === null) return [];
  const keys = (await auth.apiKeys.listFor(userId)).filter((k) => k.kind === 'key' && k.createdAt < since);
  const byId = new Map(keys.map((k) => [k.id, k]));
  const depth = (k: ApiKey) => {
    let d = 0;
    for (let p = byId.get(k.parentId ?? ''); p && d < 32; p = byId.get(p.parentId ?? '')) d++;
    return d;
  };
  const depths = new Map(keys.map((k) => [k.id, depth(k)]));
  return keys.sort((a, b) => depths.get(b.id)! - depths.get(a.id)!);
}

interface KeyIdParams {
  id: string;
}

const keyIdParams = Joi.object<KeyIdParams, true>({ id: uuidParam.description('the id of the key or session') });

const meResponse = Joi.object({
  id: Joi.string().guid().allow(null),
  username: Joi.string(),
  display_name: Joi.string().allow(null),
  email: Joi.string().allow(null),
  groups: Joi.array().items(Joi.string()),
  roles: Joi.array().items(Joi.string()),
  method: Joi.string().valid('system_key', 'api_key', 'session_token', 'basic', 'session_cookie', 'ws_ticket'),
  is_system: Joi.boolean(),
});

const accessResponse = Joi.object({
  username: Joi.string(),
  groups: Joi.array().items(Joi.string()),
  is_superadmin: Joi.boolean(),
  permissions: Joi.array().items(Joi.string()).description('effective permission ids, sorted'),
  plugins: Joi.object().pattern(
    Joi.string(),
    Joi.object({ visible: Joi.boolean(), can_read: Joi.boolean(), can_write: Joi.boolean(), routes: Joi.array().items(Joi.string()) }),
  ),
});

export function meRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ prefix: '/api/me', tag: 'me' });

  // Both views are made once per resolved identity (the identity cache keeps one object per
  // credential until something about that user changes) and kept as JSON text.
  const profiles = new WeakMap<ApiIdentity, string>();
  const accesses = new WeakMap<ApiIdentity, { version: number; json: string }>();

  api.endpoint(
    {
      method: 'GET',
      path: '/',
      operationId: 'getMe',
      summary: 'Who am I',
      auth: 'identity',
      responses: { 200: { description: 'the caller', schema: meResponse } },
    },
    async (ctx) => {
      const id = identity(ctx);
      let json = profiles.get(id);
      if (json === undefined) {
        const user = id.userId ? (await auth.iam.resolver.resolve(id.userId))?.user : null;
        json = JSON.stringify({
          id: id.userId,
          username: id.username,
          display_name: user?.displayName ?? null,
          email: user?.email ?? null,
          groups: [...id.groups],
          roles: [...id.roles],
          method: id.method,
          is_system: id.isSystem,
        });
        profiles.set(id, json);
      }
      sendJson(ctx, json);
    },
  );

  api.endpoint(
    {
      method: 'GET',
      path: '/access',
      operationId: 'getMyAccess',
      summary: 'My effective access (permissions and per-plugin view)',
      auth: 'identity',
      responses: { 200: { description: 'the access view', schema: accessResponse } },
    },
    (ctx) => {
      const id = identity(ctx);
      let hit = accesses.get(id);
      if (!hit || hit.version !== auth.iam.accessVersion) {
        hit = { version: auth.iam.accessVersion, json: JSON.stringify(accessView(auth, id)) };
        accesses.set(id, hit);
      }
      sendJson(ctx, hit.json);
    },
  );

  const ownerOf = (ctx: Context) => {
    const id = actor(ctx);
    if (!id.userId) throw forbiddenBecause('the system key owns no keys');
    return id;
  };

  // what refuses any call under /api/me/api-keys (besides what each adds)
  // the document adds step-up where declared, another origin and the enrolment wall
  const NO_KEYS = 'the system key owns no keys';

  api.endpoint(
    {
      method: 'GET',
      path: '/api-keys',
      operationId: 'listMyKeys',
      summary: 'My API keys and web sessions',
      description: 'Never shows a token. Web sessions are listed with `kind: "session"`; `current` marks the credential of this request.',
      auth: 'identity',
      responses: {
        200: { description: 'the keys', schema: myKeysView },
        403: NO_KEYS,
      },
    },
    async (ctx) => {
      const id = ownerOf(ctx);
      return { keys: (await auth.apiKeys.listFor(id.userId!)).map((k) => ({ ...publicKey(k), current: k.id === id.credentialId })) };
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api-keys',
      operationId: 'issueMyKey',
      summary: 'Create an API key',
      description:
        "The token is in this answer only. `scopes` limits the key to these permissions (within the owner's); a key created with a scoped key must be scoped within it. A key outlives its session and needs no second factor: for an account with one, keys are issued from a web session whose factor was verified lately (step-up), never with an API key (a narrower one neither).",
      auth: 'identity',
      stepUp: true,
      body: createKeySchema,
      responses: {
        201: { description: 'the key with its token (shown once)', schema: newKeyView },
        403: `${NO_KEYS}; or an API key of an account with a second factor (issue keys from a signed-in session that verified it lately)`,
      },
    },
    async (ctx, { body }) => {
      const id = ownerOf(ctx);
      const owner = await auth.iam.users.find({ id: id.userId! });
      // a scoped key cannot mint a broader one (issuedWith)
      const { token, key } = await auth.keys.issue(
        id,
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
      method: 'POST',
      path: '/api-keys/revoke-before-factor',
      operationId: 'revokeMyKeysBeforeFactor',
      summary: 'Revoke my API keys issued before my second factor',
      description:
        'Revokes, in one step, the live API keys the enrolment answers listed as `keys_before_factor`: those issued before your oldest second factor, which never passed it (each revocation is its own `key.revoked` event, and keys minted with one end with it). Nothing to revoke answers 0.',
      auth: 'identity',
      responses: {
        200: { description: 'how many keys were revoked', schema: revokedView },
        403: `${NO_KEYS}; or not a web session (an API key or Basic)`,
      },
    },
    async (ctx) => {
      const id = ownerOf(ctx);
      // the owner at the page that enrolled: a key that never passed the factor does not choose which keys stay
      if (id.method !== 'session_cookie' && id.method !== 'session_token') throw forbiddenBecause('revoke these keys from a signed-in session');
      const owner = await auth.iam.users.find({ id: id.userId! });
      let revoked = 0;
      // newest first: a key minted with another is revoked (and recorded) before the one it ends with
      for (const key of await keysBeforeFactor(auth, owner.id)) if (await auth.keys.revoke(id, owner, key.id)) revoked++;
      return { revoked };
    },
  );

  api.endpoint(
    {
      method: 'DELETE',
      path: '/api-keys/:id',
      operationId: 'revokeMyKey',
      summary: 'Revoke one of my API keys or sessions',
      auth: 'identity',
      // giving up access is open to every key: a key scoped to reads revokes itself (and nothing else, below)
      readScopedMay: true,
      params: keyIdParams,
      responses: {
        204: 'revoked',
        403: `${NO_KEYS}; or a scoped API key revoking anything but itself`,
        404: 'no such key of mine',
      },
    },
    async (ctx, { params }) => {
      const id = ownerOf(ctx);
      // a scoped key may revoke itself, not its owner's other keys and sessions
      if (id.keyScopes && params.id !== id.credentialId) throw forbiddenBecause('a scoped API key can only revoke itself');
      if (!(await auth.keys.revoke(id, await auth.iam.users.find({ id: id.userId! }), params.id))) throw notFound('key');
      ctx.status = 204;
    },
  );

  return api.router;
}
