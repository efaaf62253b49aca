import crypto from 'node:crypto';
import type { Logger } from '../log.js';
import type { IamStore, User } from '../iam/store.js';
import { DomainError } from '../errors.js';
import { LOGIN_MAPPING_ACTOR, type UserAdmin } from '../iam/users.js';
import type { ProfileChange } from '../iam/login-writes.js';
import { hasProtectedRole, reachesHost, type Actor } from '../iam/policy.js';
import type { ExternalProfile } from './providers/types.js';

/**
 * Resolves every login to one local profile (docs/auth.md, Linking):
 *  1. a known (provider, provider_user_id) -> that user;
 *  2. local logins -> the user of that username (its local identity is linked if missing);
 *  3. LDAP / OIDC, when the operator lets that provider link by e-mail (SERVICE_LDAP_LINK_BY_EMAIL
 *     off by default, SERVICE_OIDC_LINK_BY_EMAIL on): a verified email (`email_verified` true)
 *     held by exactly one local user who has no other identity at the same provider, and who
 *     neither administers the service nor reaches the host (nor is a superadmin or bot) -> link
 *     to that user;
 *  4. else a new user: SERVICE_SSO_DEFAULT_GROUPS, no password (SSO-only), a free username
 *     (alice, alice-2, ...), the email only when verified and held by no other user.
 * Groups: a provider that maps groups (profile.groups defined) is authoritative for the local
 * groups its mapping can grant; those follow the directory on every login, every other group
 * (granted locally, defaults) is never touched. See docs/auth.md.
 * The profile: a directory (DIRECTORY_PROVIDERS) is the person's record, so the username (when
 * no other user has it), e-mail (when no other user has it) and display name follow it at every
 * sign-in and directory recheck (the link, objectSid or DN, stays the identity); another provider
 * only fills an empty e-mail and display name. A sign-in through the directory of an account its
 * directory's end disabled is that account's return: it is enabled again (src/iam/login-writes.ts).
 * Users are created, linked, filled in and their groups changed through UserAdmin, like every
 * other write: each is an audit event by the login mapping (or the directory recheck).
 */

export type LinkedVia = 'identity' | 'local' | 'email' | 'created';

export interface LinkResult {
  user: User;
  via: LinkedVia;
  groupsChanged: boolean;
}

export interface LinkerDeps {
  store: IamStore;
  /** the only writer of users */
  users: UserAdmin;
  log: Logger;
  /** SERVICE_SSO_DEFAULT_GROUPS as currently configured */
  defaultGroups(): string[];
  /** the local groups a provider's mapping controls */
  managedGroups(providerId: string): ReadonlySet<string>;
  /** whether the operator lets this provider join a first login to an existing user by e-mail */
  linkByEmail(providerId: string): boolean;
  /**
   * whether a trusted actor configured what this provider maps (LDAP, OIDC: their mappings pass
   * the host boundary when they are set); a plugin's provider decides its groups at run time
   */
  mappingConfigured(providerId: string): boolean;
}

/** Providers whose verified email may join a login to an existing user. */
const EMAIL_LINKING_PROVIDERS = new Set(['ldap', 'oidc']);
/** Providers that are the person's record: name, e-mail and display name follow them (and an account's end and return). */
export const DIRECTORY_PROVIDERS: ReadonlySet<string> = new Set(['ldap']);
const MAX_USERNAME = 64;
/** users whose wanted name or address is held by another, as last logged (once per change, not at every round) */
const REPORTED_MAX = 10_000;

/** A username this service accepts (USERNAME in schemas.ts), from whatever the provider calls the person. */
export function usernameBase(preferred: string): string {
  const cleaned = preferred
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9._@-]+/g, '-')
    .replace(/^[-.]+|[-.]+$/g, '')
    .slice(0, MAX_USERNAME - 8);
  return cleaned || 'user';
}

export class IdentityLinker {
  private readonly reported = new Map<string, string>();

  constructor(private readonly deps: LinkerDeps) {}

