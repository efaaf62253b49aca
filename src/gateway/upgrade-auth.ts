import http from 'node:http';
import type Koa from 'koa';
import { ApiIdentity, type CredentialMethod, type CredentialProof } from '../auth/identity.js';
import { hasSessionCookie } from '../auth/web-session.js';
import { presentedCredential, UNAUTHENTICATED } from '../http/errors.js';
import type { WsTickets } from './tickets.js';

/** The parts of the Authenticator the upgrade needs. */
export interface UpgradeAuthenticator {
  fromHeaders(headers: http.IncomingHttpHeaders, ip: string): Promise<ApiIdentity | null>;
  identityOf(
    userId: string,
    method: CredentialMethod,
    extra?: { scopes?: readonly string[] | null; proof?: CredentialProof | null },
  ): Promise<ApiIdentity | null>;
  revalidate(identities: readonly ApiIdentity[]): Promise<Array<ApiIdentity | null>>;
  originAllowed(origin: string | null | undefined, self?: string | null): boolean;
}

export type CookieIdentity = (req: http.IncomingMessage) => Promise<ApiIdentity | null>;

export interface UpgradeAuthDeps {
  auth: UpgradeAuthenticator;
  tickets: WsTickets;
  /** resolves the UI cookie session of an upgrade request; absent = cookies not accepted */
  cookieIdentity?: CookieIdentity;
  /** the origin the request was sent to (scheme and Host, as the HTTP app reads them) */
  selfOrigin?: (req: http.IncomingMessage) => string;
  /** the client's address, as the HTTP app reads it (`appClientAddress`): Basic's budget, lockout and log name it */
  clientAddress: (req: http.IncomingMessage) => string;
}

export type UpgradeAuthResult = { ok: true; identity: ApiIdentity } | { ok: false; status: 401; message: string };

const refuse = (message: string): UpgradeAuthResult => ({ ok: false, status: 401, message });

/**
 * Authenticates a WebSocket upgrade: a one-time `?ticket=`, else the header
 * credentials of HTTP (X-API-Key, Bearer, Basic), else the cookie session. A browser sends the
 * cookie and cached Basic credentials to any site that opens a socket to us, so those two count
 * only when the Origin is allowed (cross-site WebSocket hijacking). Throws HttpError 429 when
 * Basic is locked out.
 */
export async function authenticateUpgrade(req: http.IncomingMessage, deps: UpgradeAuthDeps): Promise<UpgradeAuthResult> {
  const url = new URL(req.url ?? '/', 'http://upgrade.invalid');
  const origin = typeof req.headers.origin === 'string' ? req.headers.origin : null;
  const originOk =
    deps.auth.originAllowed(origin) || (origin !== null && deps.selfOrigin !== undefined && deps.auth.originAllowed(origin, deps.selfOrigin(req)));

  const ticket = url.searchParams.get('ticket');
  if (ticket !== null) {
    const subject = await deps.tickets.redeem(ticket);
    if (!subject) return refuse('the ticket is unknown, used or expired');
    // the credential that minted the ticket must still hold (not revoked, password or key unchanged)
    const minted = subject.system
      ? subject.proof.kind === 'system_key'
        ? ApiIdentity.system(subject.proof.stamp, 'ws_ticket')
        : null
      : await deps.auth.identityOf(subject.user_id, 'ws_ticket', { scopes: subject.scopes, proof: subject.proof });
    const [identity] = minted ? await deps.auth.revalidate([minted]) : [null];
    return identity ? { ok: true, identity } : refuse('the credential behind the ticket has ended');
  }

  const authz = typeof req.headers.authorization === 'string' ? req.headers.authorization : '';
  const hasHeaderCredential = Boolean(req.headers['x-api-key']) || authz !== '';
  if (hasHeaderCredential) {
    if (/^Basic\s/i.test(authz) && origin !== null && !originOk) return refuse('Basic credentials are not accepted from this Origin');
    const identity = await deps.auth.fromHeaders(req.headers, deps.clientAddress(req));
    if (identity) return { ok: true, identity };
  }

  if (deps.cookieIdentity && hasSessionCookie(req.headers.cookie)) {
    if (!originOk) return refuse('a cookie session needs an allowed Origin');
    const identity = await deps.cookieIdentity(req);
    if (identity) return { ok: true, identity };
  }
  return refuse(UNAUTHENTICATED[presentedCredential(req.headers)]);
}

/**
 * The client address of an upgrade request by the HTTP app's own rule, Koa's `ctx.ip` (with
 * SERVICE_TRUST_PROXY the X-Forwarded-For entry the nearest trusted proxy added, else the TCP
 * peer): one client behind a proxy is one client over ws as over HTTP, in the lockout and the log.
 */
export function appClientAddress(app: Koa): (req: http.IncomingMessage) => string {
  return (req) => app.createContext(req, new http.ServerResponse(req)).ip;
}

/**
 * Resolves the koa-session cookie of an upgrade request by running the session middleware on
 * a throw-away Koa context, then the Authenticator's cookie method: the same code path as HTTP.
 */
export function cookieIdentityResolver(
  app: Koa,
  sessionMiddleware: Koa.Middleware,
  fromCookie: (ctx: Koa.Context) => Promise<ApiIdentity | null>,
): CookieIdentity {
  return async (req) => {
    const res = new http.ServerResponse(req);
    const ctx = app.createContext(req, res);
    let identity: ApiIdentity | null = null;
    await sessionMiddleware(ctx as unknown as Koa.ParameterizedContext, async () => {
      identity = await fromCookie(ctx as unknown as Koa.Context);
    });
    return identity;
  };
}
