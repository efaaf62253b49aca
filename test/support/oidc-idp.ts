/**
 * A real, in-process OpenID Provider (the `oidc-provider` package, v9) for tests of the OIDC
 * login flow, driven headless: a tiny interaction handler (login / consent / abort as plain
 * form posts) and a cookie-jar fetch helper that walks the browser's part of the flow.
 *
 * Plain http on 127.0.0.1 with a free port: the relying party must allow insecure requests.
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { generateKeyPairSync, randomBytes } from 'node:crypto';

export interface IdpClient {
  client_id: string;
  client_secret: string;
  redirect_uris: string[];
}

export interface StartIdpOptions {
  clients: IdpClient[];
  /** sub -> claims (email, email_verified, preferred_username, name, groups, ...) */
  accounts: Record<string, Record<string, unknown>>;
  /**
   * oidc-provider's conformIdTokenClaims. false (default here): scope claims go into the ID
   * token. true (the provider's own default): the ID token carries only sub & co when an access
   * token is issued, so the relying party has to ask userinfo for the profile.
   */
  conformIdTokenClaims?: boolean;
  /** listen on this port instead of a free one (to bring an IdP up where one was missing) */
  port?: number;
}

export interface FollowOptions {
  /** sub to log in as; must be in `accounts` */
  login: string;
  /** answer the login prompt with access_denied instead of logging in */
  deny?: boolean;
}

export interface RunningIdp {
  issuer: string;
  port: number;
  /** walks start URL -> login -> consent -> the client's redirect_uri; returns that URL */
  followToCallback(startUrl: string, opts: FollowOptions): Promise<URL>;
  stop(): Promise<void>;
}

// Minimal shape of what the helper uses from oidc-provider (the package ships no types).
interface InteractionDetails {
  uid: string;
  prompt: { name: string; details: Record<string, unknown> };
  params: Record<string, unknown>;
  session?: { accountId?: string };
  grantId?: string;
}
interface GrantInstance {
  addOIDCScope(scope: string): void;
  addOIDCClaims(claims: string[]): void;
  addResourceScope(indicator: string, scope: string): void;
  save(): Promise<string>;
}
interface OidcProviderInstance {
  callback(): (req: http.IncomingMessage, res: http.ServerResponse) => void;
  interactionDetails(req: http.IncomingMessage, res: http.ServerResponse): Promise<InteractionDetails>;
  interactionFinished(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    result: Record<string, unknown>,
    options?: { mergeWithLastSubmission?: boolean },
  ): Promise<void>;
  Grant: { new (init: { accountId: string; clientId: string }): GrantInstance; find(id: string): Promise<GrantInstance | undefined> };
}
type OidcProviderCtor = new (issuer: string, configuration: Record<string, unknown>) => OidcProviderInstance;

async function loadProviderClass(): Promise<OidcProviderCtor> {
  // A non-literal specifier keeps tsc from demanding type declarations the package lacks.
  const specifier = 'oidc-provider';
  const mod = (await import(specifier)) as { default: OidcProviderCtor };
  return mod.default;
}

/** One RSA signing key per process: generating it costs tens of milliseconds. */
let signingJwk: Record<string, unknown> | undefined;
function signingKey(): Record<string, unknown> {
  if (!signingJwk) {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    signingJwk = { ...(privateKey.export({ format: 'jwk' }) as Record<string, unknown>), kid: 'test-rs256', alg: 'RS256', use: 'sig' };
  }
  return signingJwk;
}

/**
 * Per-IdP in-memory storage for the provider's artifacts (sessions, codes, grants, ...), so
 * two IdPs in one process share nothing and a stopped IdP's data goes with it.
 */
function memoryAdapterFactory(): (model: string) => Record<string, unknown> {
  type Entry = { payload: Record<string, unknown>; expiresAt: number };
  const entries = new Map<string, Entry>();
  const index = new Map<string, string>(); // "uid:<uid>" / "userCode:<code>" -> id
  const grants = new Map<string, Set<string>>(); // grantId -> keys of its artifacts
  const live = (key: string): Record<string, unknown> | undefined => {
    const entry = entries.get(key);
    if (entry && entry.expiresAt <= Date.now()) entries.delete(key);
    return entry && entry.expiresAt > Date.now() ? entry.payload : undefined;
  };
  return (model: string) => {
    const keyOf = (id: string) => `${model}:${id}`;
    return {
      async upsert(id: string, payload: Record<string, unknown>, expiresIn?: number) {
        const expiresAt = typeof expiresIn === 'number' ? Date.now() + expiresIn * 1000 : Infinity;
        entries.set(keyOf(id), { payload, expiresAt });
        if (model === 'Session' && typeof payload.uid === 'string') index.set(`uid:${payload.uid}`, id);
        if (typeof payload.userCode === 'string') index.set(`userCode:${payload.userCode}`, id);
        if (typeof payload.grantId === 'string') {
          const members = grants.get(payload.grantId) ?? new Set<string>();
          members.add(keyOf(id));
          grants.set(payload.grantId, members);
        }
      },
      async find(id: string) {
        return live(keyOf(id));
      },
      async findByUid(uid: string) {
        const id = index.get(`uid:${uid}`);
        return id === undefined ? undefined : live(keyOf(id));
      },
      async findByUserCode(userCode: string) {
        const id = index.get(`userCode:${userCode}`);
        return id === undefined ? undefined : live(keyOf(id));
      },
      async consume(id: string) {
        const payload = live(keyOf(id));
        if (payload) payload.consumed = Math.floor(Date.now() / 1000);
      },
      async destroy(id: string) {
        entries.delete(keyOf(id));
      },
      async revokeByGrantId(grantId: string) {
        for (const key of grants.get(grantId) ?? []) entries.delete(key);
        grants.delete(grantId);
      },
    };
  };
}

