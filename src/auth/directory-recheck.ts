import crypto from 'node:crypto';
import type { Knex } from 'knex';
import type { Logger } from '../log.js';
import { errorText } from '../errors.js';
import type { ApiKeyStore } from './api-keys.js';
import type { AccountState, LdapProvider } from './providers/ldap.js';

/**
 * The directory recheck (docs/auth.md, "Active Directory"): a login proves who someone is once,
 * but a session lives for hours and a key for months. Every SERVICE_LDAP_RECHECK_INTERVAL the
 * directory accounts behind live credentials are looked up again: the users linked to LDAP
 * who hold a live web session or API key. An account the directory has disabled or expired,
 * or no longer finds (deleted, moved out of the base DN, no longer matching the user filter),
 * loses every session and key: they are revoked, which ends the user's ws connections at once
 * (`auth:credentials_revoked`, on every instance). The local user is not disabled: the
 * directory decides who signs in, and an account it enables again signs in again.
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
 * slots can still overlap (one running late): revoking is idempotent, and a user is reported
 * ended by the round whose revocation took their credentials, once.
 */

/** one round's row in one_time_values (swept by housekeeping once expired) */
const CLAIM_PURPOSE = 'ldap_recheck';
/** a round that finds this many accounts, all gone, is a misconfiguration: nothing ends */
const SUSPECT_AT = 10;

export type RoundOutcome = 'checked' | 'unavailable' | 'skipped' | 'suspect' | 'idle';

export interface DirectoryRecheckDeps {
  db: Knex;
  apiKeys: Pick<ApiKeyStore, 'revokeAllOf'>;
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
}

export class DirectoryRecheck {
  /** what /metrics reports */
  readonly stats = {
    rounds: { checked: 0, unavailable: 0, skipped: 0, suspect: 0 },
    ended: { disabled: 0, expired: 0, gone: 0 } as Record<Exclude<AccountState, 'active'>, number>,
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
    let states: Map<string, AccountState>;
    try {
      states = await provider.checkAccounts([...new Set(candidates.map((c) => c.providerUserId))], now);
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
    const byUser = new Map<string, { username: string; states: AccountState[] }>();
    for (const c of candidates) {
      const u = byUser.get(c.userId) ?? { username: c.username, states: [] };
      u.states.push(states.get(c.providerUserId) ?? 'active');
      byUser.set(c.userId, u);
    }
    const ending = [...byUser].filter(([, u]) => !u.states.includes('active'));
    if (ending.length >= SUSPECT_AT && ending.length === byUser.size && ending.every(([, u]) => u.states.every((s) => s === 'gone'))) {
      this.stats.rounds.suspect++;
      log.error({ accounts: ending.length }, 'ldap recheck: the directory found none of the accounts; nothing ended (check ldap_base_dn and ldap_user_filter)');
      return 'suspect';
    }
    let ended = 0;
    for (const [userId, u] of ending) {
      // disabled or expired says more than gone, when a user has several identities
      const state = (['disabled', 'expired', 'gone'] as const).find((s) => u.states.includes(s))!;
      const revoked = await this.deps.apiKeys.revokeAllOf(userId);
      // nothing left to revoke: they were ended since the candidates were read, most often by
      // another instance's round running late beside this one, which reports them (a user ended
      // is one log line and one count)
      if (revoked === 0) continue;
      ended++;
      this.stats.ended[state]++;
      log.warn(
        { event: 'ldap_account_ended', user_id: userId, username: u.username, state, revoked },
        `ldap recheck: the directory account is ${state}; its sessions and keys are revoked`,
      );
    }
    this.stats.rounds.checked++;
    log.debug({ accounts: byUser.size, ended }, 'ldap recheck: round done');
    return 'checked';
  }

  /** Enabled users linked to LDAP with at least one live web session or API key. */
  private async candidates(now: number): Promise<Candidate[]> {
    const { db } = this.deps;
    const rows: Array<{ user_id: string; username: string; provider_user_id: string }> = await db('user_identities as i')
      .join('users as u', 'u.id', 'i.user_id')
      .where('i.provider', 'ldap')
      .andWhere('u.disabled', false)
      .whereExists((q) =>
        q
          .select(db.raw('1'))
          .from('api_keys as k')
          .whereRaw('k.user_id = i.user_id')
          .whereNull('k.revoked_at')
          .andWhere((e) => e.whereNull('k.expires_at').orWhere('k.expires_at', '>', now)),
      )
      .select('i.user_id', 'u.username', 'i.provider_user_id');
    return rows.map((r) => ({ userId: r.user_id, username: r.username, providerUserId: r.provider_user_id }));
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
