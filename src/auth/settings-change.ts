import type { Logger } from '../log.js';
import { DomainError, fieldError, fieldErrorsText } from '../errors.js';
import { guardHostBoundary, guardOwnGrants, hostAccessOf, hostPermissionsOfGroups, isTrusted, type Actor } from '../iam/policy.js';
import type { IamStore } from '../iam/store.js';
import type { CommandPath } from '../iam/commands.js';
import { buildProviders } from './chain.js';
import { parseDuration } from '../settings-table.js';
import type { LocalProvider } from './providers/local.js';
import type { AuthSettings, AuthSettingsStore } from './settings.js';

/**
 * The local groups the login settings hand to people signing in through `providers` (every
 * provider when null, with the default groups new SSO accounts get): the mapped groups.
 */
export function groupsGrantedByLogin(s: AuthSettings, providers: readonly string[] | null = null): string[] {
  const wanted = (p: string) => providers === null || providers.includes(p);
  const mapped = [wanted('ldap') ? s.ldap.groupMapping : {}, wanted('oidc') ? s.oidc.groupMapping : {}].flatMap((m) => Object.values(m).flat());
  return [...new Set([...(providers === null ? s.ssoDefaultGroups : []), ...mapped])];
}

/**
 * The settings that decide who a provider says someone is (pointing them elsewhere lets another
 * server answer). For LDAP: the URL, bind, base, filter, username attribute and TLS (verify,
 * CA, StartTLS); not the mapping and what only tunes it (nested groups count for the mapping,
 * which the host rule of changeAuthSettings guards; timeouts; the recheck interval).
 */
const LDAP_NOT_IDENTITY = [
  'ldap_group_mapping',
  'ldap_link_by_email',
  'ldap_nested_groups',
  'ldap_connect_timeout_ms',
  'ldap_timeout_ms',
  'ldap_recheck_interval',
];
const IDENTITY_FIELDS: Record<string, (field: string) => boolean> = {
  ldap: (f) => f.startsWith('ldap_') && !LDAP_NOT_IDENTITY.includes(f),
  oidc: (f) => f.startsWith('oidc_') && !['oidc_group_mapping', 'oidc_link_by_email', 'oidc_label'].includes(f),
};

/**
 * A provider's server speaks for every account linked to it: whoever points LDAP at a directory
 * of their own (or OIDC at their own IdP) signs in as any linked account by presenting its DN,
 * SID or subject. So while an account that reaches the host (or a superadmin or bot) is linked
 * to a provider, where that provider points is a trusted actor's to change.
 */
async function guardLinkedAccounts(store: IamStore, actor: Actor, changed: string[]): Promise<void> {
  for (const [provider, decides] of Object.entries(IDENTITY_FIELDS)) {
    if (!changed.some(decides)) continue;
    const linked = await linkedAccounts(store, provider);
    guardHostBoundary(actor, linked.hostLogins, `repoint the ${provider} provider while accounts that reach the host sign in through it`);
    // whoever repoints a provider signs in as its linked accounts: no self-escalation either
    guardOwnGrants(actor, linked.held, `repoint the ${provider} provider while accounts sign in through it whose permissions are not`);
  }
}

/**
 * The groups a change of the login settings newly hands out: default groups added, and for each
 * (provider, directory group) of a mapping the local groups it did not map to before. Compared
 * entry by entry: moving INT_ADMIN from one directory group to another hands it to new people,
 * although the set of names handed out stays the same.
 */
function newlyHanded(before: AuthSettings, after: AuthSettings): string[] {
  const added = (was: readonly string[] | undefined, now: readonly string[]) => now.filter((g) => !(was ?? []).includes(g));
  const mapped = (['ldap', 'oidc'] as const).flatMap((p) =>
    Object.entries(after[p].groupMapping).flatMap(([key, groups]) => added(before[p].groupMapping[key], groups)),
  );
  return [...new Set([...added(before.ssoDefaultGroups, after.ssoDefaultGroups), ...mapped])];
}

/**
 * The accounts linked to `provider`, read once: the logins of those that reach the host (or hold
 * a protected role), as a refusal names them, and every permission they hold between them.
 */
async function linkedAccounts(store: IamStore, provider: string): Promise<{ hostLogins: string[]; held: string[] }> {
  const linked = await store.usersLinkedTo(provider);
  if (linked.length === 0) return { hostLogins: [], held: [] };
  const groups = await store.groupsNamed([...new Set(linked.flatMap((u) => u.groups))]);
  return {
    hostLogins: linked.filter((u) => hostAccessOf(u, groups).length > 0).map((u) => `the ${provider} login of ${u.username}`),
    held: linked.flatMap((u) => [...u.extraPermissions, ...groups.filter((g) => u.groups.includes(g.name)).flatMap((g) => g.permissions)]),
  };
}

