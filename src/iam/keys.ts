import { DomainError, fieldError, READ_SCOPED_REFUSAL } from '../errors.js';
import type { Knex } from 'knex';
import type { CommandPath } from './commands.js';
import { requireKnownPermissions } from './permissions.js';
import type { Actor } from './policy.js';
import type { User } from './store.js';
import type { UserAdmin } from './users.js';

/** Where keys are kept (the auth area's ApiKeyStore): the model only asks it to make and end them. */
export interface KeyVault<K> {
  create(
    userId: string,
    kind: 'key',
    opts: { label: string; scopes: string[] | null; expiresAt: number | null; parentId?: string | null },
    trx?: Knex,
  ): Promise<{ token: string; key: K }>;
  /** what ended, with labels (the events name them, as the issue's does): the credential first, then the keys minted with it */
  revoke(userId: string, id: string, trx?: Knex): Promise<Array<{ id: string; label: string }>>;
}

export interface KeyRequest {
  label: string;
  scopes?: string[] | null;
  expiresAt?: number | null;
}

/**
 * The credential a key is asked for with: a scoped key mints only keys within its scopes; a key
 * minted with a key (`parent`) expires no later than it and ends when it is revoked.
 */
export interface KeyIssuingCredential {
  keyScopes: readonly string[] | null;
  allows(permission: string): boolean;
  /** false: a key scoped to reads, which changes nothing of its own account (issues it no key) */
  mayChangeOwn?: boolean;
  parent?: { id: string; expiresAt: number | null } | null;
}

/**
 * The only writer of API keys, for the API (`/api/me/api-keys`, a user's keys) and the CLI:
 * scopes must exist; a key is issued to oneself, or by an actor who may take the owner's
 * account over (the host boundary: never a plain administrator for an account that reaches the
 * host); an API key of an account with a second factor issues none; a disabled owner gets none;
 * revoking takes access away and is open to administrators (but for superadmin and bot accounts).
 */
export class KeyAdmin<K extends { id: string }> {
  constructor(
    private readonly deps: {
      users: UserAdmin;
      vault: KeyVault<K>;
      commands: CommandPath;
      isKnownPermission(p: string): boolean;
      /** the permissions a scope stands for: itself, or what of the catalog a wildcard covers */
      permissionsOf(scope: string): readonly string[];
      /** what the owner holds now (groups, extra permissions, superadmin) */
      ownerAllows(owner: User): Promise<(permission: string) => boolean>;
    },
  ) {}

  async issue(
    actor: Actor,
    owner: User,
    request: KeyRequest,
    opts: { scopesField?: string; issuedWith?: KeyIssuingCredential } = {},
  ): Promise<{ token: string; key: K }> {
    const field = opts.scopesField ?? 'scopes';
    const via = opts.issuedWith;
    // a refusal is this command's denied event, on its way to the caller
    await this.deps.commands.run({ action: 'key.issued', actor, target: { type: 'key', name: request.label } }, async () => {
      await this.deps.users.guardCredentialMinting(actor, 'issue keys', owner);
      requireKnownPermissions(field, request.scopes, (p) => this.deps.isKnownPermission(p));
      if (via?.keyScopes) {
        if (!request.scopes?.length) throw fieldError(field, 'a scoped key can only create keys with scopes within its own');
        const outside = request.scopes.filter((s) => !via.allows(s));
        if (outside.length) throw fieldError(field, `outside this key's scopes: ${outside.join(', ')}`);
      }
      // oneself, with any credential of one's own but a key scoped to reads (whichever route it
      // asks by); a scoped key mints only keys within its scopes
      if (actor.userId !== owner.id) await this.deps.users.guardTakeover(actor, owner);
      else if (via?.mayChangeOwn === false) throw new DomainError('forbidden', READ_SCOPED_REFUSAL);
      if (owner.disabled) throw new DomainError('conflict', `${owner.username} is disabled: enable the user first`);
      // a scope narrows what the owner may do and adds nothing: one the owner holds nothing of (a
      // wildcard: nothing it covers) would make a key that silently cannot use it
      if (request.scopes?.length) {
        const allows = await this.deps.ownerAllows(owner);
        const lacking = request.scopes.filter((s) => !this.deps.permissionsOf(s).some(allows));
        if (lacking.length)
          throw fieldError(field, `${owner.username} does not hold ${lacking.join(', ')}: a key's scopes narrow its owner's permissions and add none`);
      }
    });
    // a key of one's own asked for with a key ends with it; one for another account stands alone,
    // as one the CLI or a web session issues (its owner's keys do not end with an administrator's)
    const parent = actor.userId === owner.id ? (via?.parent ?? null) : null;
    let expiresAt = request.expiresAt ?? null;
    if (parent?.expiresAt != null && (expiresAt === null || expiresAt > parent.expiresAt)) expiresAt = parent.expiresAt;
    const scopes = request.scopes?.length ? request.scopes : null;
    return this.deps.commands.within(
      async (trx) => {
        // the owner as the write finds it: a grant that landed since the check above is judged again
        if (actor.userId !== owner.id) await this.deps.users.lockForCredential(actor, owner.id, trx);
        return this.deps.vault.create(owner.id, 'key', { label: request.label, scopes, expiresAt, parentId: parent?.id ?? null }, trx);
      },
      ({ key }) => ({
        action: 'key.issued',
        actor,
        target: { type: 'key', id: key.id, name: request.label },
        details: {
          owner: owner.username,
          owner_id: owner.id,
          scopes,
          expires_at: expiresAt === null ? null : new Date(expiresAt).toISOString(),
          ...(parent ? { parent_id: parent.id } : {}),
        },
      }),
    );
  }

  /** Ends one key or web session of `owner`; false when there is no such live one. */
  async revoke(actor: Actor, owner: User, keyId: string): Promise<boolean> {
    if (actor.userId !== owner.id) {
      await this.deps.commands.run({ action: 'key.revoked', actor, target: { type: 'key', id: keyId } }, async () =>
        this.deps.users.guardProtectedRole(actor, owner),
      );
    }
    const ended = await this.deps.commands.within(
      (trx) => this.deps.vault.revoke(owner.id, keyId, trx),
      // one event a credential: the keys minted with this one end with it, each recorded as such
      (revoked) =>
        revoked.map((k) => ({
          action: 'key.revoked' as const,
          actor,
          target: { type: 'key', id: k.id, name: k.label },
          details: { owner: owner.username, owner_id: owner.id, ...(k.id === keyId ? {} : { with: keyId }) },
        })),
    );
    return ended.length > 0;
  }
}
