import type * as SimpleWebAuthnServerModule from '@simplewebauthn/server';
import crypto from 'node:crypto';
import type {
  AuthenticationResponseJSON,
  AuthenticatorTransportFuture,
  PublicKeyCredentialCreationOptionsJSON,
  PublicKeyCredentialRequestOptionsJSON,
  RegistrationResponseJSON,
} from '@simplewebauthn/server';
import { fieldError } from '../../errors.js';
import type { Logger } from '../../log.js';
import type { User } from '../../iam/store.js';
import type { OneTimeStore } from '../one-time.js';
import { safeEqual } from '../../digest.js';

/**
 * The WebAuthn library, loaded at the first ceremony: it is a third of a second of CPU to
 * import, which every start (and every CLI command) would otherwise pay for passkeys it may
 * never see.
 */
type SimpleWebAuthnServer = typeof SimpleWebAuthnServerModule;
let library: Promise<SimpleWebAuthnServer> | undefined;
const simpleWebAuthn = () => (library ??= import('@simplewebauthn/server'));

/** How long a challenge may be answered: single use, and gone after this. */
export const CHALLENGE_TTL_MS = 2 * 60_000;

/**
 * What a challenge was issued for. A response answers only a challenge of its own kind: a
 * registration's cannot sign anyone in, a second step's cannot be a passwordless sign-in.
 */
export type WebAuthnFlow = 'registration' | 'passwordless' | 'second_step' | 'step_up';

/** What the one-time store keeps under a challenge (the challenge itself is the one-time value). */
interface ChallengeRecord {
  flow: WebAuthnFlow;
  /** the user the ceremony is for (null: passwordless, the credential names the user) */
  user_id: string | null;
  /** a registration: the web session that asked (and passed step-up) */
  session_id?: string | null;
}

/** An assertion ready to be checked: its challenge taken, its passkey found. */
export interface PendingAssertion {
  passkey: StoredPasskey;
  challenge: string;
  response: AuthenticationResponseJSON;
}

export type AssertionRefusal = 'malformed' | 'expired' | 'unknown_credential' | 'wrong_user';

const MAX_FIELD = 16_384;
const b64url = /^[A-Za-z0-9_-]*={0,2}$/;
const isB64 = (v: unknown, max = MAX_FIELD): v is string => typeof v === 'string' && v.length > 0 && v.length <= max && b64url.test(v);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The assertion of @simplewebauthn/browser's startAuthentication(), checked for shape (never trusted beyond it). */
function assertionOf(v: unknown): AuthenticationResponseJSON | null {
  if (!isObject(v) || !isObject(v.response) || v.type !== 'public-key' || !isB64(v.id, 1024) || !isB64(v.rawId, 1024)) return null;
  const r = v.response;
  if (!isB64(r.clientDataJSON) || !isB64(r.authenticatorData) || !isB64(r.signature, 2048)) return null;
  if (r.userHandle !== undefined && r.userHandle !== null && !isB64(r.userHandle, 512)) return null;
  return v as unknown as AuthenticationResponseJSON;
}

/** The attestation of startRegistration(), checked for shape. */
function attestationOf(v: unknown): RegistrationResponseJSON | null {
  if (!isObject(v) || !isObject(v.response) || v.type !== 'public-key' || !isB64(v.id, 1024) || !isB64(v.rawId, 1024)) return null;
  const r = v.response;
  if (!isB64(r.clientDataJSON) || !isB64(r.attestationObject, 65_536)) return null;
  if (
    r.transports !== undefined &&
    !(Array.isArray(r.transports) && r.transports.length <= 10 && r.transports.every((t) => typeof t === 'string' && t.length <= 32))
  )
    return null;
  return v as unknown as RegistrationResponseJSON;
}

/** The challenge a response answers, as the browser signed it (clientDataJSON), or null. */
function challengeOf(clientDataJSON: string): string | null {
  try {
    const data: unknown = JSON.parse(Buffer.from(clientDataJSON, 'base64url').toString('utf8'));
    return isObject(data) && typeof data.challenge === 'string' && data.challenge.length >= 16 && data.challenge.length <= 512 ? data.challenge : null;
  } catch {
    return null;
  }
}

/** The WebAuthn user handle of an account: its id (never the name, which can change). */
const userHandleOf = (userId: string): Uint8Array<ArrayBuffer> => new Uint8Array(Buffer.from(userId, 'utf8'));

/** A stored passkey, for the ceremonies. */
export interface StoredPasskey {
  id: string;
  userId: string;
  credentialId: string;
  publicKey: string;
  counter: number;
  transports: string[];
}

/** A registration the ceremony verified, to be stored. */
export interface VerifiedPasskey {
  credentialId: string;
  publicKey: string;
  counter: number;
  transports: string[];
}

