/**
 * OIDC redirect provider (authorization code flow with PKCE S256, state and nonce, ID token
 * validated including its signature) on openid-client 6.
 *
 * The caller keeps state, nonce and verifier server-side between start() and callback(); this
 * class keeps only the discovered IdP metadata. Failures throw OidcLoginError whose `code` is
 * short and safe to put in `/login?error=<code>`.
 */
import Joi from 'joi';
import type * as OpenId from 'openid-client';
import type { Logger } from '../../log.js';
import type { ExternalProfile, RedirectProvider, RedirectStart } from './types.js';
import { safeEqual } from '../../digest.js';

export type OidcErrorCode = 'state_mismatch' | 'idp_error' | 'exchange_failed' | 'nonce_mismatch' | 'id_token_invalid' | 'userinfo_failed' | 'idp_unreachable';

/** A failed OIDC login; `code` goes to the login page, `message` only to logs. */
export class OidcLoginError extends Error {
  readonly code: OidcErrorCode;
  constructor(code: OidcErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OidcLoginError';
    this.code = code;
  }
}

export interface OidcProviderOptions {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** space-separated; must contain openid. Default 'openid profile email' */
  scopes?: string;
  /** claim carrying the IdP's groups. Default 'groups' */
  groupsClaim?: string;
  /** IdP group (claim value) -> local group names. Empty: the provider does not manage groups. */
  groupMapping?: Record<string, string[]>;
  /** login button text. Default 'SSO' */
  label?: string;
  /** allow an http:// issuer (tests, loopback IdPs); never needed for https */
  allowInsecureHttp?: boolean;
  /** timeout for each request to the IdP in milliseconds. Default 10000 */
  timeoutMs?: number;
  /** how the client authenticates at the token endpoint. Default client_secret_basic */
  tokenAuthMethod?: 'client_secret_basic' | 'client_secret_post';
}

const optionsSchema = Joi.object<OidcProviderOptions>({
  issuer: Joi.string()
    .uri({ scheme: ['https', 'http'] })
    .required(),
  clientId: Joi.string().min(1).max(512).required(),
  clientSecret: Joi.string().min(1).max(4096).required(),
  scopes: Joi.string()
    .pattern(/^[\x21\x23-\x5B\x5D-\x7E]+( [\x21\x23-\x5B\x5D-\x7E]+)*$/)
    .custom((value: string, helpers) => (value.split(' ').includes('openid') ? value : helpers.error('any.invalid')))
    .message('"scopes" must be space-separated and contain openid')
    .default('openid profile email'),
  groupsClaim: Joi.string().min(1).max(256).default('groups'),
  groupMapping: Joi.object()
    .pattern(Joi.string().min(1), Joi.array().items(Joi.string().min(1)).required())
    .default({}),
  label: Joi.string().min(1).max(100).default('SSO'),
  allowInsecureHttp: Joi.boolean().default(false),
  timeoutMs: Joi.number().integer().min(100).max(120_000).default(10_000),
  tokenAuthMethod: Joi.string().valid('client_secret_basic', 'client_secret_post').default('client_secret_basic'),
});

type ResolvedOptions = Required<OidcProviderOptions>;

const redirectUriSchema = Joi.string()
  .uri({ scheme: ['https', 'http'] })
  .required();

const expectedSchema = Joi.object({
  state: Joi.string().min(1).max(512).required(),
  nonce: Joi.string().min(1).max(512).required(),
  code_verifier: Joi.string().min(1).max(512).required(),
  redirect_uri: redirectUriSchema,
}).unknown(true); // callers may hand over their whole stored login record

/** openid-client, loaded at the first discovery: a start without an OIDC login never loads it. */
let client: typeof OpenId | undefined;

export class OidcProvider implements RedirectProvider {
  readonly id = 'oidc';
  readonly kind = 'redirect' as const;
  readonly label: string;
  private readonly opts: ResolvedOptions;
  private readonly logger: Logger;
  /** in-flight or finished discovery; cleared on failure so the next login retries */
  private discovering: Promise<OpenId.Configuration> | undefined;

  constructor(options: OidcProviderOptions, logger: Logger) {
    const { value, error } = optionsSchema.validate(options, { abortEarly: false, convert: false });
    // Joi's message names fields and values; clientSecret is never echoed because it is a valid string here
    if (error) throw new Error(`invalid OIDC provider settings: ${error.details.map((d) => d.message).join('; ')}`);
    const resolved = value as ResolvedOptions;
    if (new URL(resolved.issuer).protocol === 'http:' && !resolved.allowInsecureHttp) {
      throw new Error('invalid OIDC provider settings: an http:// issuer needs allowInsecureHttp');
    }
    this.opts = resolved;
    this.label = resolved.label;
    this.logger = logger.child({ provider: 'oidc' });
  }