  async link(profile: ExternalProfile): Promise<LinkResult> {
    const { store } = this.deps;
    let user = await store.userByIdentity(profile.provider, profile.provider_user_id);
    let via: LinkedVia = 'identity';

    if (!user && profile.provider === 'local') {
      user = await store.userByUsername(profile.provider_user_id);
      if (!user) throw new Error(`local login for unknown user ${profile.provider_user_id}`);
      await this.deps.users.logins.linkIdentity(user, 'local', user.username, 'local');
      via = 'local';
    }
    if (!user && EMAIL_LINKING_PROVIDERS.has(profile.provider) && this.deps.linkByEmail(profile.provider)) {
      user = await this.byVerifiedEmail(profile);
      if (user) via = 'email';
    }
    let created = false;
    if (!user) {
      user = await this.create(profile);
      via = 'created';
      created = true;
    }

    let groupsChanged = false;
    if (!created) ({ user, groupsChanged } = await this.follow(LOGIN_MAPPING_ACTOR, user, profile));

    this.deps.log.info({ provider: profile.provider, user_id: user.id, username: user.username, via }, 'login linked');
    return { user, via, groupsChanged };
  }

  /**
   * Keeps a linked user in step with what its provider says of them now, as `actor` (the login
   * mapping at a sign-in, the directory recheck's rounds between): a directory account's return, the mapped
   * groups, and the profile (a directory's name, e-mail and display name; another provider's
   * only where empty). The user as it is afterwards.
   */
  async follow(actor: Actor, user: User, profile: ExternalProfile): Promise<{ user: User; groupsChanged: boolean }> {
    const directory = DIRECTORY_PROVIDERS.has(profile.provider);
    const logins = this.deps.users.logins;
    // the directory let the account in (or found it active): an end it had is over
    let changed = false;
    if (directory && user.disabled && user.directoryState === 'ended') changed = await logins.restoreByDirectory(actor, user, profile.provider);
    else if (directory && user.directoryState === 'kept') changed = await logins.clearKept(actor, user, profile.provider);
    if (changed) user = (await this.deps.store.userById(user.id)) ?? user;
    const groupsChanged = await this.syncGroups(user, profile, actor);
    if (groupsChanged) user = (await this.deps.store.userById(user.id)) ?? user;
    const change = await this.profileChange(user, profile, directory);
    if (Object.keys(change).length) {
      const { renamed } = await logins.follow(actor, user, change, profile.provider);
      if (change.username && !renamed)
        this.deps.log.warn({ user_id: user.id, username: user.username, wanted: change.username }, 'the name was taken meanwhile: it stays');
      if (change.username && renamed)
        this.deps.log.info({ provider: profile.provider, user_id: user.id, from: user.username, to: change.username }, 'username follows the directory');
      user = (await this.deps.store.userById(user.id)) ?? user;
    }
    return { user, groupsChanged };
  }

  /**
   * What of the profile to copy: a directory's name (free of other users, never onto a superadmin
   * or bot), e-mail (held by no other user) and display name when they differ; another provider's
   * e-mail and display name only where empty. A name or address another user holds stays
   * behind, logged (once per change).
   */
  private async profileChange(user: User, profile: ExternalProfile, directory: boolean): Promise<ProfileChange> {
    const change: ProfileChange = {};
    const email = profile.email_verified && profile.email ? profile.email : null;
    const displayName = profile.display_name?.slice(0, 256) || null;
    if (directory ? email !== null && email !== user.email : !user.email && email) {
      if (await this.emailFree(user, email!, profile.provider)) change.email = email!;
    }
    if (displayName && (directory ? displayName !== user.displayName : !user.displayName)) change.displayName = displayName;
    const wanted = directory && profile.username ? usernameBase(profile.username) : null;
    if (wanted && wanted !== user.username) {
      const holder = await this.deps.store.userByUsername(wanted);
      if (holder) this.report(user, 'username', wanted, { held_by: holder.id }, 'the directory name is held by another local user: the username stays');
      else if (hasProtectedRole(user))
        this.report(user, 'username', wanted, { roles: user.roles }, 'a superadmin or bot account is not renamed by its directory');
      else change.username = wanted;
    }
    return change;
  }