/** Where the ceremonies find passkeys (the passkey factor, src/auth/mfa/passkeys.ts). */
export interface PasskeyStore {
  passkeysOf(userId: string): Promise<StoredPasskey[]>;
  passkeyByCredential(credentialId: string): Promise<StoredPasskey | null>;
  /** records a use with the counter the authenticator reported: false refuses it (a clone) */
  usePasskey(passkey: StoredPasskey, newCounter: number): Promise<boolean>;
}

export interface WebAuthnDeps {
  /** SERVICE_PUBLIC_URL: its host name is the relying party id, its origin the one origin accepted */
  publicUrl: string;
  passkeys: PasskeyStore;
  oneTime: OneTimeStore;
  log: Logger;
}

/**
 * The WebAuthn ceremonies of passkeys and security keys (their storage is the passkey factor's):
 * registration, and assertions for a passwordless sign-in, a second step or step-up.
 *
 * - The relying party is the public URL: its host name is the RP id, its origin the only origin
 *   a response may come from (not SERVICE_ALLOWED_ORIGINS: a passkey belongs to this service's
 *   address, and a page on another origin must not collect assertions for it).
 * - Each challenge is a one-time value (32 random bytes) kept two minutes with what it is for.
 *   The browser signs it into clientDataJSON, so the server takes it back from there, once.
 * - Attestation `none`: the service does not judge makers of authenticators.
 * - A passwordless sign-in needs user verification (PIN, biometrics) and a discoverable
 *   credential; a second step or step-up after a password needs presence only.
 * - The sign counter is checked by PasskeyStore.usePasskey (a counter that does not grow is a clone).
 */
export class WebAuthn {
  readonly rpID: string;
  readonly origin: string;
  readonly rpName = 'service-core';

  constructor(private readonly deps: WebAuthnDeps) {
    const url = new URL(deps.publicUrl);
    this.rpID = url.hostname;
    this.origin = url.origin;
  }

  /** A new challenge for `record`: the bytes for the options (their base64url is the one-time value). */
  private async challenge(record: ChallengeRecord): Promise<Uint8Array<ArrayBuffer>> {
    const bytes = crypto.randomBytes(32);
    await this.deps.oneTime.put('webauthn_challenge', record, CHALLENGE_TTL_MS, bytes.toString('base64url'));
    return new Uint8Array(bytes);
  }

  /** Takes (once) the challenge a response's clientDataJSON names. */
  private async takeChallenge(clientDataJSON: string): Promise<{ challenge: string; record: ChallengeRecord } | null> {
    const challenge = challengeOf(clientDataJSON);
    if (!challenge) return null;
    const record = await this.deps.oneTime.take<ChallengeRecord>('webauthn_challenge', challenge);
    return record ? { challenge, record } : null;
  }

  // ---- registration ----------------------------------------------------------------------

  /** Options for navigator.credentials.create(): a passkey for `user`, asked by web session `sessionId`. */
  async registrationOptions(user: User, sessionId: string | null): Promise<PublicKeyCredentialCreationOptionsJSON> {
    const existing = await this.deps.passkeys.passkeysOf(user.id);
    const { generateRegistrationOptions } = await simpleWebAuthn();
    return generateRegistrationOptions({
      rpName: this.rpName,
      rpID: this.rpID,
      userName: user.username,
      userDisplayName: user.displayName ?? user.username,
      userID: userHandleOf(user.id),
      challenge: await this.challenge({ flow: 'registration', user_id: user.id, session_id: sessionId }),
      timeout: CHALLENGE_TTL_MS,
      attestationType: 'none',
      // the same authenticator twice is refused by the browser already
      excludeCredentials: existing.map((k) => ({ id: k.credentialId, transports: k.transports as AuthenticatorTransportFuture[] })),
      // discoverable where the authenticator can (passwordless sign-in); a security key without
      // room for one still registers, as a second factor
      authenticatorSelection: { residentKey: 'preferred', userVerification: 'preferred' },
    });
  }

  /**
   * Verifies a registration response of `user` from web session `sessionId`: the passkey to
   * store. Throws validation_failed (field `response`) when it cannot be verified.
   */
  async verifyRegistration(user: User, sessionId: string | null, raw: unknown): Promise<VerifiedPasskey> {
    const response = attestationOf(raw);
    if (!response) throw fieldError('response', 'is not a WebAuthn registration response');
    const taken = await this.takeChallenge(response.response.clientDataJSON);
    if (!taken || taken.record.flow !== 'registration' || taken.record.user_id !== user.id || taken.record.session_id !== sessionId) {
      throw fieldError('response', 'answers no pending registration of this session (it expired after two minutes, or was used): start again');
    }
    const { verifyRegistrationResponse } = await simpleWebAuthn();
    let verified;
    try {
      verified = await verifyRegistrationResponse({
        response,
        expectedChallenge: taken.challenge,
        expectedOrigin: this.origin,
        expectedRPID: this.rpID,
        requireUserVerification: false,
      });
    } catch (err) {
      this.deps.log.warn({ user_id: user.id, reason: (err as Error).message }, 'passkey registration refused');
      throw fieldError('response', `could not be verified: ${(err as Error).message}`);
    }
    if (!verified.verified) throw fieldError('response', 'could not be verified');
    const { credential } = verified.registrationInfo;
    // the credential id is the authenticator's to choose; WebAuthn bounds it at 1023 bytes
    if (credential.id.length > 1364) throw fieldError('response', 'has a credential id longer than WebAuthn allows');
    return {
      credentialId: credential.id,
      publicKey: Buffer.from(credential.publicKey).toString('base64url'),
      counter: credential.counter,
      transports: credential.transports ?? [],
    };
  }