  async start(redirectUri: string): Promise<RedirectStart> {
    Joi.assert(redirectUri, redirectUriSchema, 'redirect_uri');
    const config = await this.configuration();
    const client = await openIdClient();
    const code_verifier = client.randomPKCECodeVerifier();
    const state = client.randomState();
    const nonce = client.randomNonce();
    const url = client.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: this.opts.scopes,
      response_type: 'code',
      code_challenge: await client.calculatePKCECodeChallenge(code_verifier),
      code_challenge_method: 'S256',
      state,
      nonce,
    });
    return { url: url.href, state, nonce, code_verifier };
  }

  async callback(callbackUrl: URL, expected: { state: string; nonce: string; code_verifier: string; redirect_uri: string }): Promise<ExternalProfile> {
    try {
      return await this.completeLogin(callbackUrl, expected);
    } catch (err) {
      const failure = err instanceof OidcLoginError ? err : this.classify(err, 'exchange_failed');
      // Only code and library message: never the callback URL (code), tokens or the secret.
      this.logger.warn({ code: failure.code, reason: failure.message }, 'oidc login failed');
      throw failure;
    }
  }

  private async completeLogin(
    callbackUrl: URL,
    expected: { state: string; nonce: string; code_verifier: string; redirect_uri: string },
  ): Promise<ExternalProfile> {
    const { error: invalid } = expectedSchema.validate(expected);
    if (invalid) throw new OidcLoginError('state_mismatch', `no usable login state: ${invalid.message}`);
    const params = callbackUrl.searchParams;

    // State first: an answer not bound to this browser's login attempt is not looked at further.
    const state = params.get('state');
    if (state === null || !safeEqual(state, expected.state)) {
      throw new OidcLoginError('state_mismatch', 'state parameter does not match the login attempt');
    }
    const idpError = params.get('error');
    if (idpError !== null) {
      const description = (params.get('error_description') ?? '').slice(0, 200);
      throw new OidcLoginError('idp_error', `identity provider answered ${idpError.slice(0, 64)}${description ? `: ${description}` : ''}`);
    }

    const config = await this.configuration();
    const client = await openIdClient();
    // The token request's redirect_uri must be the one sent in start(), not whatever host the
    // request reached us on (proxies), so rebuild the response URL on it.
    const responseUrl = new URL(expected.redirect_uri);
    responseUrl.search = callbackUrl.search;
    responseUrl.hash = '';

    let tokens: Awaited<ReturnType<typeof OpenId.authorizationCodeGrant>>;
    try {
      tokens = await client.authorizationCodeGrant(config, responseUrl, {
        pkceCodeVerifier: expected.code_verifier,
        expectedState: expected.state,
        expectedNonce: expected.nonce,
        idTokenExpected: true,
      });
    } catch (err) {
      throw this.classify(err, 'exchange_failed');
    }
    const idClaims = tokens.claims();
    if (!idClaims) throw new OidcLoginError('id_token_invalid', 'token response carried no ID token');

    let claims: Record<string, unknown> = { ...idClaims };
    const profileClaims = ['email', 'preferred_username', 'name', this.opts.groupsClaim];
    const lacksProfile = profileClaims.some((name) => !(name in idClaims));
    if (lacksProfile && tokens.access_token && config.serverMetadata().userinfo_endpoint) {
      try {
        // fetchUserInfo checks that userinfo's sub is the ID token's sub.
        const userinfo = await client.fetchUserInfo(config, tokens.access_token, idClaims.sub);
        // The validated ID token wins on any claim both carry.
        claims = { ...userinfo, ...idClaims };
      } catch (err) {
        throw this.classify(err, 'userinfo_failed');
      }
    }
    return profileFromClaims(claims, this.opts.groupsClaim, this.opts.groupMapping);
  }

  /** Lazy, shared discovery; a failure is not cached so the next login tries again. */
  private configuration(): Promise<OpenId.Configuration> {
    if (!this.discovering) {
      const attempt = this.discover();
      this.discovering = attempt;
      attempt.catch(() => {
        if (this.discovering === attempt) this.discovering = undefined;
      });
    }
    return this.discovering;
  }

  private async discover(): Promise<OpenId.Configuration> {
    const client = await openIdClient();
    const auth =
      this.opts.tokenAuthMethod === 'client_secret_post' ? client.ClientSecretPost(this.opts.clientSecret) : client.ClientSecretBasic(this.opts.clientSecret);
    const execute: Array<(config: OpenId.Configuration) => void> = [client.enableNonRepudiationChecks];
    if (this.opts.allowInsecureHttp) execute.push(client.allowInsecureRequests);
    try {
      const config = await client.discovery(new URL(this.opts.issuer), this.opts.clientId, { client_secret: this.opts.clientSecret }, auth, {
        execute,
        timeout: this.opts.timeoutMs / 1000,
      });
      this.logger.info({ issuer: config.serverMetadata().issuer }, 'oidc discovery done');
      return config;
    } catch (err) {
      const failure = new OidcLoginError('idp_unreachable', `discovery at ${this.opts.issuer} failed: ${describe(err)}`, { cause: err });
      this.logger.warn({ code: failure.code, reason: failure.message }, 'oidc discovery failed');
      throw failure;
    }
  }

  /** Maps an openid-client failure to a login error code. */
  private classify(err: unknown, fallback: OidcErrorCode): OidcLoginError {
    if (err instanceof OidcLoginError) return err;
    const message = describe(err);
    if (isNetworkFailure(err)) return new OidcLoginError('idp_unreachable', message, { cause: err });
    if (client && err instanceof client.AuthorizationResponseError) return new OidcLoginError('idp_error', message, { cause: err });
    if (fallback === 'exchange_failed') {
      if (claimInCauseChain(err) === 'nonce') return new OidcLoginError('nonce_mismatch', message, { cause: err });
      if (client && err instanceof client.ResponseBodyError) return new OidcLoginError('exchange_failed', message, { cause: err });
      const code = (err as { code?: unknown }).code;
      if (
        code === 'OAUTH_JWT_CLAIM_COMPARISON_FAILED' ||
        code === 'OAUTH_JWT_TIMESTAMP_CHECK_FAILED' ||
        code === 'OAUTH_KEY_SELECTION_FAILED' ||
        /signature/i.test(message)
      ) {
        return new OidcLoginError('id_token_invalid', message, { cause: err });
      }
    }
    return new OidcLoginError(fallback, message, { cause: err });
  }
}

