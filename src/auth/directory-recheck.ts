import crypto from 'node:crypto';
import type { Knex } from 'knex';
import type { Logger } from '../log.js';
import { errorText } from '../errors.js';
import type { IamStore, User } from '../iam/store.js';
import { DIRECTORY_RECHECK_ACTOR, type UserAdmin } from '../iam/users.js';
import type { ApiKeyStore } from './api-keys.js';
import type { IdentityLinker } from './linking.js';
import type { AccountState, DirectoryAccount, LdapProvider } from './providers/ldap.js';

/**
 * The directory recheck (docs/auth.md, "Active Directory"): a login proves who someone is once,
 * but a session lives for hours and a key for months. Every SERVICE_LDAP_RECHECK_INTERVAL the
 * directory accounts behind the users linked to LDAP are looked up again: those who hold a live
 * web session or API key, or have another way in (a local password, another provider's
 * identity, a passkey), and those an earlier end disabled.
 *
 * An account the directory has disabled or expired, or no longer finds (deleted, moved out of
 * the base DN, no longer matching the user filter), is ended: the local user is disabled (which
 * every way in honours: a local password, Basic, another provider, a passkey) and every session
 * and key is revoked, which ends the user's ws connections at once (`auth:credentials_revoked`,
 * on every instance). Its return (found active again, or a sign-in through the directory)
 * enables it again; an administrator may enable it meanwhile, and then keeps it
 * (src/iam/login-writes.ts). Each is an event by `directory-recheck`.
 *
 * An account found active is followed as a sign-in would follow it (IdentityLinker.follow): the
 * mapped groups (a group the directory no longer grants is taken away, the last administrator
 * keeps INT_ADMIN), the name, e-mail and display name. A change reaches live connections at
 * once (`iam:permissions_changed`).
 *
 * What ends nothing: a locked account and an expired password (anyone can lock an account by
 * guessing; a password is changed, not revoked), and a directory that cannot be asked (down,
 * slow, refusing the service account): that round is reported (log line, `ldap_directory_up` 0,
 * `ldap_recheck_rounds_total{outcome="unavailable"}`) and the next round tries again. A round in
 * which the directory finds none of many accounts (SUSPECT_AT or more, all gone) ends nothing
 * either and is reported: that is a wrong base DN or filter, not an exodus.
 *
 * Several instances: each round (the interval's time slot) is claimed once, with a row in the
 * one-time values table that only one instance can insert; the others skip it. Rounds of two
 * slots can still overlap (one running late): ending is a compare-and-set and revoking is
 * idempotent, and a user is reported ended by the round that disabled them, once.
 */

/** one round's row in one_time_values (swept by housekeeping once expired) */
const CLAIM_PURPOSE = 'ldap_recheck';
/** a round that finds this many accounts, all gone, is a misconfiguration: nothing ends */
const SUSPECT_AT = 10;

export type RoundOutcome = 'checked' | 'unavailable' | 'skipped' | 'suspect' | 'idle';

export interface DirectoryRecheckDeps {
  db: Knex;
  store: Pick<IamStore, 'userById'>;
  apiKeys: Pick<ApiKeyStore, 'revokeAllOf'>;
  /** ends and restores accounts (its `logins` writes) */
  users: Pick<UserAdmin, 'logins'>;
  /** follows an active account as a sign-in would */
  linker: Pick<IdentityLinker, 'follow'>;
  log: Logger;
  /** the chain's LDAP provider as built now; null while LDAP is not in the chain */
  provider(): LdapProvider | null;
  /** the interval as set now, in ms; 0: never */
  intervalMs(): number;
}

interface Candidate {
  userId: string;
  username: string;
  providerUserId: string;
  /** disabled by an earlier end: only its return concerns it */
  ended: boolean;
}

export class DirectoryRecheck {
  /** what /metrics reports */
  readonly stats = {
    rounds: { checked: 0, unavailable: 0, skipped: 0, suspect: 0 },
    ended: { disabled: 0, expired: 0, gone: 0 } as Record<Exclude<AccountState, 'active'>, number>,
    /** accounts enabled again by their return to the directory */
    restored: 0,
    /** active accounts whose groups or profile changed to follow the directory */
    followed: 0,
    /** false after a round the directory did not answer, until one it answers */
    directoryUp: true,
    lastError: null as string | null,
  };
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<RoundOutcome> | null = null;
  private stopped = true;

