import type Router from '@koa/router';
import Joi from 'joi';
import type { Context } from 'koa';
import type { AuthComponent } from '../component.js';
import { actor, identity } from '../guards.js';
import type { ApiIdentity } from '../identity.js';
import { ApiRouter } from '../../http/api.js';
import { badField, forbiddenBecause, notFound, unauthorized } from '../../http/errors.js';
import { uuidParam } from '../../iam/schemas.js';
import { ADMIN_USERS, userIdParams } from '../../iam/routes/users.js';
import { passSecondStep, secondStepRefused, signedIn } from '../complete-login.js';
import { lockedOut } from '../attempt-gate.js';
import { noStore } from '../sessions.js';
import { sameOriginOnly } from './login.js';
import { FIRST_FACTOR_PROOF, mfaStatusView, NOT_A_SESSION, reauthBody, recoveryCodesView, sessionView, totpConfirmedView } from './views.js';
import { requireFreshSignIn } from '../reauth.js';
import { publicKey } from '../api-keys.js';
import { keysBeforeFactor } from './me.js';

const code = Joi.string().trim().min(6).max(64).description('a 6-digit code of the authenticator app, or a recovery code');
interface CodeBody {
  code: string;
}
const codeBody = Joi.object<CodeBody, true>({ code: code.required() });
/** removing the app: a code is the fresh factor it needs, or the session stepped up lately */
const removeTotpBody = Joi.object<Partial<CodeBody>, true>({ code });
/** a WebAuthn assertion as @simplewebauthn/browser answers it (checked by the WebAuthn area) */
const assertion = Joi.object().unknown(true).max(16).description('the WebAuthn assertion (startAuthentication() of @simplewebauthn/browser)');
/** a second factor: a code or a WebAuthn assertion (exactly one) */
interface ProofBody {
  code?: string;
  webauthn?: Record<string, unknown>;
}
interface SecondStepBody extends ProofBody {
  mfa_token: string;
}
const proofBody = Joi.object<ProofBody, true>({ code, webauthn: assertion }).xor('code', 'webauthn');
// append(): keys() under a type that names the added key
const secondStepBody = proofBody.append<SecondStepBody>({
  mfa_token: Joi.string().min(16).max(512).required().description('from the answer of POST /api/auth/login'),
});
const totpEnrolmentView = Joi.object({
  secret: Joi.string().description('base32'),
  otpauth_uri: Joi.string(),
  qr_svg: Joi.string().description('the URI as an SVG QR code'),
});
interface PasskeyIdParams {
  id: string;
}
const passkeyIdParams = Joi.object<PasskeyIdParams, true>({ id: uuidParam });

/** Enrolling and removing a factor: a web session only, never an API key or Basic. */
function sessionUser(ctx: Context): ApiIdentity & { userId: string } {
  const id = identity(ctx);
  if (!id.userId || (id.method !== 'session_cookie' && id.method !== 'session_token'))
    throw forbiddenBecause('second factors are managed from a signed-in session, not with an API key, Basic or the system key');
  return id as ApiIdentity & { userId: string };
}

/**
 * The second factor over HTTP (docs/auth.md, "Second factor"): one's own factors under
 * /api/me/mfa, the second step of a sign-in, step-up, and an administrator's reset. The rules
 * are MfaService's and SecondStep's; WebAuthn's ceremonies are in src/auth/routes/webauthn.ts.
 */
