import { actingFrom } from '../../request-context.js';
import crypto from 'node:crypto';
import type { Context } from 'koa';
import { DomainError } from '../../errors.js';
import type { User } from '../../iam/store.js';
import type { PermissionResolver } from '../../iam/resolver.js';
import type { Actor } from '../../iam/policy.js';
import type { ApiKeyStore } from '../api-keys.js';
import type { OneTimeStore } from '../one-time.js';
import { ApiIdentity } from '../identity.js';
import { safeEqual, sha256 } from '../../digest.js';
import type { MfaService } from './service.js';
import type { FactorKind, SecondFactorProof } from './factor.js';
import type { AttemptGate, AttemptVia, GateResult } from '../attempt-gate.js';
import { deviceCookieOf } from '../device-cookie.js';

/** The account acting for itself (no credential yet: the second step of its sign-in). */
export const userActor = (user: Pick<User, 'id' | 'username'>): Actor => ({ username: user.username, userId: user.id, isSystem: false, isSuperadmin: false });

export const MFA_TOKEN_TTL_MS = 5 * 60_000;
/** binds a second step to the browser that entered the password */
export const MFA_BINDING_COOKIE = 'svc.mfa';

/** Where a redirect (OIDC) sign-in goes on once its second step is passed. */
export interface RedirectResume {
  next: string;
  client_redirect: string | null;
  /** SHA-256 of the login binding cookie the exchange code is bound to (null: a client redirect_uri) */
  binding: string | null;
}

/** What a second-step token carries (sealed in the one-time store). */
export interface MfaTokenRecord {
  user_id: string;
  /** the provider that proved the first factor */
  provider: string;
  via: string;
  /** SHA-256 of the browser binding cookie; null for a client that is not a browser */
  binding: string | null;
  expires_at: number;
  /** a redirect sign-in: how it ends after the second step */
  resume: RedirectResume | null;
}

/**
 * The second step and step-up: second-step tokens (single use, five minutes, bound to the
 * browser that entered the password), verifying a code or a passkey assertion, and whether a
 * session's last verification covers an action that reaches the host (step-up).
 */
export class SecondStep {
  constructor(
    private readonly deps: {
      gate: AttemptGate;
      mfa: MfaService;
      oneTime: OneTimeStore;
      apiKeys: ApiKeyStore;
      resolver: PermissionResolver;
      secure: boolean;
      stepUpMs: number;
    },
  ) {}

  /**
   * Issues a second-step token for a user who passed the first factor. A browser (a request
   * with an Origin, or the login form) also gets a binding cookie the second step must bring.
   */
  async issue(
    ctx: Context,
    user: User,
    from: { provider: string; via: string; browser: boolean; resume?: RedirectResume | null },
    previous?: MfaTokenRecord,
  ): Promise<string> {
    let binding: string | null = previous?.binding ?? null;
    if (!previous && from.browser) {
      const value = crypto.randomBytes(32).toString('base64url');
      ctx.cookies.set(MFA_BINDING_COOKIE, value, {
        httpOnly: true,
        sameSite: 'lax',
        secure: this.deps.secure,
        path: '/',
        maxAge: MFA_TOKEN_TTL_MS,
        overwrite: true,
      });
      binding = sha256(value);
    }
    const expiresAt = previous?.expires_at ?? Date.now() + MFA_TOKEN_TTL_MS;
    const record: MfaTokenRecord = {
      user_id: user.id,
      provider: from.provider,
      via: from.via,
      binding,
      expires_at: expiresAt,
      resume: previous?.resume ?? from.resume ?? null,
    };
    return this.deps.oneTime.put('mfa_token', record, Math.max(1000, expiresAt - Date.now()));
  }

  /** Redeems a second-step token (once): its record, or null when unknown, used, expired or from another browser. */
  async redeem(ctx: Context, token: unknown): Promise<MfaTokenRecord | null> {
    const value = typeof token === 'string' ? token : null;
    // another browser's attempt (a leaked token without its cookie) must not spend the owner's token
    const seen = await this.deps.oneTime.peek<MfaTokenRecord>('mfa_token', value);
    if (!seen || !this.boundHere(ctx, seen)) return null;
    const record = await this.deps.oneTime.take<MfaTokenRecord>('mfa_token', value);
    if (!record || record.expires_at <= Date.now() || !this.boundHere(ctx, record)) return null;
    return record;
  }