/** Builds the ExternalProfile from validated claims (ID token, plus userinfo when needed). */
export function profileFromClaims(claims: Record<string, unknown>, groupsClaim: string, groupMapping: Record<string, string[]>): ExternalProfile {
  const sub = claims.sub;
  if (typeof sub !== 'string' || sub === '') throw new OidcLoginError('id_token_invalid', 'ID token has no sub');
  const text = (value: unknown): string | undefined => (typeof value === 'string' && value.trim() !== '' ? value.trim() : undefined);
  const email = text(claims.email);
  const localPart = email && email.includes('@') ? text(email.slice(0, email.lastIndexOf('@'))) : undefined;
  const profile: ExternalProfile = {
    provider: 'oidc',
    provider_user_id: sub,
    username: text(claims.preferred_username) ?? localPart ?? sub,
    email: email ?? null,
    // Only an explicit boolean true vouches for the address ("true" strings do not).
    email_verified: claims.email_verified === true,
    display_name: text(claims.name) ?? null,
  };
  if (Object.keys(groupMapping).length > 0) {
    const raw = claims[groupsClaim];
    const idpGroups = Array.isArray(raw) ? raw.filter((g): g is string => typeof g === 'string') : typeof raw === 'string' ? [raw] : [];
    const local = new Set<string>();
    for (const idpGroup of idpGroups) {
      if (Object.hasOwn(groupMapping, idpGroup)) for (const name of groupMapping[idpGroup]!) local.add(name);
    }
    profile.groups = [...local];
  }
  return profile;
}

/** Connection refused/reset, DNS failure, timeout: the IdP could not be talked to. */
function isNetworkFailure(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (code === 'OAUTH_TIMEOUT' || code === 'OAUTH_ABORT') return true;
  // undici's fetch rejects with TypeError('fetch failed') whose cause holds the socket error
  if (err instanceof TypeError && err.message === 'fetch failed') return true;
  if (err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError')) return true;
  return false;
}

function claimInCauseChain(err: unknown): string | undefined {
  let current: unknown = err;
  for (let depth = 0; depth < 5 && current && typeof current === 'object'; depth += 1) {
    const claim = (current as { claim?: unknown }).claim;
    if (typeof claim === 'string') return claim;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

async function openIdClient(): Promise<typeof OpenId> {
  client ??= await import('openid-client');
  return client;
}

/** A short, secret-free description: library message, code and OAuth error name. */
function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const parts = [err.message];
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string') parts.push(`(${code})`);
  if (client && err instanceof client.ResponseBodyError) parts.push(`[${err.error}]`);
  const causeCode = (err.cause as { code?: unknown } | undefined)?.code;
  if (typeof causeCode === 'string' && causeCode !== code) parts.push(`<${causeCode}>`);
  return parts.join(' ');
}
