import type Router from '@koa/router';
import Joi from 'joi';
import crypto from 'node:crypto';
import type { Context, Next } from 'koa';
import type { IamComponent } from '../iam/component.js';
import type { User } from '../iam/store.js';
import { PASSWORD_MAX } from '../iam/passwords.js';
import { checkedProfile, buildProviders, type ChainEntry } from '../iam/chain.js';
import { jsonBody } from '../http/body.js';
import { validate } from '../http/validate.js';
import { badField, forbiddenBecause, notFound, rateLimited, unauthorized, validationFailed } from '../http/errors.js';
import { ApiRouter } from '../http/api.js';
import { isLocalPath } from '../http/links.js';
import { requestOrigin } from './authenticate.js';
import { safeEqual, sha256 } from './tokens.js';
import { logLoginFailure, normalizeLogin, type LoginFailure } from './attempts.js';
import { patchSchema } from './settings.js';
import { SESSION_COOKIE } from './web-session.js';

/**
 * Login, logout, provider discovery, the OIDC redirect flow with its one-time exchange code,
 * and the auth settings. Login state never lives in process memory: OIDC
 * states and exchange codes are one-time values in the database, sessions are database rows.
 */

export const OIDC_STATE_TTL_MS = 10 * 60_000;
export const EXCHANGE_CODE_TTL_MS = 60_000;
/** binds an OIDC login (and its exchange code) to the browser that started it */
export const LOGIN_BINDING_COOKIE = 'svc.login';
export const CALLBACK_PATH = '/auth/callback/oidc';

/** Where to land after login: a path on this service, as a browser reads it (src/http/links.ts). */
export const nextSchema = Joi.string()
  .max(2048)
  .custom((value: string, helpers) => (isLocalPath(value) && !/\s/.test(value) ? value : helpers.message({ custom: '"next" must be a local path starting with a single /' })));

export const loginSchema = Joi.object({
  username: Joi.string().min(1).max(256).required(),
  password: Joi.string().min(1).max(PASSWORD_MAX).required(),
});

const exchangeSchema = Joi.object({ code: Joi.string().min(16).max(512).required() });

const startSchema = Joi.object({
  next: nextSchema.default('/'),
  redirect_uri: Joi.string().max(2048).uri({ scheme: ['http', 'https'] }),
  provider: Joi.string().pattern(/^[a-z0-9][a-z0-9_.-]{0,63}$/).default('oidc'),
});

interface StateRecord {
  provider: string;
  state: string;
  nonce: string;
  code_verifier: string;
  redirect_uri: string;
  next: string;
  client_redirect: string | null;
  binding: string;
}

interface CodeRecord {
  user_id: string;
  key_id: string;
  token: string;
  expires_at: number;
  /** hash of the binding cookie for the server-rendered flow; null for a client redirect_uri */
  binding: string | null;
}

export interface IssuedSession {
  token: string;
  key_id: string;
  expires_at: number;
}

export function loginBody(user: User, session: { token: string; expires_at: number }) {
  return {
    token: session.token,
    token_type: 'session' as const,
    expires_at: new Date(session.expires_at).toISOString(),
    user: { id: user.id, username: user.username, display_name: user.display_name, email: user.email, groups: user.groups },
  };
}

/** Refuses a browser request from a foreign page (login CSRF); requests without Origin are not from a browser form. */
export function checkOrigin(iam: IamComponent, ctx: Context): void {
  const origin = ctx.get('origin');
  if (origin && !iam.auth.originAllowed(origin, requestOrigin(ctx))) throw forbiddenBecause('cross-origin request refused: the Origin is not allowed');
}

/** Mints a web-session token (kind session) that expires with SERVICE_SESSION_TTL. */
export async function mintSession(iam: IamComponent, user: User, via: string): Promise<IssuedSession> {
  const expiresAt = Date.now() + iam.config.sessionTtlMs;
  const { token, key } = await iam.apiKeys.create(user.id, 'session', { label: `web session (${via})`, expiresAt });
  return { token, key_id: key.id, expires_at: expiresAt };
}

/** Starts the UI cookie session under a fresh session id (the old id, if any, is destroyed). */
export async function startCookieSession(ctx: Context, keyId: string): Promise<void> {
  ctx.session = { key_id: keyId };
  const session = ctx.session as { regenerate?: () => Promise<void> } | null;
  await session?.regenerate?.();
}