  /**
   * The user a second-step token is for, without spending it (the token and, for a browser, its
   * binding cookie must be valid): whose passkeys a second step may offer.
   */
  async pendingUser(ctx: Context, token: unknown): Promise<string | null> {
    const record = await this.deps.oneTime.peek<MfaTokenRecord>('mfa_token', typeof token === 'string' ? token : null);
    return record && record.expires_at > Date.now() && this.boundHere(ctx, record) ? record.user_id : null;
  }

  /** Does this request bring the browser binding of `record` (or does it have none)? */
  private boundHere(ctx: Context, record: MfaTokenRecord): boolean {
    if (!record.binding) return true;
    const cookie = ctx.cookies.get(MFA_BINDING_COOKIE);
    return Boolean(cookie) && safeEqual(sha256(cookie!), record.binding);
  }

  /** Ends the browser binding once the second step is done. */
  clearBinding(ctx: Context): void {
    if (ctx.cookies.get(MFA_BINDING_COOKIE)) ctx.cookies.set(MFA_BINDING_COOKIE, null, { path: '/', overwrite: true });
  }

  /**
   * A second factor of `user` presented in this request, for the second step, step-up or
   * removing a factor: through the attempt gate (the client's budget and lockout, and the
   * account's own count of wrong factors). How it was proved, or why not.
   */
  prove(
    ctx: Context,
    user: User,
    proof: SecondFactorProof,
    via: Extract<AttemptVia, 'second_step' | 'step_up' | 'factor_removal'>,
  ): Promise<GateResult<FactorKind>> {
    return this.deps.mfa.enrolledSince(user.id).then((deviceSince) =>
      this.deps.gate.check(
        {
          secret: 'second_factor',
          username: user.username,
          ip: ctx.ip,
          deviceCookie: deviceCookieOf(ctx),
          deviceSince,
          via,
          provider: 'second_factor',
          log: ctx.log,
        },
        () => this.verify(ctx, user, proof),
      ),
    );
  }

  /** Checks a second factor of `user` with the registry: how it was proved, or null. Only prove() calls it (never past the gate). */
  private verify(ctx: Context, user: User, proof: SecondFactorProof): Promise<FactorKind | null> {
    // a recovery code spent is an event: by the caller (signed in: step-up, removal), else the
    // account itself from this address, by the second step of its sign-in
    const by = ctx.state.identity ? actingFrom(ctx.state.identity, ctx.ip) : actingFrom({ ...userActor(user), method: 'second_step' }, ctx.ip);
    return this.deps.mfa.verify(by, user, proof);
  }

  /**
   * Does `actor`'s credential need a fresh second factor before an action that reaches the
   * host or changes who is trusted? Only a web session (cookie, token, or a ws ticket minted
   * from one) of an account with a factor: API keys are issued from such a session and carry
   * no second step of their own; the system key and the CLI have none. Throws
   * `step_up_required` when the session's last verification is older than the window.
   */
  async require(actor: Actor): Promise<void> {
    if (actor.isSystem || !actor.userId) return;
    // an actor that is a user but not an identity resolved from a credential cannot say which
    // session it signs with: refused (never a silent pass)
    if (!(actor instanceof ApiIdentity)) throw new Error(`step-up asked of ${actor.username}, who acts without a credential identity`);
    const sessionId = await this.sessionOf(actor);
    if (!sessionId) return;
    const r = await this.deps.resolver.resolve(actor.userId);
    if (!r?.user.mfaEnabled) return;
    // the identity says when its session last proved a factor (as read when it was resolved);
    // a step-up since then is only in the database
    const known = actor.proof?.kind === 'credential' ? (actor.proof.mfa_at ?? null) : null;
    const fresh = (at: number | null) => at !== null && Date.now() - at <= this.deps.stepUpMs;
    if (fresh(known)) return;
    const at = await this.deps.apiKeys.verifiedAt(sessionId);
    if (fresh(at)) return;
    throw new DomainError('step_up_required', 'this action needs your second factor again: verify it (POST /api/auth/step-up) and retry', {
      step_up: { window_minutes: Math.round(this.deps.stepUpMs / 60_000) },
    });
  }

  /** The web session behind an identity (a ws ticket's too), or null for keys, Basic and the system key. */
  async sessionOf(identity: ApiIdentity): Promise<string | null> {
    const id = identity.credentialId;
    if (!id) return null;
    if (identity.method === 'session_cookie' || identity.method === 'session_token') return id;
    if (identity.method === 'ws_ticket') {
      const key = await this.deps.apiKeys.get(id);
      return key?.kind === 'session' ? id : null;
    }
    return null;
  }
}
