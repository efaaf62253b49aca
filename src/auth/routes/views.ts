import Joi from 'joi';
import { publicKeySchema } from '../api-keys.js';
import type { ApiIdentity } from '../identity.js';
import type { KeyIssuingCredential } from '../../iam/keys.js';

/**
 * The answers of the sign-in and second-factor routes that more than one route gives, each
 * defined once and named (`.id()`): the API document has one component per shape. MfaStatus
 * and PasskeyView are read by the browser pages under these names (src/client/api-types.ts).
 */

/** A new web session: the answer of every sign-in that ends in one. */
export const sessionView = Joi.object({
  token: Joi.string().description('the web-session token (Bearer); also starts the UI cookie session'),
  token_type: Joi.string().valid('session'),
  expires_at: Joi.string().isoDate(),
  user: Joi.object({
    id: Joi.string().guid(),
    username: Joi.string(),
    display_name: Joi.string().allow(null),
    email: Joi.string().allow(null),
    groups: Joi.array().items(Joi.string()),
  }),
}).id('Session');

/** An account with a second factor: no session yet, the second step (POST /api/auth/login/mfa) first. */
export const secondStepView = Joi.object({
  mfa_required: Joi.valid(true),
  mfa_token: Joi.string().description('single use, five minutes; bound to this browser when a browser asked'),
  methods: Joi.array().items(Joi.string().valid('totp', 'webauthn', 'recovery_code')),
}).id('SecondStep');

/** The fields of a passkey as its owner sees it (a registration adds its recovery codes). */
export const passkeyFields = {
  id: Joi.string().guid(),
  label: Joi.string(),
  created_at: Joi.string().isoDate(),
  last_used_at: Joi.string().isoDate().allow(null),
};

export const passkeyView = Joi.object(passkeyFields).id('PasskeyView');

/** Starting a first factor: the current password, unless the session signed in within five minutes. */
export interface ReauthBody {
  current_password?: string;
}
export const reauthBody = Joi.object<ReauthBody, true>({
  current_password: Joi.string()
    .min(1)
    .max(1024)
    .description('your password, when this session signed in more than 5 minutes ago and you have no second factor yet'),
});
export const FIRST_FACTOR_PROOF =
  'Your first second factor needs proof that you are at this session: `current_password`, or a sign-in within the last 5 minutes (an account without a local password signs in again); a user who has a factor verifies it instead (step-up).';

/** GET /api/me/mfa: a user's second factors (never a secret). */
export const mfaStatusView = Joi.object({
  totp: Joi.boolean().description('an authenticator app is enrolled'),
  totp_created_at: Joi.string().isoDate().allow(null),
  totp_last_used_at: Joi.string().isoDate().allow(null),
  webauthn: Joi.array().items(passkeyView),
  recovery_codes_left: Joi.number().integer().min(0),
  required: Joi.boolean().description('a group of yours requires a second factor'),
}).id('MfaStatus');

export const recoveryCodesView = Joi.object({
  recovery_codes: Joi.array().items(Joi.string()).description('shown this once: each works once'),
}).id('RecoveryCodes');

/**
 * Every enrolment answers the caller's live API keys issued before their oldest factor: they
 * never passed one and keep working until revoked (POST /api/me/api-keys/revoke-before-factor).
 */
export const keysBeforeFactorField = Joi.array()
  .items(Joi.object(publicKeySchema).id('ApiKey'))
  .description('your live API keys issued before your oldest second factor (never a token), newest first; empty when none');

/** POST /api/me/mfa/totp/confirm: the recovery codes of the app, and the keys issued before any factor. */
export const totpConfirmedView = Joi.object({
  recovery_codes: Joi.array().items(Joi.string()).description('shown this once: each works once'),
  keys_before_factor: keysBeforeFactorField,
});

/**
 * The 403 of the routes that manage one's own factors. The document adds what refuses any route
 * (another origin, the enrolment wall) and, on a route that declares `stepUp`, the step-up.
 */
export const NOT_A_SESSION = 'not a web session (an API key, Basic or the system key)';

/** A key as issued: its public fields and, this once, its token. */
export const newKeyView = Joi.object({ ...publicKeySchema, token: Joi.string().description('the API key (X-API-Key or Bearer), shown this once') }).id(
  'NewApiKey',
);

/**
 * The caller's credential as the key writer judges what it may issue (src/iam/keys.ts): a
 * scoped key issues only keys within its scopes, one scoped to reads none of its own account,
 * and a key of its own account that it issues ends with it.
 */
export function issuingCredential(id: ApiIdentity): KeyIssuingCredential {
  const parent = id.method === 'api_key' && id.proof?.kind === 'credential' ? { id: id.proof.id, expiresAt: id.proof.expires_at } : null;
  return { keyScopes: id.keyScopes, allows: (p) => id.allows(p), mayChangeOwn: id.mayChangeOwn(), parent };
}