export type CredentialsOutcome = { ok: true; user: User; session: IssuedSession } | { ok: false; retryAfter: number };

/**
 * The credentials login shared by the API and the login form: lockout check, provider chain,
 * linking, session token. `retryAfter` > 0 means locked out (429), 0 means wrong credentials.
 */
export async function credentialsLogin(iam: IamComponent, ctx: Context, typed: string, password: string, via: 'login' | 'form'): Promise<CredentialsOutcome> {
  const ip = ctx.ip;
  // one name for the providers and the lockout: ' bob' and 'bob' share bob's five guesses
  const username = normalizeLogin(typed);
  const chainIds = iam.chain.credentials().map((p) => p.id).join(',');
  const failed = (reason: LoginFailure['reason'], provider = chainIds) => logLoginFailure(ctx.log, { username: typed, ip, provider, reason, via });
  // before any hashing: one address cannot keep the password pool busy for everyone
  const slow = iam.attempts.take(ip);
  if (slow > 0) {
    failed('rate_limited');
    return { ok: false, retryAfter: slow };
  }
  // the attempt counts as a failure from here until it succeeds
  const wait = await iam.lockout.begin(username, ip);
  if (wait > 0) {
    failed('locked_out');
    return { ok: false, retryAfter: wait };
  }
  const result = await iam.chain.authenticate(username, password);
  let user: User | null = null;
  if (result) {
    user = (await iam.linker.link(result.profile)).user;
    if (user.disabled) {
      failed('account_disabled', result.provider.id);
      user = null;
    }
  } else {
    failed('invalid_credentials');
  }
  if (!user || !result) return { ok: false, retryAfter: 0 };
  await iam.lockout.succeed(username, ip);
  const session = await mintSession(iam, user, result.provider.id);
  ctx.log.info({ provider: result.provider.id, user_id: user.id }, 'login');
  return { ok: true, user, session };
}

/** Revokes the session token behind the request and the cookie session's token, and ends the cookie session. */
export async function logout(iam: IamComponent, ctx: Context): Promise<boolean> {
  const id = ctx.state.identity;
  let ended = false;
  if (id?.user_id && id.credential_id && (id.method === 'session_token' || id.method === 'session_cookie')) {
    ended = (await iam.apiKeys.revoke(id.user_id, id.credential_id)) || ended;
  }
  if (ctx.cookies.get(SESSION_COOKIE)) {
    const keyId = ctx.session?.key_id;
    if (typeof keyId === 'string') {
      const key = await iam.apiKeys.get(keyId);
      if (key && key.kind === 'session') await iam.apiKeys.revoke(key.user_id, key.id);
      ended = true;
    }
    ctx.session = null;
  }
  return ended || Boolean(id);
}

function bindingOf(ctx: Context): string | null {
  const value = ctx.cookies.get(LOGIN_BINDING_COOKIE, { signed: true });
  return value && /^[A-Za-z0-9_-]{43}$/.test(value) ? value : null;
}

function bindingMatches(ctx: Context, expectedHash: string | null): boolean {
  const binding = bindingOf(ctx);
  return Boolean(binding && expectedHash && safeEqual(sha256(binding), expectedHash));
}

/** Where a failed browser login lands: the login page with a short, safe error code. */
export function loginErrorUrl(code: string, next?: string | null): string {
  const safe = /^[a-z_]{1,40}$/.test(code) ? code : 'login_failed';
  const q = new URLSearchParams({ error: safe });
  if (next && next !== '/' && isLocalPath(next)) q.set('next', next);
  return `/login?${q}`;
}

function errorCode(err: unknown): string {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && /^[a-z_]{1,40}$/.test(code) ? code : 'login_failed';
}

function startUrl(iam: IamComponent, id: string): string {
  return `${iam.config.publicUrl}/api/auth/oidc/start${id === 'oidc' ? '' : `?provider=${encodeURIComponent(id)}`}`;
}

export function providerList(iam: IamComponent) {
  return iam.chain.providers().map((p) =>
    p.kind === 'redirect' ? { id: p.id, kind: p.kind, label: p.label, start_url: startUrl(iam, p.id) } : { id: p.id, kind: p.kind, label: p.label },
  );
}

function noStore(ctx: Context) {
  ctx.set('Cache-Control', 'no-store');
}

