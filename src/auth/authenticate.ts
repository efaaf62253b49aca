import net from 'node:net';
import type { Context, Next } from 'koa';
import type { IncomingHttpHeaders } from 'node:http';
import { ApiIdentity, type CredentialMethod, type CredentialProof } from './identity.js';
import type { ApiKeyStore } from './api-keys.js';
import type { SystemKey } from './system-key.js';
import { parseBasic, type BasicVerifier, type CachedVerification } from './basic.js';
import type { AttemptGate } from './attempt-gate.js';
import { normalizeLogin } from './attempts.js';
import { sha256 } from '../digest.js';
import type { IdentityCache } from './identity-cache.js';
import type { PermissionResolver, ResolvedUser } from '../iam/resolver.js';
import { PASSWORD_MAX } from '../iam/passwords.js';
import { badField, crossOriginRefused, HttpError } from '../http/errors.js';
import { SESSION_COOKIE, hasSessionCookie } from './web-session.js';

/** Where a request's refusals are recorded: by a permission check (src/http/guards.ts), or thrown by a route (src/http/app.ts). */
export interface RequestDenials {
  denied(ctx: Context, permission: string): void;
  refused(ctx: Context, err: unknown): void;
}

declare module 'koa' {
  interface DefaultState {
    identity: ApiIdentity | null;
    /** step-up for routes that declare it (src/auth/mfa/step.ts) */
    stepUp?: { require(identity: unknown): Promise<void> };
    /** records a refusal by a permission check, or one a route threw */
    denials?: RequestDenials;
  }
}

const MAX_TOKEN = 512;
const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

export interface AuthenticatorDeps {
  /** resolved identities by credential (no cache when omitted) */
  cache?: IdentityCache;
  systemKey: SystemKey;
  apiKeys: ApiKeyStore;
  resolver: PermissionResolver;
  basic: BasicVerifier;
  /** Basic's password checks pass the attempt gate (budget and lockout per address, failure events) */
  gate: AttemptGate;
  allowedOrigins: readonly string[];
}

/** The proof of a Basic login: the stored hash it was checked against, hashed again. */
export function passwordProof(hashedPassword: string | null): Extract<CredentialProof, { kind: 'password' }> {
  return { kind: 'password', stamp: sha256(hashedPassword ?? '') };
}

/**
 * Resolves a request to one ApiIdentity, trying the credential methods (docs/auth.md) in
 * order: system key, per-user key or session token, HTTP Basic, UI cookie session. The first
 * identity found wins; a malformed or unknown credential is simply no identity.
 */
export class Authenticator {
  constructor(private readonly deps: AuthenticatorDeps) {}

  /** The identity of a user by id, with permissions from group membership (null if disabled/gone). */
  async identityOf(userId: string, method: CredentialMethod, extra: { scopes?: readonly string[] | null; proof?: CredentialProof | null } = {}) {
    const r = await this.deps.resolver.resolve(userId);
    return r ? this.build(r, method, extra) : null;
  }

  private build(r: ResolvedUser, method: CredentialMethod, extra: { scopes?: readonly string[] | null; proof?: CredentialProof | null }): ApiIdentity | null {
    const u = r.user;
    if (u.disabled) return null;
    return new ApiIdentity(
      u.username,
      u.id,
      method,
      false,
      r.permissions,
      extra.scopes ?? null,
      u.roles.includes('superadmin'),
      u.groups,
      u.roles,
      extra.proof ?? null,
      u.mfaEnabled,
    );
  }

