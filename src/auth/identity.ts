import { grantsInclude } from '../iam/permissions.js';

export type CredentialMethod = 'system_key' | 'api_key' | 'session_token' | 'basic' | 'session_cookie' | 'ws_ticket';

/**
 * What an identity was proven with, kept so that a long-lived connection can be checked again
 * later (and a ws ticket carries its minting credential's proof along): the system key's
 * SHA-256, a key or web-session row, or the SHA-256 of the password hash Basic was checked
 * against. Never the secret itself.
 */
export type CredentialProof =
  | { kind: 'system_key'; stamp: string }
  /** a key or web session; a web session also says when it was signed in and when its holder last proved a second factor */
  | { kind: 'credential'; id: string; expires_at: number | null; signed_in_at?: number; mfa_at?: number | null }
  | { kind: 'password'; stamp: string };

/**
 * The resolved caller. Permissions are the precomputed effective set; key_scopes (per-user
 * keys only) narrow it further.
 */
export class ApiIdentity {
  constructor(
    readonly username: string,
    readonly userId: string | null,
    readonly method: CredentialMethod,
    readonly isSystem: boolean,
    readonly permissions: ReadonlySet<string>,
    readonly keyScopes: readonly string[] | null = null,
    readonly isSuperadmin = false,
    readonly groups: readonly string[] = [],
    readonly roles: readonly string[] = [],
    readonly proof: CredentialProof | null = null,
    /** the user has a second factor (a web session of theirs may need a step-up) */
    readonly mfaEnabled = false,
  ) {}

  static system(stamp: string, method: CredentialMethod = 'system_key'): ApiIdentity {
    return new ApiIdentity('system', null, method, true, new Set(), null, false, [], [], { kind: 'system_key', stamp });
  }

  /** The api_keys row behind a key or session (for logout and revocation), else null. */
  get credentialId(): string | null {
    return this.proof?.kind === 'credential' ? this.proof.id : null;
  }

  /**
   * May this caller change its own things (its profile, keys, factors, notifications) on the
   * routes that name no permission? Not a key scoped without `api:write`: its scopes say what it
   * may do, and its owner's own things are no exception (docs/auth.md, "Scoped keys").
   */
  mayChangeOwn(): boolean {
    return !this.keyScopes || grantsInclude(this.keyScopes, 'api:write');
  }

  allows(permission: string): boolean {
    if (this.isSystem) return true;
    if (this.keyScopes && !grantsInclude(this.keyScopes, permission)) return false;
    if (this.isSuperadmin) return true;
    return grantsInclude(this.permissions, permission);
  }
}
