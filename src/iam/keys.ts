import { DomainError, fieldError } from '../errors.js';
import type { Logger } from '../log.js';
import { requireKnownPermissions } from './permissions.js';
import type { Actor } from './policy.js';
import type { User } from './store.js';
import type { UserAdmin } from './users.js';

/** Where keys are kept (the auth area's ApiKeyStore): the model only asks it to make and end them. */
export interface KeyVault<K> {
  create(userId: string, kind: 'key', opts: { label: string; scopes: string[] | null; expiresAt: number | null }): Promise<{ token: string; key: K }>;
  revoke(userId: string, id: string): Promise<boolean>;
}

export interface KeyRequest {
  label: string;
  scopes?: string[] | null;
  expiresAt?: number | null;
}

/** The credential a key is asked for with: a scoped key mints only keys within its scopes. */
export interface KeyIssuingCredential {
  keyScopes: readonly string[] | null;
  allows(permission: string): boolean;
}

/**
 * The only writer of API keys, for the API (`/api/me/api-keys`, a user's keys) and the CLI:
 * scopes must exist; a key is issued to oneself, or by an actor who may take the owner's
 * account over (the host boundary: never a plain administrator for an account that reaches the
 * host); a disabled owner gets none; revoking takes access away and is open to administrators
 * (but for superadmin and bot accounts).
 */
export class KeyAdmin<K> {
  constructor(private readonly deps: { users: UserAdmin; vault: KeyVault<K>; isKnownPermission(p: string): boolean }) {}

  async issue(actor: Actor, owner: User, request: KeyRequest, log: Logger, opts: { scopesField?: string; issuedWith?: KeyIssuingCredential } = {}): Promise<{ token: string; key: K }> {
    const field = opts.scopesField ?? 'scopes';
    requireKnownPermissions(field, request.scopes, (p) => this.deps.isKnownPermission(p));
    const via = opts.issuedWith;
    if (via?.keyScopes) {
      if (!request.scopes?.length) throw fieldError(field, 'a scoped key can only create keys with scopes within its own');
      const outside = request.scopes.filter((s) => !via.allows(s));
      if (outside.length) throw fieldError(field, `outside this key's scopes: ${outside.join(', ')}`);
    }
    await this.deps.users.guardTakeover(actor, owner);
    if (owner.disabled) throw new DomainError('conflict', `${owner.username} is disabled: enable the user first`);
    const issued = await this.deps.vault.create(owner.id, 'key', { label: request.label, scopes: request.scopes?.length ? request.scopes : null, expiresAt: request.expiresAt ?? null });
    if (actor.userId !== owner.id) {
      log.info({ audit: 'api_key_issued', actor: actor.username, user_id: owner.id, username: owner.username, scopes: request.scopes ?? null }, 'audit: API key issued');
    }
    return issued;
  }

  /** Ends one key or web session of `owner`; false when there is no such live one. */
  async revoke(actor: Actor, owner: User, keyId: string): Promise<boolean> {
    if (actor.userId !== owner.id) this.deps.users.guardProtectedRole(actor, owner);
    return this.deps.vault.revoke(owner.id, keyId);
  }
}
