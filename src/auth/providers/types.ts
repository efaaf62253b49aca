/**
 * Authentication providers form the ordered login chain (docs/auth.md).
 * A provider proves who someone is; linking that to one local profile is the linker's job.
 */

/** What an external (or local) provider knows about the person after a successful login. */
export interface ExternalProfile {
  /** provider id, e.g. "local", "ldap", "oidc" or a plugin's provider id */
  provider: string;
  /** LDAP: objectSid (S-1-5-…) or DN; OIDC: sub; local: username */
  provider_user_id: string;
  /** preferred username (login name, preferred_username claim, uid attribute) */
  username: string;
  email?: string | null;
  /** true only when the provider vouches for the address (OIDC email_verified, LDAP mail attribute) */
  email_verified?: boolean;
  display_name?: string | null;
  /** local group names mapped from the provider's groups; undefined = provider does not manage groups */
  groups?: string[];
}

interface ProviderBase {
  id: string;
  label: string;
}

export interface CredentialsProvider extends ProviderBase {
  kind: 'credentials';
  /**
   * Resolves the profile on success, null when the credentials are wrong or the user is unknown.
   * Throws only when the provider itself failed (server down, misconfiguration): the chain logs it
   * and moves to the next provider.
   */
  authenticate(username: string, password: string): Promise<ExternalProfile | null>;
}

/** What must be kept server-side between the redirect and the callback. */
export interface RedirectStart {
  url: string;
  state: string;
  nonce: string;
  code_verifier: string;
}

export interface RedirectProvider extends ProviderBase {
  kind: 'redirect';
  /** Builds the authorization URL; the caller stores state, nonce and verifier server-side. */
  start(redirectUri: string): Promise<RedirectStart>;
  /**
   * Completes the flow from the full callback URL the browser arrived at, checking state,
   * PKCE and nonce, and validating the ID token. Throws on any failure.
   */
  callback(callbackUrl: URL, expected: { state: string; nonce: string; code_verifier: string; redirect_uri: string }): Promise<ExternalProfile>;
}

export type AuthProvider = CredentialsProvider | RedirectProvider;