export function mfaRoutes(auth: AuthComponent): Router {
  const api = new ApiRouter({ tag: 'mfa' });
  const me = async (ctx: Context) => auth.iam.users.find({ id: sessionUser(ctx).userId });

  api.endpoint(
    {
      method: 'GET',
      path: '/api/me/mfa',
      operationId: 'getMyMfa',
      summary: 'My second factors',
      auth: 'identity',
      responses: { 200: { description: 'the factors (never a secret)', schema: mfaStatusView }, 403: 'forbidden: the system key has no second factor' },
    },
    async (ctx) => {
      const id = identity(ctx);
      if (!id.userId) throw forbiddenBecause('the system key has no second factor');
      noStore(ctx);
      return auth.mfa.status(await auth.iam.users.find({ id: id.userId }));
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/me/mfa/totp',
      operationId: 'startTotpEnrollment',
      summary: 'Start enrolling an authenticator app',
      description: `Answers the secret (also as an \`otpauth://\` URI and a QR code) of an enrolment that becomes active with \`POST /api/me/mfa/totp/confirm\`. ${FIRST_FACTOR_PROOF}`,
      auth: 'identity',
      stepUp: true,
      body: reauthBody,
      responses: {
        200: { description: 'the new secret', schema: totpEnrolmentView },
        400: 'validation_failed: `current_password` missing (a first factor, the sign-in older than 5 minutes) or not correct',
        403: NOT_A_SESSION,
        409: 'an authenticator app is enrolled already',
        429: { description: 'locked out (wrong passwords)', headers: { 'Retry-After': 'seconds' } },
      },
    },
    async (ctx, { body }) => {
      noStore(ctx);
      const user = await me(ctx);
      await requireFreshSignIn(auth, ctx, user, body?.current_password);
      return auth.mfa.totp.enrol(actor(ctx), user, await auth.secondStep.sessionOf(identity(ctx)));
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/me/mfa/totp/confirm',
      operationId: 'confirmTotpEnrollment',
      summary: 'Confirm the authenticator app with a code: it becomes active',
      description:
        'A first second factor ends your other web sessions (this one stays). API keys issued before your oldest factor keep working: `keys_before_factor` lists them, for `POST /api/me/api-keys/revoke-before-factor`.',
      auth: 'identity',
      stepUp: true,
      body: codeBody,
      responses: {
        200: { description: 'ten recovery codes, shown this once, and the keys issued before any factor', schema: totpConfirmedView },
        400: 'validation_failed: the body is invalid, or `code` is not the current code of the app',
        403: NOT_A_SESSION,
        409: 'no enrolment was started',
      },
    },
    async (ctx, { body }) => {
      noStore(ctx);
      const user = await me(ctx);
      const codes = await auth.mfa.totp.confirm(actor(ctx), user, await auth.secondStep.sessionOf(identity(ctx)), body.code);
      await markVerified(auth, ctx);
      return { recovery_codes: codes, keys_before_factor: (await keysBeforeFactor(auth, user.id)).map(publicKey) };
    },
  );

  api.endpoint(
    {
      method: 'DELETE',
      path: '/api/me/mfa/totp',
      operationId: 'removeTotp',
      summary: 'Remove the authenticator app (with one of its codes or a recovery code, or after step-up)',
      description:
        "Needs a second factor proved within the step-up window: `code` (a current code of the app, or an unused recovery code) is that proof; without it, the session must have verified a factor lately (`POST /api/auth/step-up`). A wrong code counts toward the lockout of wrong passwords and toward the account's own second-factor lockout (ten wrong in an hour).",
      auth: 'identity',
      body: removeTotpBody,
      responses: {
        204: 'removed',
        400: 'validation_failed: the body is invalid, or `code` is not a current code or an unused recovery code',
        403: `${NOT_A_SESSION}; or step_up_required: no code and no second factor verified lately`,
        404: 'none enrolled',
        429: { description: 'locked out', headers: { 'Retry-After': 'seconds' } },
      },
    },
    async (ctx, { body }) => {
      const user = await me(ctx);
      if (!(await auth.mfa.totp.describe(user.id)).usable) throw notFound('authenticator app');
      if (body?.code !== undefined) {
        // the code is the fresh second factor removal needs: through the gate like any other
        const proved = await auth.secondStep.prove(ctx, user, { code: body.code }, 'factor_removal');
        if (!proved.ok) throw proved.retryAfter ? lockedOut(proved.retryAfter) : badField('code', 'is not a current code or an unused recovery code');
        await markVerified(auth, ctx);
      } else {
        await auth.secondStep.require(actor(ctx));
      }
      if (!(await auth.mfa.totp.remove(actor(ctx), user))) throw notFound('authenticator app');
      ctx.status = 204;
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/me/mfa/recovery-codes',
      operationId: 'regenerateRecoveryCodes',
      summary: 'New recovery codes (the old ones stop working)',
      auth: 'identity',
      stepUp: true,
      responses: {
        200: { description: 'ten recovery codes, shown this once', schema: recoveryCodesView },
        403: NOT_A_SESSION,
        409: 'no second factor enrolled',
      },
    },
    async (ctx) => {
      noStore(ctx);
      return { recovery_codes: await auth.mfa.recoveryCodes.regenerate(actor(ctx), await me(ctx)) };
    },
  );

  const sameOrigin = sameOriginOnly(auth);

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/login/mfa',
      operationId: 'completeMfaLogin',
      summary: 'The second step of a sign-in: a code or a passkey',
      description:
        "Wrong codes count toward the lockout of wrong passwords, and toward the account's own second-factor lockout (ten wrong in an hour, from any address). A wrong code spends the token and answers a new one in `details.mfa_token` (same expiry), to try again with.",
      auth: 'none',
      body: secondStepBody,
      middleware: [sameOrigin],
      responses: {
        200: { description: 'the session', schema: sessionView },
        401: 'the token expired or was used, or the code is wrong (details.mfa_token to retry)',
        429: { description: 'locked out (details.mfa_token to retry later, when the token was spent)', headers: { 'Retry-After': 'seconds' } },
      },
    },
    async (ctx, { body }) => {
      const outcome = await passSecondStep(auth, ctx, body.mfa_token, body.webauthn !== undefined ? { webauthn: body.webauthn } : { code: body.code });
      if (!outcome.ok) throw secondStepRefused(outcome);
      return signedIn(ctx, outcome.user, outcome.session);
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/step-up',
      operationId: 'stepUp',
      summary: 'Verify the second factor again (step-up)',
      description:
        "Covers the actions that reach the host or change who is trusted for `SERVICE_MFA_STEP_UP_MINUTES`. A wrong code counts toward the lockout of wrong passwords, and toward the account's own second-factor lockout (ten wrong in an hour).",
      auth: 'identity',
      body: proofBody,
      responses: {
        204: 'verified',
        401: 'wrong code',
        403: 'not a web session, or no second factor',
        429: { description: 'locked out', headers: { 'Retry-After': 'seconds' } },
      },
    },
    async (ctx, { body }) => {
      const id = identity(ctx);
      const sessionId = id.userId ? await auth.secondStep.sessionOf(id) : null;
      if (!sessionId) throw forbiddenBecause('step-up is for web sessions (API keys and the system key need none)');
      const user = await auth.iam.users.find({ id: id.userId! });
      if (!user.mfaEnabled) throw forbiddenBecause('enrol a second factor first');
      const proved = await auth.secondStep.prove(ctx, user, body.webauthn !== undefined ? { webauthn: body.webauthn } : { code: body.code }, 'step_up');
      if (!proved.ok) throw proved.retryAfter ? lockedOut(proved.retryAfter) : unauthorized('wrong code');
      const by = proved.value;
      await auth.apiKeys.markVerified(sessionId);
      ctx.log.info({ user_id: user.id, factor: by }, 'step-up verified');
      auth.iam.commands.record({
        action: 'auth.step_up',
        actor: actor(ctx),
        target: { type: 'user', id: user.id, name: user.username },
        details: { factor: by },
      });
      ctx.status = 204;
    },
  );

  api.endpoint(
    {
      method: 'DELETE',
      path: '/api/users/:id/mfa',
      operationId: 'resetUserMfa',
      summary: "Reset a user's second factors (every factor and recovery code; their sessions end)",
      description: 'For a user who lost their device. An account that reaches the host is reset by a superadmin only.',
      auth: { permission: ADMIN_USERS },
      stepUp: true,
      params: userIdParams,
      responses: {
        204: 'reset',
        403: `the caller lacks ${ADMIN_USERS}, or resets a superadmin or bot account, or one that reaches the host, without being a superadmin; or resets its own account (one's own factors are removed under /api/me/mfa)`,
        404: 'no such user',
      },
    },
    async (ctx, { params }) => {
      await auth.mfa.reset(actor(ctx), await auth.iam.users.find({ id: params.id }));
      ctx.status = 204;
    },
  );

  api.endpoint(
    {
      method: 'DELETE',
      path: '/api/me/mfa/webauthn/:id',
      operationId: 'removePasskey',
      summary: 'Remove one of my passkeys or security keys',
      auth: 'identity',
      stepUp: true,
      params: passkeyIdParams,
      responses: { 204: 'removed', 403: NOT_A_SESSION, 404: 'no such passkey of mine' },
    },
    async (ctx, { params }) => {
      if (!(await auth.mfa.passkeys.remove(actor(ctx), await me(ctx), params.id))) throw notFound('passkey');
      ctx.status = 204;
    },
  );

  return api.router;
}

/** Confirming a factor proves it: the session counts as verified (no step-up right after enrolling). */
async function markVerified(auth: AuthComponent, ctx: Context): Promise<void> {
  const sessionId = await auth.secondStep.sessionOf(identity(ctx));
  if (sessionId) await auth.apiKeys.markVerified(sessionId);
}
