import { grantsInclude } from '../iam/permissions.js';

export type CredentialMethod = 'system_key' | 'api_key' | 'session_token' | 'basic' | 'session_cookie' | 'ws_ticket';

/**
 * The resolved caller (spec section 2, ApiIdentity). Permissions are the precomputed effective
 * set; key_scopes (per-user keys only) narrow it further.
 */
export class ApiIdentity {
  constructor(
    readonly username: string,
    readonly user_id: string | null,
    readonly method: CredentialMethod,
    readonly is_system: boolean,
    readonly permissions: ReadonlySet<string>,
    readonly key_scopes: readonly string[] | null = null,
    readonly is_superadmin = false,
    readonly groups: readonly string[] = [],
    readonly roles: readonly string[] = [],
    /** the api_keys row behind a key or session (for logout / revocation) */
    readonly credential_id: string | null = null,
  ) {}

  static system(): ApiIdentity {
    return new ApiIdentity('system', null, 'system_key', true, new Set());
  }

  allows(permission: string): boolean {
    if (this.is_system) return true;
    if (this.key_scopes && !grantsInclude(this.key_scopes, permission)) return false;
    if (this.is_superadmin) return true;
    return grantsInclude(this.permissions, permission);
  }
}