  constructor(private readonly deps: DirectoryRecheckDeps) {}

  start(): void {
    this.stopped = false;
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** The settings changed (the chain was rebuilt): the next round follows the interval as set now. */
  reschedule(): void {
    if (!this.stopped) this.schedule();
  }

  private schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const ms = this.deps.intervalMs();
    if (!ms) return;
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    try {
      await this.runOnce();
    } catch (err) {
      this.deps.log.warn({ reason: errorText(err) }, 'ldap recheck: the round failed');
    } finally {
      if (!this.stopped) this.schedule();
    }
  }

  /** One round now (one at a time on an instance); what came of it. */
  runOnce(now = Date.now()): Promise<RoundOutcome> {
    this.running ??= this.round(now).finally(() => (this.running = null));
    return this.running;
  }

  private async round(now: number): Promise<RoundOutcome> {
    const provider = this.deps.provider();
    const interval = this.deps.intervalMs();
    if (!provider || !interval) return 'idle';
    const candidates = await this.candidates(now);
    if (candidates.length === 0) return 'idle';
    if (!(await this.claim(now, interval))) {
      this.stats.rounds.skipped++;
      return 'skipped';
    }
    const log = this.deps.log;
    let accounts: Map<string, DirectoryAccount>;
    try {
      accounts = await provider.readAccounts([...new Set(candidates.map((c) => c.providerUserId))], now);
    } catch (err) {
      this.stats.rounds.unavailable++;
      this.stats.directoryUp = false;
      this.stats.lastError = errorText(err);
      log.warn({ reason: this.stats.lastError, accounts: candidates.length }, 'ldap recheck: the directory could not be asked; no session ended');
      return 'unavailable';
    }
    this.stats.directoryUp = true;
    this.stats.lastError = null;

    // a user ends when none of their LDAP identities is active any more
    const byUser = new Map<string, { username: string; ended: boolean; states: AccountState[]; active: DirectoryAccount | null }>();
    for (const c of candidates) {
      const u = byUser.get(c.userId) ?? { username: c.username, ended: c.ended, states: [], active: null };
      const account = accounts.get(c.providerUserId) ?? { state: 'active', profile: null };
      u.states.push(account.state);
      if (account.state === 'active') u.active ??= account;
      byUser.set(c.userId, u);
    }
    const live = [...byUser].filter(([, u]) => !u.ended);
    const ending = live.filter(([, u]) => !u.states.includes('active'));
    if (ending.length >= SUSPECT_AT && ending.length === live.length && ending.every(([, u]) => u.states.every((s) => s === 'gone'))) {
      this.stats.rounds.suspect++;
      log.error({ accounts: ending.length }, 'ldap recheck: the directory found none of the accounts; nothing ended (check ldap_base_dn and ldap_user_filter)');
      return 'suspect';
    }
    let ended = 0;
    for (const [userId, u] of ending) {
      // disabled or expired says more than gone, when a user has several identities
      const state = (['disabled', 'expired', 'gone'] as const).find((s) => u.states.includes(s))!;
      if (await this.end(userId, u.username, state)) ended++;
    }
    for (const [userId, u] of byUser) {
      if (u.active?.profile) await this.follow(userId, u.active.profile);
    }
    this.stats.rounds.checked++;
    log.debug({ accounts: byUser.size, ended }, 'ldap recheck: round done');
    return 'checked';
  }

  /**
   * Ends a user whose directory account ended: disabled and every session and key revoked
   * (unless an administrator keeps the account: then its sessions and keys too). Whether this
   * round ended them: rounds running late beside each other (another instance's) find the user
   * disabled already, and the one that disabled them reports them (a user ended is one log line
   * and one count).
   */
  private async end(userId: string, username: string, state: Exclude<AccountState, 'active'>): Promise<boolean> {
    const user = await this.deps.store.userById(userId);
    if (!user || user.directoryState === 'kept') return false;
    const { ended, lastAdmin } = await this.deps.users.logins.endByDirectory(DIRECTORY_RECHECK_ACTOR, user, state, 'ldap');
    const revoked = await this.deps.apiKeys.revokeAllOf(userId);
    if (!ended) return false;
    this.stats.ended[state]++;
    this.deps.log.warn(
      { event: 'ldap_account_ended', user_id: userId, username, state, revoked, disabled: ended },
      `ldap recheck: the directory account is ${state}; the user is disabled and its sessions and keys are revoked`,
    );
    if (lastAdmin)
      this.deps.log.error(
        { user_id: userId, username },
        'ldap recheck: the directory ended the last enabled member of INT_ADMIN; enable an administrator with the CLI (service-core user enable) or the system key',
      );
    return true;
  }

