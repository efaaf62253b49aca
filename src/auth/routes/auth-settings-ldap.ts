import Joi from 'joi';
import type { Context } from 'koa';
import type { ApiRouter } from '../../http/api.js';
import type { Logger } from '../../log.js';
import type { AuthComponent } from '../component.js';
import { LdapProvider } from '../providers/ldap.js';
import { testConnection, testLogin } from '../providers/ldap-diagnose.js';
import { ldapWarnings } from '../providers/ldap-warnings.js';
import { patchSchema, type AuthSettings } from '../settings.js';
import { parseDuration } from '../../settings-kinds.js';
import { DomainError } from '../../errors.js';
import { noStore } from '../sessions.js';
import { actor } from '../guards.js';
import { auditActor } from '../../iam/audit.js';

/**
 * POST /api/settings/auth/ldap/test-connection and /test-login: the directory tried with the
 * saved settings, or with `settings` (fields of PATCH /api/settings/auth, not saved) laid over
 * them, so a change can be tried before it is saved (a secret sent back as its mask keeps its
 * value; a new server or account needs its bind password entered again, as for a change). Each
 * test builds a provider of its own: the chain's (its pause, its remembered server) is untouched.
 */

/** The warnings of the settings (GET /api/settings/auth `warnings`): certificate checks off, a plain ldap:// server. */
export const ldapWarningView = Joi.object({
  field: Joi.string().description('the API name of the setting'),
  env: Joi.string().description('its environment variable'),
  message: Joi.string(),
}).id('LdapWarning');

type TestSettings = Record<string, unknown>;

interface ConnectionBody {
  settings?: TestSettings;
}
interface LoginBody extends ConnectionBody {
  username: string;
  password: string;
}

const settingsField = patchSchema
  .min(0)
  .description('fields of PATCH /api/settings/auth to try instead of the saved ones (not saved); absent: the saved settings');

const connectionBody = Joi.object<ConnectionBody, true>({ settings: settingsField.optional() });
const loginBody = Joi.object<LoginBody, true>({
  settings: settingsField.optional(),
  username: Joi.string().trim().min(1).max(256).required(),
  password: Joi.string().min(1).max(1024).required().description('never logged or recorded'),
});

const failureView = Joi.object({ url: Joi.string(), kind: Joi.string(), reason: Joi.string() });

const connectionView = Joi.object({
  ok: Joi.boolean(),
  url: Joi.string().allow(null).description('the server that answered'),
  server: Joi.string().valid('active_directory', 'openldap', 'unknown').allow(null).description("what the server's rootDSE says it is"),
  vendor: Joi.string().allow(null),
  kind: Joi.string()
    .allow(null)
    .description('why not: tls, refused, timeout, unreachable (no server answered: the last one), service_bind, base_dn, settings, error'),
  reason: Joi.string().allow(null).description('why not, for the operator'),
  failures: Joi.array().items(failureView).description('each server that could not be used, and why'),
  ms: Joi.number().integer(),
  warnings: Joi.array().items(ldapWarningView).description('the warnings of the settings tested'),
}).id('LdapConnectionTest');

const loginView = Joi.object({
  would_sign_in: Joi.boolean(),
  outcome: Joi.string().description(
    'signed_in, invalid_credentials (unknown name or wrong password), a refusal of the directory (account_disabled, account_expired, password_expired, password_must_change, logon_restricted, account_locked), directory_unavailable',
  ),
  username: Joi.string().allow(null).description('the local user name a sign-in would use'),
  dn: Joi.string().allow(null),
  url: Joi.string().allow(null),
  groups: Joi.array().items(Joi.string()).allow(null).description('the local groups the mapping gives; null: no mapping configured'),
  directory_groups: Joi.array().items(Joi.string()).allow(null).description('every directory group found, mapped or not'),
  reason: Joi.string().allow(null),
  ms: Joi.number().integer(),
  in_chain: Joi.boolean().description('LDAP is in the sign-in chain of these settings (else no sign-in reaches it)'),
}).id('LdapLoginTest');

/** A provider of the test's own, from `s` (the chain's construction, its warnings not logged again). */
function diagnosticProvider(s: AuthSettings, log: Logger): LdapProvider {
  const l = s.ldap;
  const missing = [!l.url && 'ldap_url', !l.baseDN && 'ldap_base_dn'].filter(Boolean);
  if (missing.length)
    throw new DomainError(
      'validation_failed',
      `LDAP needs ${missing.join(' and ')}`,
      missing.map((f) => ({ field: String(f), message: 'is not set' })),
    );
  const { url, bindDN, bindPassword, baseDN, userFilter, groupAttr, groupMapping, usernameAttr, nestedGroups, tlsVerify, caCert, startTls } = l;
  const { connectTimeoutMs, timeoutMs } = l;
  return new LdapProvider(
    {
      url: url!,
      bindDN,
      bindPassword,
      baseDN: baseDN!,
      userFilter,
      groupAttr,
      groupMapping,
      usernameAttr,
      nestedGroups,
      tlsVerify,
      caCert,
      startTls,
      connectTimeoutMs,
      timeoutMs,
      backoffMs: parseDuration(l.retryAfter) ?? undefined,
    },
    log,
    { diagnostic: true },
  );
}