const sessionResponse = Joi.object({
  token: Joi.string().description('the web-session token (Bearer); also starts the UI cookie session'),
  token_type: Joi.string().valid('session'),
  expires_at: Joi.string().isoDate(),
  user: Joi.object({ id: Joi.string().guid(), username: Joi.string(), display_name: Joi.string().allow(null), email: Joi.string().allow(null), groups: Joi.array().items(Joi.string()) }),
});

const providersResponse = Joi.object({
  providers: Joi.array().items(Joi.object({ id: Joi.string(), kind: Joi.string().valid('credentials', 'redirect'), label: Joi.string(), start_url: Joi.string().uri() })),
});

export function authRoutes(iam: IamComponent): Router {
  const api = new ApiRouter({ tag: 'auth' });
  const cookieOpts = () => ({
    httpOnly: true,
    sameSite: 'lax' as const,
    secure: iam.config.publicUrl.startsWith('https:'),
    signed: true,
    path: '/',
    maxAge: OIDC_STATE_TTL_MS,
    overwrite: true,
  });
  // browsers only: a foreign page may not post here (checked before the body is read)
  const sameOrigin = async (ctx: Context, next: Next) => {
    noStore(ctx);
    checkOrigin(iam, ctx);
    await next();
  };

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/login',
      summary: 'Log in with username and password (runs the provider chain)',
      description: 'Five failures per (username, client IP) within 60 s answer 429 with Retry-After.',
      auth: 'none',
      body: loginSchema,
      middleware: [sameOrigin],
      responses: { 200: { description: 'the session', schema: sessionResponse }, 401: 'wrong credentials', 429: { description: 'locked out', headers: { 'Retry-After': 'seconds' } } },
    },
    async (ctx, { body }) => {
      const outcome = await credentialsLogin(iam, ctx, body.username, body.password, 'login');
      if (!outcome.ok) {
        if (outcome.retryAfter > 0) throw rateLimited(outcome.retryAfter);
        throw unauthorized('invalid username or password');
      }
      await startCookieSession(ctx, outcome.session.key_id);
      return loginBody(outcome.user, outcome.session);
    },
  );

  api.endpoint(
    { method: 'POST', path: '/api/auth/logout', summary: 'Log out: revokes the presented session token and the cookie session', auth: 'none', responses: { 204: 'logged out', 401: 'no session presented' } },
    async (ctx) => {
      noStore(ctx);
      if (!(await logout(iam, ctx))) throw unauthorized();
      ctx.status = 204;
    },
  );

  api.endpoint(
    { method: 'GET', path: '/api/auth/providers', summary: 'Login providers (the login page renders one SSO button per redirect provider)', auth: 'none', responses: { 200: { description: 'the providers in chain order', schema: providersResponse } } },
    () => ({ providers: providerList(iam) }),
  );

  api.endpoint(
    {
      method: 'GET',
      path: '/api/auth/oidc/start',
      summary: 'Start the OIDC redirect login (PKCE, state, nonce)',
      description: '`next` is a local path to land on after login; `redirect_uri` (an allowed origin) receives a one-time `code` for POST /api/auth/token-exchange instead.',
      auth: 'none',
      query: startSchema,
      responses: { 302: 'to the identity provider', 404: 'no such redirect provider' },
    },
    async (ctx, { query: q }) => {
      noStore(ctx);
      if (q.redirect_uri) {
        // joi's uri() accepts some hosts the URL parser refuses (256.256.256.256): parse defensively
        let target: URL;
        try {
          target = new URL(q.redirect_uri);
        } catch {
          throw badField('redirect_uri', 'is not a valid URL');
        }
        if (!iam.auth.originAllowed(target.origin) || target.username || target.password || target.hash) {
          throw badField('redirect_uri', 'must be on an allowed origin (SERVICE_PUBLIC_URL or SERVICE_ALLOWED_ORIGINS)');
        }
      }
      const provider = iam.chain.redirect(q.provider);
      if (!provider) throw notFound(`redirect provider ${q.provider}`);
      // each start stores a state row: one address cannot fill the table (the same budget as password attempts)
      if (iam.attempts.take(ctx.ip) > 0) {
        ctx.redirect(loginErrorUrl('rate_limited', q.next));
        return;
      }
      // one binding per browser, reused so two tabs can sign in at once
      const binding = bindingOf(ctx) ?? crypto.randomBytes(32).toString('base64url');
      const redirectUri = `${iam.config.publicUrl}${CALLBACK_PATH}`;
      let started;
      try {
        started = await provider.start(redirectUri);
      } catch (err) {
        ctx.log.warn({ provider: provider.id, reason: (err as Error).message }, 'redirect login could not start');
        ctx.redirect(loginErrorUrl(errorCode(err), q.next));
        return;
      }
      const record: StateRecord = {
        provider: provider.id,
        state: started.state,
        nonce: started.nonce,
        code_verifier: started.code_verifier,
        redirect_uri: redirectUri,
        next: q.next,
        client_redirect: q.redirect_uri ?? null,
        binding: sha256(binding),
      };
      await iam.oneTime.put('oidc_state', record, OIDC_STATE_TTL_MS, started.state);
      ctx.cookies.set(LOGIN_BINDING_COOKIE, binding, cookieOpts());
      ctx.redirect(started.url);
    },
  );

  api.endpoint(
    {
      method: 'GET',
      path: CALLBACK_PATH,
      summary: 'OIDC redirect callback (browser)',
      description: 'Validates state, nonce and the ID token, links the identity and redirects to /auth/complete with a one-time code. Failures redirect to /login?error=<code>.',
      auth: 'none',
      responses: { 302: 'to /auth/complete, the client redirect_uri, or /login?error=…' },
    },
    async (ctx) => {
      noStore(ctx);
      let next: string | null = null;
      const fail = (code: string, reason?: string) => {
        ctx.log.warn({ code, reason }, 'redirect login failed');
        ctx.redirect(loginErrorUrl(code, next));
      };
      if (!iam.chain.ready) return fail('unavailable');
      const state = typeof ctx.query.state === 'string' ? ctx.query.state : null;
      const record = await iam.oneTime.take<StateRecord>('oidc_state', state);
      if (!record) return fail('state_mismatch', 'unknown, used or expired state');
      next = record.next;
      if (!bindingMatches(ctx, record.binding)) return fail('state_mismatch', 'state was issued to another browser');
      const provider = iam.chain.redirect(record.provider);
      if (!provider) return fail('provider_unavailable');

      let user: User;
      try {
        const callbackUrl = new URL(ctx.originalUrl, iam.config.publicUrl);
        const profile = checkedProfile(provider, await provider.callback(callbackUrl, record));
        user = (await iam.linker.link(profile)).user;
      } catch (err) {
        return fail(errorCode(err), (err as Error).message);
      }
      if (user.disabled) return fail('account_disabled', `user ${user.id} is disabled`);

      const session = await mintSession(iam, user, provider.id);
      const code = await iam.oneTime.put(
        'exchange_code',
        { user_id: user.id, key_id: session.key_id, token: session.token, expires_at: session.expires_at, binding: record.client_redirect ? null : record.binding } satisfies CodeRecord,
        EXCHANGE_CODE_TTL_MS,
      );
      ctx.log.info({ provider: provider.id, user_id: user.id }, 'redirect login');
      if (record.client_redirect) {
        const target = new URL(record.client_redirect);
        target.searchParams.set('code', code);
        ctx.redirect(target.href);
      } else {
        ctx.redirect(`/auth/complete?${new URLSearchParams({ code, next: record.next })}`);
      }
    },
  );

  /** Redeems an exchange code; a code bound to a browser only by that browser. Unusable codes burn their token. */
  const redeem = async (ctx: Context, code: unknown, requireBinding: boolean): Promise<{ user: User; record: CodeRecord } | null> => {
    const record = await iam.oneTime.take<CodeRecord>('exchange_code', typeof code === 'string' ? code : null);
    if (!record) return null;
    const bound = record.binding !== null;
    const usable = bound ? bindingMatches(ctx, record.binding) : !requireBinding;
    const key = usable ? await iam.apiKeys.lookupById(record.key_id) : null;
    const user = key ? await iam.store.userById(key.user_id) : null;
    if (!key || !user || user.disabled) {
      await iam.apiKeys.revoke(record.user_id, record.key_id);
      return null;
    }
    return { user, record };
  };

  api.endpoint(
    {
      method: 'GET',
      path: '/auth/complete',
      summary: 'Single sign-on handoff (browser): redeems the one-time code and starts the cookie session',
      auth: 'none',
      responses: { 302: 'to `next`, or /login?error=invalid_code' },
    },
    async (ctx) => {
      noStore(ctx);
      const { error, value: next } = nextSchema.default('/').validate(ctx.query.next);
      const target = error ? '/' : (next as string);
      const redeemed = await redeem(ctx, ctx.query.code, true);
      if (!redeemed) {
        ctx.log.warn('exchange code refused at /auth/complete');
        ctx.redirect(loginErrorUrl('invalid_code', target));
        return;
      }
      await startCookieSession(ctx, redeemed.record.key_id);
      ctx.redirect(target);
    },
  );

  api.endpoint(
    {
      method: 'POST',
      path: '/api/auth/token-exchange',
      summary: 'Exchange a one-time code (from a client redirect_uri) for the session token',
      auth: 'none',
      body: exchangeSchema,
      middleware: [sameOrigin],
      responses: { 200: { description: 'the session', schema: sessionResponse }, 401: 'code invalid, used or expired' },
    },
    async (ctx, { body }) => {
      const redeemed = await redeem(ctx, body.code, false);
      if (!redeemed) throw unauthorized('exchange code invalid, used or expired');
      return loginBody(redeemed.user, redeemed.record);
    },
  );

  const ADMIN = { permission: 'feature:admin.settings' };
  const settingsView = () => ({
    settings: iam.authSettings.view(),
    chain: iam.chain.entries().map((e: ChainEntry) => ({ id: e.provider.id, kind: e.provider.kind, label: e.provider.label, source: e.source, plugin: e.plugin })),
  });
  const settingsResponse = Joi.object({
    settings: Joi.object().pattern(
      Joi.string(),
      Joi.object({ value: Joi.any(), source: Joi.string().valid('env', 'store', 'default'), locked: Joi.boolean(), secret: Joi.boolean(), configured: Joi.boolean() }),
    ),
    chain: Joi.array().items(Joi.object({ id: Joi.string(), kind: Joi.string(), label: Joi.string(), source: Joi.string(), plugin: Joi.string().allow(null) })),
  });

  api.endpoint(
    {
      method: 'GET',
      path: '/api/settings/auth',
      tag: 'settings',
      summary: 'Authentication provider settings (secrets masked, env-set fields locked)',
      auth: ADMIN,
      responses: { 200: { description: 'every field with its source and lock, and the built chain', schema: settingsResponse } },
    },
    (ctx) => {
      noStore(ctx);
      return settingsView();
    },
  );

  api.endpoint(
    {
      method: 'PATCH',
      path: '/api/settings/auth',
      tag: 'settings',
      summary: 'Change authentication provider settings (rebuilds the provider chain)',
      description: 'null removes a stored value; a secret sent back as its mask keeps its value. An env-set field is 409.',
      auth: ADMIN,
      body: patchSchema,
      // 409 for a locked field comes before validation of its value
      bodyMode: 'manual',
      responses: { 200: { description: 'the new settings', schema: settingsResponse }, 409: 'a field is set in the environment' },
    },
    async (ctx) => {
      noStore(ctx);
      const body = jsonBody(ctx);
      if (body && typeof body === 'object' && !Array.isArray(body)) iam.authSettings.assertUnlocked(Object.keys(body));
      const patch = validate(patchSchema, body) as Record<string, unknown>;
      await iam.authSettings.load(); // another instance may have changed them
      const { settings, changes } = iam.authSettings.preview(patch);
      if ('sso_default_groups' in changes && settings.ssoDefaultGroups.length) {
        const found = new Set((await iam.store.groupsNamed(settings.ssoDefaultGroups)).map((g) => g.name));
        const missing = settings.ssoDefaultGroups.filter((g) => !found.has(g));
        if (missing.length) throw badField('sso_default_groups', `unknown group ${missing.join(', ')}`);
      }
      const { errors } = buildProviders(settings, iam.local, ctx.log);
      if (errors.length) throw validationFailed(errors.map((e) => ({ field: e.provider, message: e.message })));
      await iam.authSettings.save(changes);
      iam.rebuildChain();
      // every other instance rebuilds its chain too
      iam.bus.emit('auth:settings_changed', {});
      ctx.log.info({ fields: Object.keys(changes) }, 'auth settings changed; provider chain rebuilt');
      return settingsView();
    },
  );

  return api.router;
}