  /** Methods 1-3 (headers only): shared by HTTP and the WebSocket upgrade. */
  async fromHeaders(headers: IncomingHttpHeaders, ip: string): Promise<ApiIdentity | null> {
    const candidates: string[] = [];
    const apiKey = headers['x-api-key'];
    if (typeof apiKey === 'string' && apiKey.trim()) candidates.push(apiKey.trim());
    const authz = typeof headers.authorization === 'string' ? headers.authorization : '';
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(authz);
    if (bearer) candidates.push(bearer[1]);

    // the system key first, over both headers (the specification's order), then user keys: a
    // user key in one header never shadows the system key in the other
    if (candidates.length > 1) {
      for (const token of candidates) {
        const stamp = token.length <= MAX_TOKEN ? await this.deps.systemKey.matches(token) : null;
        if (stamp) return this.remember(`t:${sha256(token)}`, ApiIdentity.system(stamp));
      }
    }
    for (const token of candidates) {
      if (token.length > MAX_TOKEN) continue;
      const hash = sha256(token);
      const cached = this.deps.cache?.get(`t:${hash}`);
      if (cached) {
        if (cached.credentialId) this.deps.apiKeys.touch(cached.credentialId);
        return cached;
      }
      const stamp = await this.deps.systemKey.matches(token);
      if (stamp) return this.remember(`t:${hash}`, ApiIdentity.system(stamp));
      const key = await this.deps.apiKeys.lookupHash(hash);
      if (key) {
        const method = key.kind === 'session' ? 'session_token' : 'api_key';
        const proof: CredentialProof = {
          kind: 'credential',
          id: key.id,
          expires_at: key.expiresAt,
          ...(key.kind === 'session' ? { signed_in_at: key.createdAt, mfa_at: key.mfaAt } : {}),
        };
        const identity = await this.identityOf(key.userId, method, { scopes: key.kind === 'key' ? key.scopes : null, proof });
        if (identity) return this.remember(`t:${hash}`, identity, key.expiresAt);
      }
    }
    if (/^Basic\s/i.test(authz)) {
      // a repeated header is found by a keyed hash alone: no decoding, no normalising
      const cacheKey = `b:${this.deps.basic.cacheKeyOf(authz)}`;
      const cached = this.deps.cache?.get(cacheKey);
      if (cached) return cached;
      const creds = parseBasic(authz);
      if (creds) {
        if (creds.password.length > PASSWORD_MAX) throw badField('authorization', `the password must be at most ${PASSWORD_MAX} characters`);
        const username = normalizeLogin(creds.username);
        const verified = await this.basicUser(username, creds.password, ip, creds.username);
        if (verified) {
          const identity = await this.identityOf(verified.userId, 'basic', { proof: passwordProof(verified.hash) });
          // a password alone never signs in an account with a second factor (programs use API keys)
          if (identity?.mfaEnabled) throw mfaRequired();
          return identity ? this.remember(cacheKey, identity) : null;
        }
      }
    }
    return null;
  }

  private async basicUser(username: string, password: string, ip: string, typed: string): Promise<CachedVerification | null> {
    const cached = this.deps.basic.cached(username, password);
    if (cached) {
      // the password may have changed on another instance: the (briefly cached) user record tells
      const current = await this.deps.resolver.resolve(cached.userId);
      if (current && current.user.hashedPassword === cached.hash) return cached;
      this.deps.basic.forget(cached.userId);
    }
    return this.deps.basic.once(username, password, () => this.checkBasic(username, password, ip, typed));
  }

  private async checkBasic(username: string, password: string, ip: string, typed: string): Promise<CachedVerification | null> {
    return this.deps.gate.guard({ secret: 'password', username: typed, ip, via: 'basic', provider: 'local' }, () => this.deps.basic.verify(username, password));
  }

  /** Method 4: the UI cookie session; unsafe requests must come from an allowed Origin. */
  async fromCookie(ctx: Context): Promise<ApiIdentity | null> {
    if (!hasSessionCookie(ctx.req.headers.cookie) || !ctx.cookies.get(SESSION_COOKIE) || !ctx.session) return null;
    const keyId = ctx.session.key_id;
    if (typeof keyId !== 'string') return null;
    if (UNSAFE.has(ctx.method) && !this.originAllowed(ctx.get('origin') || refererOrigin(ctx.get('referer')), requestOrigin(ctx))) {
      throw crossOriginRefused();
    }
    const cached = this.deps.cache?.get(`c:${keyId}`);
    if (cached) return cached;
    const key = await this.deps.apiKeys.lookupById(keyId);
    if (!key || key.kind !== 'session') return null;
    const identity = await this.identityOf(key.userId, 'session_cookie', {
      proof: { kind: 'credential', id: key.id, expires_at: key.expiresAt, signed_in_at: key.createdAt, mfa_at: key.mfaAt },
    });
    return identity ? this.remember(`c:${keyId}`, identity, key.expiresAt) : null;
  }