async function readForm(req: http.IncomingMessage): Promise<URLSearchParams> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > 16 * 1024) throw new Error('form too large');
    chunks.push(chunk as Buffer);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export async function startIdp(opts: StartIdpOptions): Promise<RunningIdp> {
  const Provider = await loadProviderClass();
  let provider: OidcProviderInstance | undefined;
  let providerHandler: ((req: http.IncomingMessage, res: http.ServerResponse) => void) | undefined;

  // Interaction routes the provider redirects the browser to (see interactions.url below).
  async function handleInteraction(req: http.IncomingMessage, res: http.ServerResponse, uid: string, action: string | undefined): Promise<void> {
    const idp = provider!;
    const details = await idp.interactionDetails(req, res);
    if (details.uid !== uid) return sendJson(res, 400, { error: 'interaction uid mismatch' });

    if (req.method === 'GET' && !action) {
      return sendJson(res, 200, { uid, prompt: details.prompt.name, client_id: details.params.client_id });
    }
    if (req.method !== 'POST') return sendJson(res, 405, { error: 'method not allowed' });

    if (action === 'abort') {
      return idp.interactionFinished(
        req,
        res,
        { error: 'access_denied', error_description: 'End-User aborted interaction' },
        { mergeWithLastSubmission: false },
      );
    }
    if (action === 'login') {
      if (details.prompt.name !== 'login') return sendJson(res, 400, { error: 'not a login prompt' });
      const form = await readForm(req);
      const sub = form.get('login') ?? '';
      if (!Object.hasOwn(opts.accounts, sub)) return sendJson(res, 400, { error: 'unknown account' });
      return idp.interactionFinished(req, res, { login: { accountId: sub } }, { mergeWithLastSubmission: false });
    }
    if (action === 'confirm') {
      if (details.prompt.name !== 'consent') return sendJson(res, 400, { error: 'not a consent prompt' });
      const accountId = details.session?.accountId;
      if (!accountId) return sendJson(res, 400, { error: 'no session' });
      const grant = details.grantId ? await idp.Grant.find(details.grantId) : new idp.Grant({ accountId, clientId: String(details.params.client_id) });
      if (!grant) return sendJson(res, 400, { error: 'grant gone' });
      // Grant exactly what the prompt says is missing: scopes, claims, resource scopes.
      const missing = details.prompt.details as {
        missingOIDCScope?: string[];
        missingOIDCClaims?: string[];
        missingResourceScopes?: Record<string, string[]>;
      };
      if (missing.missingOIDCScope?.length) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
      if (missing.missingOIDCClaims?.length) grant.addOIDCClaims(missing.missingOIDCClaims);
      for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
        grant.addResourceScope(indicator, scopes.join(' '));
      }
      const grantId = await grant.save();
      return idp.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    }
    return sendJson(res, 404, { error: 'unknown interaction action' });
  }

  const server = http.createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://idp.invalid').pathname;
    const match = /^\/interaction\/([A-Za-z0-9_-]+)(?:\/(login|confirm|abort))?$/.exec(path);
    if (match) {
      handleInteraction(req, res, match[1]!, match[2]).catch((err: unknown) => {
        if (!res.headersSent) sendJson(res, 500, { error: err instanceof Error ? err.message : String(err) });
        else res.destroy();
      });
      return;
    }
    if (!providerHandler) return sendJson(res, 503, { error: 'starting' });
    providerHandler(req, res);
  });
  // The issuer contains the port, so listen first and build the provider after.
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const issuer = `http://127.0.0.1:${port}`;

  provider = new Provider(issuer, {
    clients: opts.clients.map((c) => ({
      client_id: c.client_id,
      client_secret: c.client_secret,
      redirect_uris: c.redirect_uris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    })),
    jwks: { keys: [signingKey()] },
    adapter: memoryAdapterFactory(),
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    // Released claims per scope; groups ride along with profile and on their own scope.
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username', 'groups'],
      groups: ['groups'],
    },
    scopes: ['openid', 'offline_access', 'profile', 'email', 'groups'],
    conformIdTokenClaims: opts.conformIdTokenClaims ?? false,
    pkce: { required: () => true },
    // Explicit lifetimes (seconds) instead of the defaults the provider nags about.
    ttl: { AuthorizationCode: 60, AccessToken: 600, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
    clientBasedCORS: () => false,
    features: {
      devInteractions: { enabled: false },
      userinfo: { enabled: true },
    },
    interactions: {
      url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}`,
    },
    async findAccount(_ctx: unknown, sub: string) {
      if (!Object.hasOwn(opts.accounts, sub)) return undefined;
      return { accountId: sub, claims: async () => ({ ...opts.accounts[sub], sub }) };
    },
  });
  providerHandler = provider.callback();

  const sockets = new Set<Socket>();
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  let stopped = false;
  return {
    issuer,
    port,
    followToCallback: (startUrl, follow) => followToCallback(startUrl, follow),
    async stop() {
      if (stopped) return;
      stopped = true;
      // Keep-alive sockets from fetch would hold close() open; end them.
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Cookie jar just big enough for the IdP's cookies: name, value, path; expiry means delete. */
class CookieJar {
  private cookies = new Map<string, { name: string; value: string; path: string }>();

  store(setCookies: string[]): void {
    for (const header of setCookies) {
      const [pair, ...attrs] = header.split(';');
      const eq = pair!.indexOf('=');
      if (eq < 1) continue;
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      let path = '/';
      let expired = false;
      for (const attr of attrs) {
        const [k, v = ''] = attr.split('=');
        const key = k!.trim().toLowerCase();
        if (key === 'path') path = v.trim() || '/';
        if (key === 'expires' && Date.parse(v) <= Date.now()) expired = true;
        if (key === 'max-age' && Number(v) <= 0) expired = true;
      }
      const id = `${name};${path}`;
      if (expired || value === '') this.cookies.delete(id);
      else this.cookies.set(id, { name, value, path });
    }
  }

  header(url: URL): string {
    return [...this.cookies.values()]
      .filter((c) => url.pathname === c.path || url.pathname.startsWith(c.path.endsWith('/') ? c.path : `${c.path}/`))
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
  }
}

/**
 * Plays the browser: follows the IdP's redirects from the authorization URL, logs in as
 * `opts.login` (or aborts), grants consent, and returns the first redirect that lands on the
 * client's redirect_uri (taken from the authorization URL) without requesting it.
 */
export async function followToCallback(startUrl: string, opts: FollowOptions): Promise<URL> {
  const start = new URL(startUrl);
  const redirectUri = start.searchParams.get('redirect_uri');
  if (!redirectUri) throw new Error('authorization URL has no redirect_uri');
  const jar = new CookieJar();
  let next: URL = start;
  let method: 'GET' | 'POST' = 'GET';
  let body: URLSearchParams | undefined;

  for (let hop = 0; hop < 20; hop += 1) {
    if (method === 'GET' && `${next.origin}${next.pathname}` === redirectUri) return next;
    const headers: Record<string, string> = { accept: 'application/json, text/html' };
    const cookie = jar.header(next);
    if (cookie) headers.cookie = cookie;
    const res = await fetch(next, { method, headers, body, redirect: 'manual', signal: AbortSignal.timeout(5000) });
    jar.store(res.headers.getSetCookie());
    method = 'GET';
    body = undefined;

    const location = res.headers.get('location');
    if (res.status >= 300 && res.status < 400 && location) {
      await res.arrayBuffer();
      next = new URL(location, next);
      continue;
    }
    if (res.status !== 200 || !next.pathname.startsWith('/interaction/')) {
      const text = (await res.text()).slice(0, 300);
      throw new Error(`IdP answered ${res.status} at ${next.pathname}: ${text}`);
    }
    const prompt = (await res.json()) as { uid: string; prompt: string };
    const base = new URL(`/interaction/${prompt.uid}`, next);
    method = 'POST';
    if (opts.deny) {
      next = new URL(`${base.pathname}/abort`, base);
    } else if (prompt.prompt === 'login') {
      next = new URL(`${base.pathname}/login`, base);
      body = new URLSearchParams({ login: opts.login });
    } else if (prompt.prompt === 'consent') {
      next = new URL(`${base.pathname}/confirm`, base);
    } else {
      throw new Error(`unexpected IdP prompt ${prompt.prompt}`);
    }
  }
  throw new Error('too many redirects before reaching the redirect_uri');
}
