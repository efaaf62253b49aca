import type Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { AuthComponent } from '../component.js';
import { actor, identity } from '../guards.js';
import type { ApiIdentity } from '../identity.js';
import { ApiRouter } from '../../http/api.js';
import { conflict, forbiddenBecause, HttpError } from '../../http/errors.js';
import type { User } from '../../iam/store.js';
import { completeLogin, passSecondStep, secondStepRefused, signedIn } from '../complete-login.js';
import { lockedOut, type Attempt } from '../attempt-gate.js';
import { deviceCookieOf } from '../device-cookie.js';
import { noStore } from '../sessions.js';
import { sameOriginOnly } from './login.js';
import { FIRST_FACTOR_PROOF, keysBeforeFactorField, NOT_A_SESSION, passkeyFields, reauthBody, sessionView } from './views.js';
import { requireFreshSignIn } from '../reauth.js';
import { publicKey } from '../api-keys.js';
import { keysBeforeFactor } from './me.js';

/*
 * The options as @simplewebauthn/server makes them (PublicKeyCredentialCreationOptionsJSON and
 * PublicKeyCredentialRequestOptionsJSON of the WebAuthn spec), for startRegistration() and
 * startAuthentication() of @simplewebauthn/browser. Byte strings are base64url.
 */
const credentialDescriptor = Joi.object({
  id: Joi.string(),
  type: Joi.string().valid('public-key'),
  transports: Joi.array().items(Joi.string()).optional(),
}).id('PublicKeyCredentialDescriptor');
// extension inputs are an open dictionary in the spec
const extensions = Joi.object().unknown(true).optional().description('WebAuthn extension inputs');
const hints = Joi.array()
  .items(Joi.string().valid('hybrid', 'security-key', 'client-device'))
  .optional();
const creationOptions = Joi.object({
  challenge: Joi.string(),
  rp: Joi.object({ name: Joi.string(), id: Joi.string().optional() }),
  user: Joi.object({ id: Joi.string(), name: Joi.string(), displayName: Joi.string().allow('') }),
  pubKeyCredParams: Joi.array().items(Joi.object({ alg: Joi.number().integer(), type: Joi.string().valid('public-key') })),
  timeout: Joi.number().integer().optional().description('milliseconds'),
  excludeCredentials: Joi.array().items(credentialDescriptor).optional().description('the passkeys registered already'),
  authenticatorSelection: Joi.object({
    authenticatorAttachment: Joi.string().valid('platform', 'cross-platform').optional(),
    requireResidentKey: Joi.boolean().optional(),
    residentKey: Joi.string().valid('discouraged', 'preferred', 'required').optional(),
    userVerification: Joi.string().valid('discouraged', 'preferred', 'required').optional(),
  }).optional(),
  hints,
  attestation: Joi.string().valid('none', 'indirect', 'direct', 'enterprise').optional(),
  attestationFormats: Joi.array().items(Joi.string()).optional(),
  extensions,
}).description('PublicKeyCredentialCreationOptionsJSON');
const requestOptions = Joi.object({
  challenge: Joi.string(),
  timeout: Joi.number().integer().optional().description('milliseconds'),
  rpId: Joi.string().optional(),
  allowCredentials: Joi.array()
    .items(credentialDescriptor)
    .optional()
    .description("the account's passkeys (empty for a passwordless sign-in: any passkey of this site)"),
  userVerification: Joi.string().valid('discouraged', 'preferred', 'required').optional(),
  hints,
  extensions,
}).description('PublicKeyCredentialRequestOptionsJSON');
const credential = Joi.object().unknown(true).max(16);

const registrationOptionsView = Joi.object({ flow: Joi.string().valid('registration'), options: creationOptions });
const authenticationOptionsView = Joi.object({ flow: Joi.string().valid('passwordless', 'second_step', 'step_up'), options: requestOptions });
interface RegisterPasskeyBody {
  label: string;
  response: Record<string, unknown>;
}
const registerPasskeyBody = Joi.object<RegisterPasskeyBody, true>({
  label: Joi.string().trim().min(1).max(100).required().description('how you will recognise it: "Laptop", "YubiKey"'),
  response: credential.required().description('the answer of startRegistration()'),
});
interface AuthenticationOptionsBody {
  mfa_token?: string;
  purpose?: 'step_up';
}
const authenticationOptionsBody = Joi.object<AuthenticationOptionsBody, true>({
  mfa_token: Joi.string().min(16).max(512).description('the second step of this sign-in'),
  purpose: Joi.string().valid('step_up').description('verify again, signed in (step-up)'),
}).oxor('mfa_token', 'purpose');
/** `mfa_token` is there exactly when `flow` is second_step */
interface PasskeySignInBody {
  flow: 'passwordless' | 'second_step';
  response: Record<string, unknown>;
  mfa_token?: string;
}
const passkeySignInBody = Joi.object<PasskeySignInBody, true>({
  flow: Joi.string().valid('passwordless', 'second_step').default('passwordless'),
  response: credential.required().description('the answer of startAuthentication()'),
  mfa_token: Joi.string().min(16).max(512).when('flow', { is: 'second_step', then: Joi.required(), otherwise: Joi.forbidden() }),
});