  private remember(key: string, identity: ApiIdentity, expiresAt: number | null = null): ApiIdentity {
    this.deps.cache?.set(key, identity, expiresAt);
    return identity;
  }

  /**
   * Checks identities made earlier (live ws connections) against what holds now: the system key
   * still the one they were made with; the owner still enabled; the key or session not revoked
   * or expired; the password not changed since Basic checked it. Each answer is the identity
   * with fresh permissions, or null when it has ended. One query for every credential row.
   */
  async revalidate(identities: readonly ApiIdentity[]): Promise<Array<ApiIdentity | null>> {
    const credentialIds = [...new Set(identities.map((i) => i.credentialId).filter((id): id is string => id !== null))];
    const live = credentialIds.length ? await this.deps.apiKeys.liveIds(credentialIds) : new Set<string>();
    const systemStamp = identities.some((i) => i.isSystem) ? await this.deps.systemKey.stamp() : null;
    const out: Array<ApiIdentity | null> = [];
    for (const identity of identities) {
      const proof = identity.proof;
      if (identity.isSystem) {
        out.push(proof?.kind === 'system_key' && systemStamp !== null && proof.stamp === systemStamp ? identity : null);
        continue;
      }
      if (!identity.userId || !proof || (proof.kind === 'credential' && !live.has(proof.id))) {
        out.push(null);
        continue;
      }
      const r = await this.deps.resolver.resolve(identity.userId);
      // Basic ends with its password, and when the account enrols a second factor
      if (!r || (proof.kind === 'password' && (r.user.mfaEnabled || passwordProof(r.user.hashedPassword).stamp !== proof.stamp))) {
        out.push(null);
        continue;
      }
      out.push(this.build(r, identity.method, { scopes: identity.keyScopes, proof }));
    }
    return out;
  }

  /**
   * May a browser page at `origin` act with this user's cookie or cached Basic credentials?
   * Yes for the public URL and SERVICE_ALLOWED_ORIGINS, and for the address the request itself
   * was sent to (`self`) when that address is an IP literal or `localhost` (a page of ours
   * opened at 127.0.0.1 instead of the public name). Never for another name the Host header
   * carries: a page on an attacker's name that resolves to this service (DNS rebinding) sends
   * a matching Origin and Host.
   */
  originAllowed(origin: string | null | undefined, self: string | null = null): boolean {
    if (!origin) return false;
    return this.deps.allowedOrigins.includes(origin) || (origin === self && isAddressLiteral(self));
  }

  middleware() {
    return async (ctx: Context, next: Next) => {
      // browsers replay cached Basic credentials on cross-site requests, like cookies: refused
      // before the password is checked (no attempt spent, no hashing)
      if (UNSAFE.has(ctx.method) && /^Basic\s/i.test(ctx.get('authorization'))) {
        const origin = ctx.get('origin') || refererOrigin(ctx.get('referer'));
        if (origin && !this.originAllowed(origin, requestOrigin(ctx))) throw crossOriginRefused();
      }
      ctx.state.identity = (await this.fromHeaders(ctx.req.headers, ctx.ip)) ?? (await this.fromCookie(ctx));
      await next();
    };
  }
}

/** Basic for an account with a second factor: refused whatever the password (docs/auth.md). */
export const mfaRequired = () => new HttpError(401, 'mfa_required', 'this account uses a second factor: sign in through the login page, or use an API key');

/**
 * The origin the request was sent to: scheme and Host as the app reads them (the forwarded ones
 * behind a trusted proxy). Not Koa's `ctx.origin`, which answers the Origin header when there is one.
 */
export function requestOrigin(ctx: Pick<Context, 'protocol' | 'host'>): string {
  return `${ctx.protocol}://${ctx.host}`;
}

/** Is the host of this origin an IP address or localhost (names no one else can point here)? */
function isAddressLiteral(origin: string | null): boolean {
  if (!origin) return false;
  try {
    const host = new URL(origin).hostname.replace(/^\[|\]$/g, '');
    return host === 'localhost' || net.isIP(host) !== 0;
  } catch {
    return false;
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
