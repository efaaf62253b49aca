import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import { adminAuth, basic, startService, SYSTEM_KEY, type TestService } from '../support/service.js';

export interface Frame {
  event: string;
  payload: any;
  ref?: string;
}

export interface ConnectOptions {
  headers?: Record<string, string>;
  origin?: string;
  query?: string;
  autoPong?: boolean;
}

export const wsUrl = (svc: TestService, query = '') => svc.url.replace(/^http/, 'ws') + '/ws' + (query ? `?${query}` : '');

/** A real `ws` client that records every frame it receives. */
export class WsClient {
  readonly frames: Frame[] = [];
  readonly closed: Promise<{ code: number; reason: string }>;
  private waiters: (() => void)[] = [];

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data, isBinary) => {
      if (!isBinary) this.frames.push(JSON.parse(data.toString()));
      for (const w of this.waiters.splice(0)) w();
    });
    this.closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    ws.on('error', () => undefined);
  }

  /** Opens a connection and waits for the welcome frame. */
  static async connect(svc: TestService, opts: ConnectOptions = {}): Promise<WsClient> {
    const ws = new WebSocket(wsUrl(svc, opts.query), { headers: opts.headers, origin: opts.origin, autoPong: opts.autoPong ?? true });
    const client = new WsClient(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused with ${res.statusCode}`)));
      ws.once('error', reject);
    });
    await client.next('gateway:welcome');
    return client;
  }

  static basic(svc: TestService, username: string, password: string, extra: Omit<ConnectOptions, 'headers'> = {}) {
    return WsClient.connect(svc, { ...extra, headers: { Authorization: basic(username, password) } });
  }

  /** The close, which must come within `ms` (a connection sweep later is not the close asked for). */
  async closedWithin(ms: number): Promise<{ code: number; reason: string }> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`the connection was still open after ${ms} ms`)), ms)));
    try {
      return await Promise.race([this.closed, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** All frames of `event` received so far (optionally filtered). */
  all(event: string, match: (f: Frame) => boolean = () => true): Frame[] {
    return this.frames.filter((f) => f.event === event && match(f));
  }

  /** The first frame of `event` that matches, waiting for it to arrive. */
  async next(event: string, match: (f: Frame) => boolean = () => true, ms = 5000): Promise<Frame> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.frames.find((f) => f.event === event && match(f));
      if (found) return found;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${event} frame within ${ms} ms; got ${this.frames.map((f) => f.event).join(', ')}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  send(frame: unknown): void {
    this.ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  }

  /** Sends a ping frame and waits for its pong: every earlier frame has been handled by then. */
  async roundTrip(): Promise<void> {
    const ref = `rt-${Math.random().toString(36).slice(2)}`;
    this.send({ event: 'gateway:ping', ref });
    await this.next('gateway:pong', (f) => f.ref === ref);
  }

  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    this.ws.close();
    const timer = setTimeout(() => this.ws.terminate(), 2000);
    await this.closed;
    clearTimeout(timer);
  }
}

/** The HTTP status of a refused upgrade (fails when the upgrade succeeds). */
export async function refusedStatus(svc: TestService, opts: ConnectOptions = {}): Promise<number> {
  return (await refusal(svc, opts)).status;
}

/** The answer to an upgrade that must be refused: its status and the error body's message. */
export function refusal(svc: TestService, opts: ConnectOptions = {}): Promise<{ status: number; message: string | undefined }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl(svc, opts.query), { headers: opts.headers, origin: opts.origin });
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => {
        let message: string | undefined;
        try {
          message = (JSON.parse(body) as { error?: { message?: string } }).error?.message;
        } catch {
          message = undefined;
        }
        resolve({ status: res.statusCode ?? 0, message });
        ws.terminate();
      });
    });
    ws.once('open', () => {
      ws.terminate();
      reject(new Error('the upgrade was accepted'));
    });
    ws.once('error', (err) => reject(err));
  });
}

export const api = (svc: TestService) => request(svc.url);

export interface TestUser {
  id: string;
  username: string;
  password: string;
  auth: string;
}

/** A user created through the API (as admin). */
export async function createUser(svc: TestService, username: string, groups: string[] = ['INT_USER']): Promise<TestUser> {
  const password = `${username}-password-123`;
  const res = await api(svc).post('/api/users').set('Authorization', adminAuth()).send({ username, password, groups });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
  return { id: res.body.id, username, password, auth: basic(username, password) };
}

export async function createGroup(svc: TestService, name: string, permissions: string[]): Promise<void> {
  const res = await api(svc).post('/api/groups').set('Authorization', adminAuth()).send({ name, permissions });
  expect(res.status, JSON.stringify(res.body)).to.equal(201);
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * One service for a suite of ws tests, with users alice, bob and sender (who may send targeted
 * notifications), and a `connect` whose connections close after each test.
 */
export function gatewaySuite() {
  const suite = {
    svc: undefined as unknown as TestService,
    alice: undefined as unknown as TestUser,
    bob: undefined as unknown as TestUser,
    sender: undefined as unknown as TestUser,
    open: [] as WsClient[],
    async connect(...args: Parameters<typeof WsClient.connect>) {
      const c = await WsClient.connect(...args);
      suite.open.push(c);
      return c;
    },
    asUser: (u: TestUser, extra: { origin?: string } = {}) => suite.connect(suite.svc, { ...extra, headers: { Authorization: u.auth } }),
    asAdmin: () => suite.connect(suite.svc, { headers: { Authorization: adminAuth() } }),
  };
  before(async () => {
    // many connections of one user (fan-out): above the default per-user cap
    suite.svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY, SERVICE_WS_MAX_CONNECTIONS_PER_USER: '400' } });
    suite.alice = await createUser(suite.svc, 'alice');
    suite.bob = await createUser(suite.svc, 'bob');
    await createGroup(suite.svc, 'NOTIFY_SENDERS', ['feature:notifications.send']);
    suite.sender = await createUser(suite.svc, 'sender', ['INT_USER', 'NOTIFY_SENDERS']);
  });
  afterEach(async () => {
    await Promise.all(suite.open.splice(0).map((c) => c.close()));
  });
  after(async () => {
    await suite.svc?.destroy();
  });
  return suite;
}
