import http from 'node:http';
import { expect } from 'chai';
import WebSocket from 'ws';
import { GatewayClient, type SocketFactory } from '../../src/client/gateway-client.js';
import { eventually } from '../plugins/helpers.js';
import { ADMIN, adminAuth, type TestService } from './service.js';

/**
 * What a shipped proxy config must pass through to the service, asked through the proxy at
 * `origin`: used by test/deploy/nginx.test.ts and test/deploy/caddy.test.ts.
 */

/** The administrator signs in through the proxy: the session token. */
export async function loginThrough(origin: string): Promise<string> {
  const login = await fetch(`${origin}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', origin },
    body: JSON.stringify({ username: ADMIN.username, password: ADMIN.password }),
  });
  expect(login.status).to.equal(200);
  return ((await login.json()) as { token: string }).token;
}

/** A gateway client connecting through the proxy with `token`. */
export function clientThrough(origin: string, token: string): GatewayClient {
  return new GatewayClient({
    url: `${origin.replace('http', 'ws')}/ws`,
    WebSocket: WebSocket as unknown as SocketFactory,
    headers: { Authorization: `Bearer ${token}` },
  });
}

/** A login, `calls` API calls, a ws connection and a push titled `title`, all through the proxy. */
export async function loginCallsAndPushThrough(origin: string, title: string, calls = 1): Promise<void> {
  const token = await loginThrough(origin);
  for (let i = 0; i < calls; i++) {
    const me = await fetch(`${origin}/api/me`, { headers: { authorization: `Bearer ${token}` } });
    expect(((await me.json()) as { username: string }).username).to.equal(ADMIN.username);
  }
  const client = clientThrough(origin, token);
  try {
    await client.ready();
    const got: string[] = [];
    client.on('notification', ({ payload }) => got.push(payload.title!));
    const res = await fetch(`${origin}/api/notifications`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: adminAuth() },
      body: JSON.stringify({ title, message: 'm' }),
    });
    expect(res.status).to.equal(202);
    await eventually(() => expect(got).to.deep.equal([title]), 2000);
  } finally {
    client.close();
  }
}

/**
 * Failed logins through the proxy with an X-Forwarded-For the client wrote: the service records
 * the address the proxy saw (127.0.0.1), never the client's claim.
 */
export async function forwardedForIsTheProxys(origin: string, svc: TestService): Promise<void> {
  for (let i = 0; i < 5; i++) {
    const r = await fetch(`${origin}/api/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin, 'x-forwarded-for': '203.0.113.9' },
      body: JSON.stringify({ username: ADMIN.username, password: `wrong-${i}` }),
    });
    expect(r.status).to.equal(401);
  }
  const rows = await svc.service.db('login_failures').where({ username: ADMIN.username }).select('ip');
  expect(rows.map((r: { ip: string }) => r.ip))
    .to.include('127.0.0.1')
    .and.not.include('203.0.113.9');
}

/** A GET sent from `localAddress` (another address of this machine stands for another client). */
function getFrom(url: string, localAddress: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { localAddress, agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

/** The proxy answers the unauthenticated /metrics to this machine (127.0.0.1) only, 403 to another address; the rest stays open. */
export async function metricsOnlyToThisMachine(origin: string): Promise<void> {
  const from = async (localAddress: string) => {
    const res = await getFrom(`${origin}/metrics`, localAddress);
    return { status: res.status, metrics: /^# HELP /m.test(res.body) };
  };
  expect(await from('127.0.0.1')).to.deep.equal({ status: 200, metrics: true });
  expect(await from('127.0.0.2')).to.deep.equal({ status: 403, metrics: false });
  expect((await getFrom(`${origin}/healthz`, '127.0.0.2')).status).to.equal(200);
}
