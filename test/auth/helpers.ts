import http from 'node:http';
import request from 'supertest';
import { Secret, TOTP } from 'otpauth';
import { adminAuth, type TestService } from '../support/service.js';

/** The origin every test service accepts (SERVICE_PUBLIC_URL of the harness). */
export const ORIGIN = 'http://localhost:8080';

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: any;
}

/**
 * One JSON request from a chosen local source address (the whole 127.0.0.0/8 is loopback on
 * Linux), so a test can be "another client IP" without trusting X-Forwarded-For.
 */
export function requestFrom(
  baseUrl: string,
  localAddress: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<RawResponse> {
  const url = new URL(path, baseUrl);
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method,
        localAddress,
        headers: { ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}), ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = text ? JSON.parse(text) : null;
          } catch {
            /* not JSON */
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: parsed });
        });
      },
    );
    req.on('error', reject);
    if (payload) req.write(payload);
    req.end();
  });
}

/** name=value pairs of the Set-Cookie headers of a response (expired ones with value ''). */
export function setCookies(res: { headers: Record<string, any> }): Record<string, string> {
  const out: Record<string, string> = {};
  const list: string[] = res.headers['set-cookie'] ?? [];
  for (const c of list) {
    const pair = c.split(';')[0]!;
    const i = pair.indexOf('=');
    out[pair.slice(0, i)] = pair.slice(i + 1);
  }
  return out;
}

/** The Set-Cookie line of one cookie, for checking its attributes. */
export function setCookieLine(res: { headers: Record<string, any> }, name: string): string | undefined {
  return (res.headers['set-cookie'] as string[] | undefined)?.find((c) => c.startsWith(`${name}=`));
}

/** Creates a local user through the admin API; returns its id. */
export async function createUser(url: string, body: Record<string, unknown>): Promise<string> {
  const res = await request(url).post('/api/users').set('Authorization', adminAuth()).send(body);
  if (res.status !== 201) throw new Error(`creating user ${String(body.username)} failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.id as string;
}

export async function getUser(url: string, id: string): Promise<any> {
  const res = await request(url).get(`/api/users/${id}`).set('Authorization', adminAuth());
  if (res.status !== 200) throw new Error(`reading user ${id} failed: ${res.status}`);
  return res.body;
}

export async function userNamed(url: string, username: string): Promise<any | undefined> {
  const res = await request(url).get('/api/users').set('Authorization', adminAuth());
  const list: any[] = Array.isArray(res.body) ? res.body : res.body.users;
  const found = list.find((u) => u.username === username);
  return found ? getUser(url, found.id) : undefined;
}

export function patchAuthSettings(url: string, patch: Record<string, unknown>) {
  return request(url).patch('/api/settings/auth').set('Authorization', adminAuth()).send(patch);
}

export { unusedPort } from '../support/ports.js';

/** An authenticator app's time step (RFC 6238 defaults, as the service uses them). */
export const TOTP_STEP_MS = 30_000;

/** The code an authenticator app shows for `secret` at `at` (ms), computed from the secret the API returned. */
export function totpCode(secret: string, at = Date.now()): string {
  return new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: TOTP_STEP_MS / 1000 }).generate({ timestamp: at });
}

/**
 * The code of the step before the current one (within the one step of drift the service allows,
 * and leaving the current step's code unused). When less than `margin` ms is left of the current
 * step it waits for the next one first: a code made just before a step ends would be two steps
 * old by the time a slow request reaches the service.
 */
export async function previousStepCode(secret: string, margin = 5_000): Promise<string> {
  const left = TOTP_STEP_MS - (Date.now() % TOTP_STEP_MS);
  if (left < margin) await new Promise((r) => setTimeout(r, left + 50));
  return totpCode(secret, Date.now() - TOTP_STEP_MS);
}

/**
 * An account enrols an authenticator app from a password session, then signs in with both
 * factors: that session's token, the app's secret and the recovery codes.
 */
export async function signInWithAuthenticatorApp(
  url: string,
  username: string,
  password: string,
): Promise<{ token: string; secret: string; recovery: string[] }> {
  const first = await request(url).post('/api/auth/login').send({ username, password }).expect(200);
  const bearer = `Bearer ${first.body.token}`;
  const secret: string = (await request(url).post('/api/me/mfa/totp').set('Authorization', bearer).expect(200)).body.secret;
  const confirmed = await request(url)
    .post('/api/me/mfa/totp/confirm')
    .set('Authorization', bearer)
    .send({ code: await previousStepCode(secret) })
    .expect(200);
  const again = await request(url).post('/api/auth/login').send({ username, password }).expect(200);
  const done = await request(url)
    .post('/api/auth/login/mfa')
    .send({ mfa_token: again.body.mfa_token, code: totpCode(secret) })
    .expect(200);
  return { token: done.body.token, secret, recovery: confirmed.body.recovery_codes };
}

/** The session's last verification of its second factor moved out of the step-up window, as 16 minutes passing would. */
export async function stepUpExpired(svc: TestService, token: string): Promise<void> {
  const keys = (await request(svc.url).get('/api/me/api-keys').set('Authorization', `Bearer ${token}`).expect(200)).body.keys as Array<{
    id: string;
    current: boolean;
  }>;
  await svc.service
    .db('api_keys')
    .where({ id: keys.find((k) => k.current)!.id })
    .update({ mfa_at: Date.now() - 16 * 60_000 });
  svc.service.bus.emit('iam:permissions_changed', { scope: 'all' });
}