  // ---- assertions ------------------------------------------------------------------------

  /**
   * Options for navigator.credentials.get(). Passwordless: any discoverable credential, user
   * verification required. Second step and step-up: the passkeys of `user`.
   */
  async authenticationOptions(flow: Exclude<WebAuthnFlow, 'registration'>, user: User | null): Promise<PublicKeyCredentialRequestOptionsJSON> {
    const keys = flow === 'passwordless' || !user ? [] : await this.deps.passkeys.passkeysOf(user.id);
    const { generateAuthenticationOptions } = await simpleWebAuthn();
    return generateAuthenticationOptions({
      rpID: this.rpID,
      challenge: await this.challenge({ flow, user_id: flow === 'passwordless' ? null : (user?.id ?? null) }),
      timeout: CHALLENGE_TTL_MS,
      allowCredentials: keys.map((k) => ({ id: k.credentialId, transports: k.transports as AuthenticatorTransportFuture[] })),
      userVerification: flow === 'passwordless' ? 'required' : 'preferred',
    });
  }

  /**
   * The first half of checking an assertion: its challenge taken (once; it must be of one of
   * `flows`, and for `userId` when given) and the passkey it names. Nothing is verified yet.
   */
  async begin(
    raw: unknown,
    flows: readonly WebAuthnFlow[],
    userId: string | null,
  ): Promise<{ ok: true; pending: PendingAssertion } | { ok: false; reason: AssertionRefusal }> {
    const response = assertionOf(raw);
    if (!response) return { ok: false, reason: 'malformed' };
    const taken = await this.takeChallenge(response.response.clientDataJSON);
    if (!taken || !flows.includes(taken.record.flow)) return { ok: false, reason: 'expired' };
    const passkey = await this.deps.passkeys.passkeyByCredential(response.id);
    if (!passkey) return { ok: false, reason: 'unknown_credential' };
    if ((userId !== null && passkey.userId !== userId) || (taken.record.user_id !== null && taken.record.user_id !== passkey.userId))
      return { ok: false, reason: 'wrong_user' };
    // a discoverable credential says whose it is: that must be the passkey's owner
    const handle = response.response.userHandle;
    if (handle && !safeEqual(Buffer.from(handle, 'base64url'), Buffer.from(userHandleOf(passkey.userId)))) return { ok: false, reason: 'wrong_user' };
    return { ok: true, pending: { passkey, challenge: taken.challenge, response } };
  }

  /**
   * The second half: the signature over the challenge, the origin, the RP id, user
   * verification when asked, and the sign counter (recorded; a clone's is refused).
   */
  async finish(pending: PendingAssertion, opts: { requireUserVerification: boolean }): Promise<boolean> {
    const { passkey, response } = pending;
    const { verifyAuthenticationResponse } = await simpleWebAuthn();
    let newCounter: number;
    try {
      const verified = await verifyAuthenticationResponse({
        response,
        expectedChallenge: pending.challenge,
        expectedOrigin: this.origin,
        expectedRPID: this.rpID,
        // the counter rule is PasskeyStore.usePasskey's (logged as a clone, recorded with a
        // conditional update); the library is given 0 so it never refuses on the counter itself
        credential: {
          id: passkey.credentialId,
          publicKey: new Uint8Array(Buffer.from(passkey.publicKey, 'base64url')),
          counter: 0,
          transports: passkey.transports as AuthenticatorTransportFuture[],
        },
        requireUserVerification: opts.requireUserVerification,
      });
      if (!verified.verified) return false;
      newCounter = verified.authenticationInfo.newCounter;
    } catch (err) {
      this.deps.log.warn({ user_id: passkey.userId, factor_id: passkey.id, reason: (err as Error).message }, 'passkey assertion refused');
      return false;
    }
    return this.deps.passkeys.usePasskey(passkey, newCounter);
  }

  /**
   * The passkey factor's check: an assertion of one of `user`'s passkeys, answering a second
   * step's or step-up's challenge issued for `user`.
   */
  async checkAssertion(user: User, raw: unknown): Promise<boolean> {
    const begun = await this.begin(raw, ['second_step', 'step_up'], user.id);
    if (!begun.ok) {
      this.deps.log.info({ user_id: user.id, reason: begun.reason }, 'passkey assertion refused');
      return false;
    }
    return this.finish(begun.pending, { requireUserVerification: false });
  }
}