/** The step-up of the session (as `stepUp: true` routes ask it), for a request that needs it only sometimes. */
async function stepUp(ctx: Context): Promise<void> {
  const state = ctx.state as { identity?: unknown; stepUp?: { require(identity: unknown): Promise<void> } };
  await state.stepUp?.require(state.identity);
}

/** The settings a test runs with: the saved ones, or `settings` laid over them (validated as a change, not saved). */
function settingsOf(auth: AuthComponent, body: ConnectionBody): AuthSettings {
  if (!body.settings || Object.keys(body.settings).length === 0) return auth.authSettings.current();
  return auth.authSettings.preview(body.settings).settings;
}

export function ldapTestEndpoints(api: ApiRouter, auth: AuthComponent): void {
  const ADMIN = { permission: 'feature:admin.settings' };

  api.endpoint(
    {
      method: 'POST',
      path: '/api/settings/auth/ldap/test-connection',
      operationId: 'testLdapConnection',
      tag: 'settings',
      summary: 'Test the directory connection: service bind, server kind, base DN',
      description:
        'Binds as the service account on the first server that answers, reads what kind of server it is and searches the base DN; answers which server answered and how long it took, or a reason an operator can act on (each server that could not be used, and why). With `settings`, the fields given are tried instead of the saved ones (not saved; a locked field is 409, a new server or account needs its bind password again), and, as for the change itself, a session with a second factor must have verified it recently (403 step_up_required); the saved settings need no step-up.',
      auth: ADMIN,
      body: connectionBody,
      responses: {
        200: { description: 'the outcome (also when the directory could not be used: `ok` false)', schema: connectionView },
        403: 'the caller lacks feature:admin.settings; or `settings` were given and a session with a second factor has not verified it recently (step_up_required)',
        409: 'a field of `settings` is set in the environment',
      },
    },
    async (ctx, { body }) => {
      noStore(ctx);
      // settings not saved point the service at servers of the caller's choosing: as the change itself, a step-up action
      if (body.settings && Object.keys(body.settings).length) await stepUp(ctx);
      const settings = settingsOf(auth, body);
      const result = await testConnection(diagnosticProvider(settings, ctx.log));
      ctx.log.info(
        { event: 'ldap_test_connection', ok: result.ok, url: result.url, kind: result.kind, reason: result.reason, failures: result.failures },
        'ldap: connection tested',
      );
      return { ...result, warnings: ldapWarnings(settings.ldap) };
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/settings/auth/ldap/test-login',
      operationId: 'testLdapLogin',
      tag: 'settings',
      summary: 'Test a sign-in through the directory, without signing in',
      description:
        'What a sign-in through LDAP would conclude of this name and password: whether the directory lets it in, why not, and the local groups the mapping gives. No user is created or changed, no session is made, and nothing counts toward the lockout (the directory itself counts a wrong password, as for any bind). The password is never logged or recorded; the test is recorded as `auth.ldap_test_login`. With `settings`, as for test-connection.',
      auth: ADMIN,
      stepUp: true,
      body: loginBody,
      responses: {
        200: { description: 'the outcome', schema: loginView },
        409: 'a field of `settings` is set in the environment',
      },
    },
    async (ctx, { body }) => {
      noStore(ctx);
      const settings = settingsOf(auth, body);
      const result = await testLogin(diagnosticProvider(settings, ctx.log), body.username, body.password);
      const inChain = settings.authProviders.includes('ldap');
      auth.iam.commands.record({
        action: 'auth.ldap_test_login',
        actor: auditActor(actor(ctx)),
        target: { type: 'user', name: body.username },
        outcome: result.would_sign_in ? 'success' : 'failure',
        details: { outcome: result.outcome, url: result.url, groups: result.groups, unsaved_settings: Boolean(body.settings) },
      });
      ctx.log.info(
        { event: 'ldap_test_login', username: body.username, outcome: result.outcome, url: result.url, reason: result.reason },
        'ldap: sign-in tested',
      );
      return { ...result, in_chain: inChain };
    },
  );
}