/**
 * The settings that protect accounts reaching the host: a second factor required of their
 * groups, and the directory re-check of those that sign in through LDAP (an account that left the
 * directory loses its sessions and keys). Weakening either (a host group no longer required,
 * the re-check off or less frequent while such accounts are linked) is a trusted actor's change;
 * the route asks for step-up as for every settings change.
 */
async function guardHostProtections(store: IamStore, actor: Actor, before: AuthSettings, after: AuthSettings, changed: string[]): Promise<void> {
  if (changed.includes('mfa_required_groups')) {
    const dropped = before.mfaRequiredGroups.filter((g) => !after.mfaRequiredGroups.includes(g));
    const host = dropped.length ? hostPermissionsOfGroups(await store.groupsNamed(dropped), dropped) : [];
    guardHostBoundary(actor, host.length ? dropped : [], 'stop requiring a second factor of a group that reaches the host');
  }
  if (changed.includes('ldap_recheck_interval')) {
    const was = parseDuration(before.ldap.recheckInterval) ?? 0;
    const now = parseDuration(after.ldap.recheckInterval) ?? 0;
    if (was !== 0 && (now === 0 || now > was)) {
      guardHostBoundary(
        actor,
        (await linkedAccounts(store, 'ldap')).hostLogins,
        'turn the directory re-check off or make it less frequent while accounts that reach the host sign in through LDAP',
      );
    }
  }
}

/**
 * Checks and stores a change of the auth settings, for the settings API and the CLI alike: read
 * again first (another instance may have changed them), the default SSO groups must exist, and
 * the login chain the result would build must build. The host boundary (src/iam/policy.ts):
 * while the settings before or after the change hand a group that reaches the host to people
 * signing in, any change is for a trusted actor (whoever points LDAP at a directory of their
 * own, or names such a group, hands out the host); so is repointing a provider that accounts
 * reaching the host sign in through (guardLinkedAccounts). Returns the stored changes; the caller
 * rebuilds its chain and tells the other instances.
 */
export async function changeAuthSettings(
  deps: { settings: AuthSettingsStore; store: IamStore; local: LocalProvider; log: Logger; commands: CommandPath },
  actor: Actor,
  patch: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const command = { action: 'settings.changed' as const, actor, target: { type: 'settings', id: 'auth', name: 'login settings' } };
  return deps.commands.run(command, async () => {
    await deps.settings.load();
    const before = deps.settings.current();
    const { settings, changes } = deps.settings.preview(patch);
    if ('sso_default_groups' in changes && settings.ssoDefaultGroups.length) {
      const found = new Set((await deps.store.groupsNamed(settings.ssoDefaultGroups)).map((g) => g.name));
      const missing = settings.ssoDefaultGroups.filter((g) => !found.has(g));
      if (missing.length) throw fieldError('sso_default_groups', `unknown group ${missing.join(', ')}`);
    }
    const named = [...new Set([...groupsGrantedByLogin(before), ...groupsGrantedByLogin(settings)])];
    const host = named.length ? hostPermissionsOfGroups(await deps.store.groupsNamed(named), named) : [];
    guardHostBoundary(actor, host, 'change the login settings while they hand a group that reaches the host to people signing in');
    // a login hands its groups to whoever signs in (the administrator too, through a directory group of their own)
    const handedNow = newlyHanded(before, settings);
    if (handedNow.length)
      guardOwnGrants(
        actor,
        (await deps.store.groupsNamed(handedNow)).flatMap((g) => g.permissions),
        'have a login hand out groups',
      );
    if (!isTrusted(actor)) {
      await guardLinkedAccounts(deps.store, actor, Object.keys(changes));
      await guardHostProtections(deps.store, actor, before, settings, Object.keys(changes));
    }
    const { errors } = buildProviders(settings, deps.local, deps.log, { check: true });
    if (errors.length) {
      const problems = errors.map((e) => ({ field: e.provider, message: e.message }));
      throw new DomainError('validation_failed', fieldErrorsText(problems), problems);
    }
    await deps.commands.within(
      (trx) => deps.settings.save(changes, trx),
      // the names of what changed, never a value (a bind password, a client secret)
      () => ({ ...command, details: { fields: Object.keys(changes) } }),
    );
    await deps.settings.load();
    return changes;
  });
}