/** A registered passkey with the keys issued before any factor; a first factor comes with its recovery codes too. */
const registeredPasskeyView = Joi.object({
  ...passkeyFields,
  recovery_codes: Joi.array()
    .items(Joi.string())
    .optional()
    .description('only when this passkey is your first second factor: ten recovery codes, shown this once'),
  keys_before_factor: keysBeforeFactorField,
});

/** The web session an identity signs with (cookie or session token), else 403: factors are managed from a session. */
async function webSession(auth: AuthComponent, ctx: Context): Promise<{ id: ApiIdentity; sessionId: string; user: User }> {
  const id = identity(ctx);
  const sessionId = id.userId && (id.method === 'session_cookie' || id.method === 'session_token') ? await auth.secondStep.sessionOf(id) : null;
  if (!sessionId) throw forbiddenBecause('passkeys are managed from a signed-in session, not with an API key, Basic or the system key');
  return { id, sessionId, user: await auth.iam.users.find({ id: id.userId! }) };
}

/**
 * The options of a second step with a passkey, for the holder of its token (the API's
 * `mfa_token`, the login page's cookie): that account's passkeys. The token is not spent.
 */
export async function secondStepOptions(auth: AuthComponent, ctx: Context, token: unknown) {
  // each challenge is a row: callers spend the address's budget, like a password check
  const slow = auth.gate.spend(ctx.ip);
  if (slow > 0) throw lockedOut(slow, false);
  const userId = await auth.secondStep.pendingUser(ctx, token);
  const user = userId ? await auth.iam.store.userById(userId) : null;
  if (!user || user.disabled) throw new HttpError(401, 'unauthorized', 'sign in again: the second step expired', { reason: 'expired' });
  if (!(await auth.mfa.passkeys.passkeysOf(user.id)).length) throw conflict('no passkey is registered for this account');
  return { flow: 'second_step' as const, options: await auth.webauthn.authenticationOptions('second_step', user) };
}

/**
 * Passkeys and security keys over HTTP (docs/auth.md, "Passkeys"): registering one from a web
 * session, and the options and answers of a sign-in with one. The ceremonies are
 * src/auth/mfa/webauthn.ts; the second step and step-up take an assertion at their own
 * endpoints too (POST /api/auth/login/mfa, POST /api/auth/step-up with `webauthn`).
 */
