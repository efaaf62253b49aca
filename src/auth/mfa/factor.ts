import type { Knex } from 'knex';
import type { User } from '../../iam/store.js';
import type { Actor } from '../../iam/policy.js';
import type { MfaStatus } from '../../client/api-types.js';

/** The kinds of second factor, in the order a second step offers them. */
export type FactorKind = 'totp' | 'webauthn' | 'recovery_code';

/** The proof a second step brings: a code (an app's or a recovery code) or a WebAuthn assertion. */
export interface SecondFactorProof {
  code?: string;
  webauthn?: unknown;
}

/** What a factor shows of itself to its owner (a part of GET /api/me/mfa), and whether it can pass a second step now. */
export interface FactorDescription {
  usable: boolean;
  view: Partial<Omit<MfaStatus, 'required'>>;
}

/**
 * One kind of second factor. The registry (MfaService, src/auth/mfa/service.ts) asks every kind
 * for the owner's view and the ways a second step can be passed, hands a proof to the kinds that
 * check its field, and clears them all on an administrator's reset. Only SecondStep.prove
 * (behind the attempt gate) reaches verify().
 */
export interface SecondFactor {
  readonly kind: FactorKind;
  /** the field of a proof this kind checks */
  readonly proof: keyof SecondFactorProof;
  describe(userId: string): Promise<FactorDescription>;
  /** Checks `answer` (and spends it: a code is taken once) for `user`, signed in or in the second step as `actor`. */
  verify(actor: Actor, user: User, answer: unknown): Promise<boolean>;
  /** Removes every factor of this kind of `userId` inside `trx` (a reset). */
  clear(trx: Knex, userId: string): Promise<void>;
}

/**
 * A factor the owner enrols (an app, a passkey): started, confirmed with the owner's answer
 * (it is active from then on), removed. `session` is the web session that enrols: a first factor
 * ends the owner's other sessions (they did not pass it).
 */
export interface EnrolledFactor<Start, Answer, Done> extends SecondFactor {
  enrol(actor: Actor, user: User, session: string | null): Promise<Start>;
  confirm(actor: Actor, user: User, session: string | null, answer: Answer): Promise<Done>;
  /** Removes `id` (or the one of a kind a user has one of): false when there was none. */
  remove(actor: Actor, user: User, id?: string): Promise<boolean>;
}

/** A row of `mfa_factors`, where the enrolled kinds keep their factors. */
export interface FactorRow {
  id: string;
  user_id: string;
  kind: Exclude<FactorKind, 'recovery_code'>;
  label: string;
  secret: string | null;
  last_step: number | string | null;
  credential_id: string | null;
  public_key: string | null;
  counter: number | string;
  transports: string | null;
  confirmed: boolean | number;
  created_at: number | string;
  last_used_at: number | string | null;
}

export const isoOrNull = (ms: number | string | null) => (ms === null ? null : new Date(Number(ms)).toISOString());