  /** No other user has this address (two users never share one through a login). */
  private async emailFree(user: Pick<User, 'id' | 'username'> | null, email: string, provider: string): Promise<boolean> {
    const holders = (await this.deps.store.usersByEmail(email)).filter((u) => u.id !== user?.id);
    if (holders.length && user)
      this.report(user, 'email', email.toLowerCase(), { held_by: holders[0]!.id, provider }, 'the e-mail address is held by another local user: not copied');
    if (holders.length && !user) this.deps.log.warn({ provider, held_by: holders[0]!.id }, 'the e-mail address is held by another local user: not copied');
    return holders.length === 0;
  }

  private report(user: Pick<User, 'id' | 'username'>, field: string, wanted: string, details: object, message: string): void {
    const key = `${user.id}:${field}`;
    if (this.reported.get(key) === wanted) return;
    if (this.reported.size >= REPORTED_MAX) this.reported.clear();
    this.reported.set(key, wanted);
    this.deps.log.warn({ event: 'profile_not_followed', user_id: user.id, username: user.username, field, wanted, ...details }, message);
  }

  /**
   * Why a first sign-on at one of `providers` (those the chain would build) could not reach
   * `user`, an account made in advance, or null when one could: byVerifiedEmail's rules, asked
   * before any login (the address's verification is the provider's to say, at the sign-on).
   */
  async whyUnreachable(user: User, providers: readonly string[]): Promise<string | null> {
    const linking = providers.filter((p) => EMAIL_LINKING_PROVIDERS.has(p) && this.deps.linkByEmail(p));
    if (!linking.length) return `${providers.join(' and ')} ${providers.length === 1 ? 'links' : 'link'} an existing account only by e-mail, and that is off`;
    if (!user.email) return 'it links an existing account only by e-mail, and this one has none';
    if (await this.deps.users.isPrivileged(user)) return 'a privileged account is never linked by e-mail';
    return null;
  }

  private async byVerifiedEmail(profile: ExternalProfile): Promise<User | null> {
    if (profile.email_verified !== true || !profile.email) return null;
    const candidates = await this.deps.store.usersByEmail(profile.email);
    if (candidates.length !== 1) {
      if (candidates.length > 1)
        this.deps.log.warn({ provider: profile.provider, matches: candidates.length }, 'email held by several users: not linking by email');
      return null;
    }
    const candidate = candidates[0]!;
    // an address in a directory or at an IdP is only as trustworthy as whoever can edit it there:
    // never hand an administrator, an account that reaches the host, a superadmin or a bot to
    // an external login by email alone
    // judged with the groups this login maps onto it too: an account made ready in advance must
    // not catch an administrator's or an operator's first sign-on
    if (await this.deps.users.isPrivileged(candidate, profile.groups ?? [])) {
      this.deps.log.warn({ provider: profile.provider, user_id: candidate.id }, 'email matches a privileged account: not linking by email');
      return null;
    }
    // someone already linked at this provider is a different account there: do not merge a second one
    const identities = (await this.deps.store.identitiesOf([candidate.id])).get(candidate.id) ?? [];
    if (identities.some((i) => i.provider === profile.provider)) return null;
    await this.deps.users.logins.linkIdentity(candidate, profile.provider, profile.provider_user_id, 'email');
    // a concurrent login may have linked this identity elsewhere first: theirs wins
    return this.deps.store.userByIdentity(profile.provider, profile.provider_user_id);
  }

  private async existingGroups(names: Iterable<string>): Promise<string[]> {
    const wanted = [...new Set(names)];
    if (wanted.length === 0) return [];
    const found = new Set((await this.deps.store.groupsNamed(wanted)).map((g) => g.name));
    const missing = wanted.filter((g) => !found.has(g));
    if (missing.length) this.deps.log.warn({ groups: missing }, 'mapped or default groups do not exist and are skipped');
    return wanted.filter((g) => found.has(g));
  }