export function webauthnRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ tag: 'mfa' });
  const sameOrigin = sameOriginOnly(auth);

  api.endpoint(
    {
      method: 'POST',
      path: '/api/me/mfa/webauthn/options',
      operationId: 'passkeyRegistrationOptions',
      summary: 'Start registering a passkey or security key',
      description: `Answers the options for \`navigator.credentials.create()\` (\`startRegistration()\` of @simplewebauthn/browser), with a challenge good for two minutes, once, from this session. ${FIRST_FACTOR_PROOF}`,
      auth: 'identity',
      stepUp: true,
      body: reauthBody,
      responses: {
        200: { description: 'the registration options', schema: registrationOptionsView },
        400: 'validation_failed: `current_password` missing (a first factor, the sign-in older than 5 minutes) or not correct',
        403: NOT_A_SESSION,
        429: { description: 'locked out (wrong passwords)', headers: { 'Retry-After': 'seconds' } },
      },
    },
    async (ctx, { body }) => {
      noStore(ctx);
      const { sessionId, user } = await webSession(auth, ctx);
      await requireFreshSignIn(auth, ctx, user, body?.current_password);
      return { flow: 'registration', options: await auth.mfa.passkeys.enrol(actor(ctx), user, sessionId) };
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/me/mfa/webauthn',
      operationId: 'registerPasskey',
      summary: 'Register a passkey or security key',
      description:
        'Verifies the answer of `startRegistration()` to the options of `POST /api/me/mfa/webauthn/options` (same session) and keeps the key. When it is your first second factor, the answer also carries ten recovery codes, shown this once, and your other web sessions end (this one stays). API keys issued before your oldest factor keep working: `keys_before_factor` lists them, for `POST /api/me/api-keys/revoke-before-factor`.',
      auth: 'identity',
      stepUp: true,
      body: registerPasskeyBody,
      responses: {
        201: { description: 'the passkey', schema: registeredPasskeyView },
        400: 'validation_failed: the body is invalid, or the answer could not be verified, or its registration expired',
        403: NOT_A_SESSION,
        409: 'this passkey is registered already',
      },
    },
    async (ctx, { body }) => {
      noStore(ctx);
      const { sessionId, user } = await webSession(auth, ctx);
      // the first factor comes with recovery codes, to be shown once
      const { passkey, recoveryCodes: codes } = await auth.mfa.passkeys.confirm(actor(ctx), user, sessionId, body);
      // the registration proved the key: no step-up right after enrolling
      await auth.apiKeys.markVerified(sessionId);
      ctx.status = 201;
      return { ...passkey, ...(codes ? { recovery_codes: codes } : {}), keys_before_factor: (await keysBeforeFactor(auth, user.id)).map(publicKey) };
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/webauthn/options',
      operationId: 'passkeyLoginOptions',
      summary: 'Start a sign-in or verification with a passkey',
      description:
        'With no body: a passwordless sign-in (any passkey of this site, user verification required). With `mfa_token` (the answer of `POST /api/auth/login`): the second step, offering that account\'s passkeys; the token is not spent here. With `purpose: "step_up"` (signed in with a web session): step-up. The challenge is good for two minutes, once.',
      auth: 'optional',
      body: authenticationOptionsBody,
      middleware: [sameOrigin],
      responses: {
        200: { description: 'the flow and the options for startAuthentication()', schema: authenticationOptionsView },
        401: 'the second-step token expired or was used; step-up without a sign-in',
        403: 'step-up from something other than a web session',
        409: 'the account has no passkey',
        429: { description: 'over the per-address budget', headers: { 'Retry-After': 'seconds' } },
      },
    },
    async (ctx, { body }) => {
      if (body.purpose === 'step_up') {
        const id = ctx.state.identity;
        if (!id) throw new HttpError(401, 'unauthorized', 'sign in first');
        const sessionId = id.userId ? await auth.secondStep.sessionOf(id) : null;
        if (!sessionId) throw forbiddenBecause('step-up is for web sessions (API keys and the system key need none)');
        const user = await auth.iam.users.find({ id: id.userId! });
        if (!(await auth.mfa.passkeys.passkeysOf(user.id)).length) throw conflict('no passkey is registered for this account');
        return { flow: 'step_up', options: await auth.webauthn.authenticationOptions('step_up', user) };
      }
      if (body.mfa_token !== undefined) return secondStepOptions(auth, ctx, body.mfa_token);
      // each challenge is a row: anonymous callers spend the address's budget, like a password check
      const slow = auth.gate.spend(ctx.ip);
      if (slow > 0) throw lockedOut(slow, false);
      return { flow: 'passwordless', options: await auth.webauthn.authenticationOptions('passwordless', null) };
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/webauthn',
      operationId: 'loginWithPasskey',
      summary: 'Sign in with a passkey',
      description:
        '`flow: "passwordless"` (the default): the answer of `startAuthentication()` to passwordless options; the passkey names the account, and counts as both factors. `flow: "second_step"` with `mfa_token`: the same as `POST /api/auth/login/mfa` with `webauthn`. Failures are logged as `login_failed` and count toward the lockout of the account the passkey belongs to.',
      auth: 'none',
      body: passkeySignInBody,
      middleware: [sameOrigin],
      responses: {
        200: { description: 'the session', schema: sessionView },
        401: 'not accepted: `details.reason` is `expired` (the challenge: two minutes, once), `invalid_passkey` or `account_disabled`',
        429: { description: 'locked out, or over the per-address budget', headers: { 'Retry-After': 'seconds' } },
      },
    },
    async (ctx, { body }) => {
      if (body.flow === 'second_step') {
        const outcome = await passSecondStep(auth, ctx, body.mfa_token, { webauthn: body.response });
        if (!outcome.ok) throw secondStepRefused(outcome, 'the passkey was not accepted');
        return signedIn(ctx, outcome.user, outcome.session);
      }
      const attempt = (username: string): Attempt => ({
        secret: 'passkey',
        username,
        ip: ctx.ip,
        deviceCookie: deviceCookieOf(ctx),
        via: 'passkey',
        provider: 'webauthn',
        log: ctx.log,
      });
      const refused = (reason: 'expired' | 'invalid_passkey' | 'account_disabled') =>
        new HttpError(
          401,
          'unauthorized',
          reason === 'expired'
            ? 'the passkey sign-in expired: try again'
            : reason === 'account_disabled'
              ? 'this account is disabled'
              : 'the passkey was not accepted',
          { reason },
        );
      // before anything is looked up: the address's budget
      const slow = auth.gate.spend(ctx.ip, attempt(''));
      if (slow > 0) throw lockedOut(slow);
      const begun = await auth.webauthn.begin(body.response, ['passwordless'], null);
      if (!begun.ok) {
        auth.gate.fail(attempt(''), 'invalid_credentials');
        throw refused(begun.reason === 'expired' ? 'expired' : 'invalid_passkey');
      }
      const user = await auth.iam.store.userById(begun.pending.passkey.userId);
      if (!user || user.disabled) {
        auth.gate.fail(attempt(user?.username ?? ''), 'account_disabled');
        throw refused('account_disabled');
      }
      // counted like a password guess at this account: the attempt is a failure until it passes
      const checked = await auth.gate.check(attempt(user.username), () => auth.webauthn.finish(begun.pending, { requireUserVerification: true }));
      if (!checked.ok) throw checked.retryAfter ? lockedOut(checked.retryAfter) : refused('invalid_passkey');
      const done = await completeLogin(auth, ctx, user, { provider: 'webauthn', via: 'passkey', secondFactor: true, factor: 'webauthn' });
      if (done.kind !== 'session') throw new Error('a passkey sign-in must end in a session');
      return signedIn(ctx, done.user, done.session);
    },
  );

  return api.router;
}
