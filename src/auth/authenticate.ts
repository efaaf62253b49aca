import type { Context, Next } from 'koa';
import type { IncomingHttpHeaders } from 'node:http';
import { ApiIdentity, type CredentialMethod } from './identity.js';
import type { ApiKeyStore } from './api-keys.js';
import type { SystemKey } from './system-key.js';
import { parseBasic, type BasicVerifier } from './basic.js';
import type { LoginLockout } from './lockout.js';
import type { PermissionResolver } from '../iam/resolver.js';
import { forbiddenBecause, rateLimited } from '../http/errors.js';
import { SESSION_COOKIE } from './web-session.js';

declare module 'koa' {
  interface DefaultState {
    identity: ApiIdentity | null;
  }
}

const MAX_TOKEN = 512;
const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export interface AuthenticatorDeps {
  systemKey: SystemKey;
  apiKeys: ApiKeyStore;
  resolver: PermissionResolver;
  basic: BasicVerifier;
  lockout: LoginLockout;
  allowedOrigins: readonly string[];
}

/**
 * Resolves a request to one ApiIdentity, trying the credential methods of spec section 5 in
 * order: system key, per-user key or session token, HTTP Basic, UI cookie session. The first
 * identity found wins; a malformed or unknown credential is simply no identity.
 */
export class Authenticator {
  constructor(private readonly deps: AuthenticatorDeps) {}

  /** The identity of a user by id, with permissions from group membership (null if disabled/gone). */
  async identityOf(userId: string, method: CredentialMethod, extra: { scopes?: string[] | null; credentialId?: string | null } = {}) {
    const r = await this.deps.resolver.resolve(userId);
    if (!r || r.user.disabled) return null;
    const u = r.user;
    return new ApiIdentity(u.username, u.id, method, false, r.permissions, extra.scopes ?? null, u.roles.includes('superadmin'), u.groups, u.roles, extra.credentialId ?? null);
  }

  /** Methods 1-3 (headers only): shared by HTTP and the WebSocket upgrade. */
  async fromHeaders(headers: IncomingHttpHeaders, ip: string): Promise<ApiIdentity | null> {
    const candidates: string[] = [];
    const apiKey = headers['x-api-key'];
    if (typeof apiKey === 'string' && apiKey.trim()) candidates.push(apiKey.trim());
    const authz = typeof headers.authorization === 'string' ? headers.authorization : '';
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(authz);
    if (bearer) candidates.push(bearer[1]);

    for (const token of candidates) {
      if (token.length > MAX_TOKEN) continue;
      if (await this.deps.systemKey.matches(token)) return ApiIdentity.system();
    }
    for (const token of candidates) {
      if (token.length > MAX_TOKEN) continue;
      const key = await this.deps.apiKeys.lookup(token);
      if (key) {
        const method = key.kind === 'session' ? 'session_token' : 'api_key';
        const identity = await this.identityOf(key.user_id, method, { scopes: key.kind === 'key' ? key.scopes : null, credentialId: key.id });
        if (identity) return identity;
      }
    }
    if (/^Basic\s/i.test(authz)) {
      const creds = parseBasic(authz);
      if (creds) {
        const userId = await this.basicUser(creds.username, creds.password, ip);
        if (userId) return this.identityOf(userId, 'basic');
      }
    }
    return null;
  }

  private async basicUser(username: string, password: string, ip: string): Promise<string | null> {
    const cached = this.deps.basic.cached(username, password);
    if (cached) {
      // the password may have changed on another instance: the (briefly cached) user record tells
      const current = await this.deps.resolver.resolve(cached.userId);
      if (current && current.user.hashed_password === cached.hash) return cached.userId;
      this.deps.basic.forget(cached.userId);
    }
    const wait = await this.deps.lockout.begin(username, ip);
    if (wait > 0) throw rateLimited(wait);
    const userId = await this.deps.basic.verify(username, password);
    if (userId) await this.deps.lockout.succeed(username, ip);
    return userId;
  }

  /** Method 4: the UI cookie session; unsafe requests must come from an allowed Origin. */
  async fromCookie(ctx: Context): Promise<ApiIdentity | null> {
    if (!ctx.cookies.get(SESSION_COOKIE) || !ctx.session) return null;
    const keyId = ctx.session.key_id;
    if (typeof keyId !== 'string') return null;
    if (UNSAFE.has(ctx.method) && !this.originAllowed(ctx.get('origin') || refererOrigin(ctx.get('referer')))) {
      throw forbiddenBecause('cross-origin request refused: the Origin is not allowed');
    }
    const key = await this.deps.apiKeys.lookupById(keyId);
    if (!key || key.kind !== 'session') return null;
    return this.identityOf(key.user_id, 'session_cookie', { credentialId: key.id });
  }

  /** Which of these key / session ids are still live (not revoked, not expired, owner enabled). */
  liveCredentials(ids: string[]): Promise<Set<string>> {
    return this.deps.apiKeys.liveIds(ids);
  }

  originAllowed(origin: string | null | undefined): boolean {
    return Boolean(origin) && this.deps.allowedOrigins.includes(origin!);
  }

  middleware() {
    return async (ctx: Context, next: Next) => {
      const fromHeaders = await this.fromHeaders(ctx.req.headers, ctx.ip);
      // browsers replay cached Basic credentials on cross-site requests, like cookies
      if (fromHeaders?.method === 'basic' && UNSAFE.has(ctx.method)) {
        const origin = ctx.get('origin') || refererOrigin(ctx.get('referer'));
        if (origin && !this.originAllowed(origin)) throw forbiddenBecause('cross-origin request refused: the Origin is not allowed');
      }
      ctx.state.identity = fromHeaders ?? (await this.fromCookie(ctx));
      await next();
    };
  }
}

function refererOrigin(referer: string): string | null {
  if (!referer) return null;
  try {
    return new URL(referer).origin;
  } catch {
    return null;
  }
}