  /**
   * The existing groups a login's profile names, as the provider may hand them out: a plugin's
   * provider passes the host boundary as a mapping set by an administrator would (a group that
   * reaches the host is left out: only a trusted actor hands out the host). `refused`: those
   * left out, for the event.
   */
  private async mappedGroups(profile: ExternalProfile): Promise<{ groups: string[]; refused: string[] }> {
    const groups = await this.existingGroups(profile.groups ?? []);
    if (this.deps.mappingConfigured(profile.provider) || groups.length === 0) return { groups, refused: [] };
    const rows = await this.deps.store.groupsNamed(groups);
    const refused = rows.filter((g) => g.permissions.some(reachesHost)).map((g) => g.name);
    if (refused.length)
      this.deps.log.warn({ provider: profile.provider, groups: refused }, "a plugin's login provider named groups that reach the host: left out");
    return { groups: groups.filter((g) => !refused.includes(g)), refused };
  }

  private async create(profile: ExternalProfile): Promise<User> {
    const { store } = this.deps;
    const mapped = await this.mappedGroups(profile);
    const groups = [...new Set([...(await this.existingGroups(this.deps.defaultGroups())), ...mapped.groups])];
    const base = usernameBase(profile.username);
    const email = profile.email_verified && profile.email && (await this.emailFree(null, profile.email, profile.provider)) ? profile.email : null;
    let created: User | null = null;
    for (let n = 1; !created && n <= 60; n++) {
      const username = n === 1 ? base : n <= 50 ? `${base}-${n}` : `${base}-${crypto.randomBytes(3).toString('hex')}`;
      if (n <= 50 && (await store.userByUsername(username))) continue;
      try {
        created = await this.deps.users.create(LOGIN_MAPPING_ACTOR, {
          username,
          email,
          displayName: profile.display_name?.slice(0, 256) ?? null,
          groups,
        });
      } catch (err) {
        if (!(err instanceof DomainError && err.code === 'conflict')) throw err; // taken in between: try the next name
      }
    }
    if (!created) throw new Error(`no free username for ${base}`);
    await this.deps.users.logins.linkIdentity(created, profile.provider, profile.provider_user_id, 'created');
    const owner = await store.userByIdentity(profile.provider, profile.provider_user_id);
    if (owner && owner.id !== created.id) {
      // a concurrent first login of the same person won: drop our duplicate (nobody has seen it)
      await this.deps.users.logins.dropDuplicate(created, profile.provider);
      return owner;
    }
    this.deps.log.info({ provider: profile.provider, user_id: created.id, username: created.username, groups }, 'user created from single sign-on');
    if (mapped.refused.length) this.deps.users.logins.groupsRefused(created, profile.provider, mapped.refused);
    return created;
  }

  /** Mapped groups replace the provider-managed ones; anything else the user has stays. */
  private async syncGroups(user: User, profile: ExternalProfile, actor: Actor): Promise<boolean> {
    if (profile.groups === undefined) return false;
    const managed = this.deps.managedGroups(profile.provider);
    const { groups: mapped, refused } = await this.mappedGroups(profile);
    if (refused.length) this.deps.users.logins.groupsRefused(user, profile.provider, refused);
    const unique = [...new Set([...user.groups.filter((g) => !managed.has(g)), ...mapped])];
    const same = unique.length === user.groups.length && unique.every((g) => user.groups.includes(g));
    if (same) return false;
    const { groups, kept } = await this.deps.users.logins.setGroups(actor, user, unique, profile.provider);
    if (kept.length)
      this.deps.log.warn({ provider: profile.provider, user_id: user.id, kept }, 'the mapping would leave no enabled administrator: the group stays');
    const changed = groups.length !== user.groups.length || groups.some((g) => !user.groups.includes(g));
    if (changed)
      this.deps.log.info(
        { provider: profile.provider, user_id: user.id, from: user.groups, to: groups, by: actor.username },
        'groups follow the provider mapping',
      );
    return changed;
  }
}