  /** An active account: its return if it had ended, its groups and profile as a sign-in would make them. */
  private async follow(userId: string, profile: NonNullable<DirectoryAccount['profile']>): Promise<void> {
    try {
      const user = await this.deps.store.userById(userId);
      if (!user) return;
      const wasEnded = user.disabled && user.directoryState === 'ended';
      const after = await this.deps.linker.follow(DIRECTORY_RECHECK_ACTOR, user, profile);
      if (wasEnded && !after.user.disabled) {
        this.stats.restored++;
        this.deps.log.info({ user_id: userId, username: after.user.username }, 'ldap recheck: the directory account is active again; the user is enabled');
      }
      if (after.groupsChanged || !sameProfile(user, after.user)) this.stats.followed++;
    } catch (err) {
      // one account's trouble (a mapped group deleted meanwhile) leaves the others followed
      this.deps.log.warn({ user_id: userId, reason: errorText(err) }, 'ldap recheck: the account could not follow the directory');
    }
  }

  /**
   * Users linked to LDAP that a directory's end would concern: enabled ones with a way in that
   * does not ask the directory (a live web session or API key, a local password, another
   * provider's identity, a passkey; signing in through LDAP asks it anyway), and those an
   * earlier end disabled (for their return).
   */
  private async candidates(now: number): Promise<Candidate[]> {
    const { db } = this.deps;
    const rows: Array<{ user_id: string; username: string; provider_user_id: string; disabled: unknown }> = await db('user_identities as i')
      .join('users as u', 'u.id', 'i.user_id')
      .where('i.provider', 'ldap')
      .andWhere((who) =>
        who
          .where((ended) => ended.where('u.disabled', true).andWhere('u.directory_state', 'ended'))
          .orWhere((enabled) =>
            enabled.where('u.disabled', false).andWhere((way) =>
              way
                .whereNotNull('u.hashed_password')
                .orWhereExists((q) =>
                  q
                    .select(db.raw('1'))
                    .from('api_keys as k')
                    .whereRaw('k.user_id = i.user_id')
                    .whereNull('k.revoked_at')
                    .andWhere((e) => e.whereNull('k.expires_at').orWhere('k.expires_at', '>', now)),
                )
                .orWhereExists((q) =>
                  q.select(db.raw('1')).from('user_identities as o').whereRaw('o.user_id = i.user_id').whereNotIn('o.provider', ['ldap', 'local']),
                )
                .orWhereExists((q) =>
                  q.select(db.raw('1')).from('mfa_factors as f').whereRaw('f.user_id = i.user_id').andWhere({ 'f.kind': 'webauthn', 'f.confirmed': true }),
                ),
            ),
          ),
      )
      .select('i.user_id', 'u.username', 'i.provider_user_id', 'u.disabled');
    return rows.map((r) => ({ userId: r.user_id, username: r.username, providerUserId: r.provider_user_id, ended: Boolean(r.disabled) }));
  }

  /** Claims this interval's round for this instance: false when another instance has it. */
  private async claim(now: number, interval: number): Promise<boolean> {
    const round = Math.floor(now / interval);
    const hash = crypto.createHash('sha256').update(`ldap-recheck:${interval}:${round}`).digest('hex');
    try {
      await this.deps.db('one_time_values').insert({ hash, purpose: CLAIM_PURPOSE, data: '{}', expires_at: (round + 2) * interval });
      return true;
    } catch (err) {
      const taken = await this.deps.db('one_time_values').where({ hash }).first('hash');
      if (taken) return false;
      throw err;
    }
  }
}

function sameProfile(a: User, b: User): boolean {
  return a.username === b.username && a.email === b.email && a.displayName === b.displayName && a.disabled === b.disabled;
}
