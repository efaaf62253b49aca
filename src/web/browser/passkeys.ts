// Passkeys in the browser, shared by the login page, the step-up dialog and the Security panel:
// the WebAuthn ceremonies of @simplewebauthn/browser, and their failures in words.
import { browserSupportsWebAuthn, startAuthentication, startRegistration } from '@simplewebauthn/browser';
import type {
  AuthenticationResponseJSON,
  PublicKeyCredentialCreationOptionsJSON,
  PublicKeyCredentialRequestOptionsJSON,
  RegistrationResponseJSON,
} from '@simplewebauthn/browser';

export type { AuthenticationResponseJSON, RegistrationResponseJSON };

/** The options the service answers (POST /api/auth/webauthn/options, POST /api/me/mfa/webauthn/options). */
export interface FlowOptions<O> {
  flow: string;
  options: O;
}

/**
 * Can this page use passkeys? WebAuthn, in a secure context (https, or localhost), at a host
 * name: a passkey belongs to a domain, and browsers refuse an IP address as one.
 */
export const passkeysSupported = (): boolean => window.isSecureContext && browserSupportsWebAuthn() && !/^(\d+\.){3}\d+$|^\[/.test(location.hostname);

/** Asks the authenticator to sign the challenge of `options`. */
export const assertPasskey = (options: PublicKeyCredentialRequestOptionsJSON): Promise<AuthenticationResponseJSON> =>
  startAuthentication({ optionsJSON: options });

/** Asks the authenticator for a new credential for `options`. */
export const createPasskey = (options: PublicKeyCredentialCreationOptionsJSON): Promise<RegistrationResponseJSON> =>
  startRegistration({ optionsJSON: options });

export type { PublicKeyCredentialCreationOptionsJSON, PublicKeyCredentialRequestOptionsJSON };

/** What went wrong in a ceremony, in words (the browser's errors say little to a person). */
export function passkeyErrorText(err: unknown): string {
  const e = err as { name?: string; code?: string; message?: string } | null;
  if (e?.code === 'ERROR_AUTHENTICATOR_PREVIOUSLY_REGISTERED' || e?.name === 'InvalidStateError') return 'This passkey or security key is registered already.';
  if (e?.name === 'NotAllowedError' || e?.name === 'AbortError') return 'The passkey prompt was closed or timed out. Try again.';
  if (e?.name === 'SecurityError') return 'Passkeys do not work at this address: open the service at its own address.';
  return e?.message || String(err);
}
