import { expect } from 'chai';
import { execFileSync, spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freshDatabase, testEnv, adminAuth, startService, type TestDb, type TestService } from '../support/service.js';
import { DomainError } from '../../src/errors.js';
import { capturingLogger, eventually } from '../sockets/helpers.js';
import { createDb } from '../../src/db/knex.js';
import { READY_TIMEOUT_MS, serviceCommand, spawnService, type ServiceProcess } from '../support/process.js';
import { LISTEN_BACKLOG, STOP_GRACE_MS, STOP_IDLE_MS } from '../../src/http/drain.js';

/** Resolves once nothing listens on the port any more: the stop has begun. */
async function refusesConnections(port: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const refused = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(false);
      });
      s.once('error', () => resolve(true));
    });
    if (refused) return;
    if (Date.now() > deadline) throw new Error(`port ${port} still accepts connections 10 s after SIGTERM`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface Exchange {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** the request went out on a connection the agent already had */
  reused: boolean;
  localPort: number;
}

function exchange(agent: http.Agent, url: string, method: string, headers: Record<string, string> = {}, body?: string): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent, headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) } });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text, reused: req.reusedSocket, localPort: req.socket!.localPort! }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * A service of its own (data dir, database) with one keep-alive connection of `agent` to it,
 * idle in the agent's pool after a first GET (`first`), as a balancer's is between requests;
 * all of it gone after `test`.
 */
async function withIdleConnection(test: (sides: { svc: ServiceProcess; agent: http.Agent; first: Exchange }) => Promise<void>): Promise<void> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-idle-'));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let db: TestDb | undefined;
  let svc: ServiceProcess | undefined;
  try {
    db = await freshDatabase();
    svc = await spawnService({ dataDir, databaseUrl: db.url });
    const first = await exchange(agent, `${svc.url}/api/me`, 'GET', { authorization: adminAuth() });
    expect(first.status).to.equal(200);
    expect(first.headers.connection).to.equal('keep-alive');
    await test({ svc, agent, first });
  } finally {
    agent.destroy();
    await svc?.kill('SIGKILL');
    await db?.drop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

describe('graceful shutdown', () => {
  it('SIGTERM stops accepting, answers the request in flight and exits 0', async function () {
    this.timeout(READY_TIMEOUT_MS + 30_000);
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-term-'));
    let db: TestDb | undefined;
    let child: ReturnType<typeof spawn> | undefined;
    let exited: Promise<number | null> = Promise.resolve(null);
    let out = '';
    try {
      db = await freshDatabase();
      const env = { ...process.env, ...testEnv(dataDir, db.url, { SERVICE_LOG_LEVEL: 'info' }) };
      const [node, ...args] = serviceCommand('main');
      child = spawn(node!, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
      exited = new Promise<number | null>((resolve) => child!.on('exit', (code) => resolve(code)));
      const port = await new Promise<number>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`service did not get ready within ${READY_TIMEOUT_MS / 1000} s: ${out}`)), READY_TIMEOUT_MS);
        child!.stdout!.on('data', (d) => {
          out += d;
          const listening = /"port":(\d+),[^}]*"msg":"listening"/.exec(out);
          if (listening && out.includes('"msg":"ready"')) {
            clearTimeout(t);
            resolve(Number(listening[1]));
          }
        });
      });
      // a request whose body is still arriving when SIGTERM lands
      const body = JSON.stringify({ label: 'in-flight' });
      const sock = net.connect(port, '127.0.0.1');
      await new Promise((r) => sock.once('connect', r));
      let response = '';
      sock.on('data', (d) => (response += d));
      const closed = new Promise((r) => sock.once('close', r));
      sock.write(
        `POST /api/me/api-keys HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${adminAuth()}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n` +
          body.slice(0, 5),
      );
      await new Promise((r) => setTimeout(r, 200));
      child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      // new connections are refused while the in-flight one is finished
      const refused = await new Promise<boolean>((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        s.once('connect', () => {
          s.destroy();
          resolve(false);
        });
        s.once('error', () => resolve(true));
      });
      expect(refused).to.equal(true);
      sock.write(body.slice(5));
      await closed;
      expect(response).to.match(/^HTTP\/1\.1 201/);
      expect(response).to.contain('"label":"in-flight"');
      // answered while draining: the connection closes after it
      expect(response).to.match(/\r\nConnection: close\r\n/i);
      const code = await exited;
      expect(code).to.equal(0);
      expect(out).to.contain('"msg":"stopped"');
    } finally {
      // gone before its data dir and database are
      child?.kill('SIGKILL');
      await exited;
      await db?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('SIGTERM: a POST on a keep-alive connection that was idle at that moment is answered, with Connection: close', async function () {
    // what a balancer does in a rolling restart: it writes a request onto one of its idle
    // connections to the instance just as the instance is told to stop
    this.timeout(READY_TIMEOUT_MS + 30_000);
    await withIdleConnection(async ({ svc, agent, first }) => {
      const exited = svc.kill('SIGTERM');
      await refusesConnections(svc.port);
      const body = JSON.stringify({ label: 'sent-while-draining' });
      const late = await exchange(agent, `${svc.url}/api/me/api-keys`, 'POST', { authorization: adminAuth(), 'content-type': 'application/json' }, body);
      expect(late.reused, 'the POST went out on the idle connection').to.equal(true);
      expect(late.localPort).to.equal(first.localPort);
      expect(late.status, late.body).to.equal(201);
      expect(late.body).to.contain('"label":"sent-while-draining"');
      // the peer is told to move on: the instance closes the connection after this answer
      expect(late.headers.connection).to.equal('close');
      const { code } = await exited;
      expect(code, svc.output().slice(-2000)).to.equal(0);
      expect(svc.output()).to.contain('"msg":"stopped"');
    });
  });

  it('SIGTERM: a connection still idle when a balancer would have closed its own (a client of its own) is closed then, not at the grace', async function () {
    this.timeout(READY_TIMEOUT_MS + 30_000);
    await withIdleConnection(async ({ svc, agent }) => {
      const [socket] = Object.values(agent.freeSockets).flat();
      const closed = new Promise<number>((resolve) => socket!.once('close', () => resolve(performance.now())));
      const signalled = performance.now();
      const exited = svc.kill('SIGTERM');
      // left to its peer as long as a balancer keeps one idle, then closed (the grace's cut
      // comes no sooner than STOP_GRACE_MS); the stop then ends
      const after = (await closed) - signalled;
      expect(after)
        .to.be.at.least(STOP_IDLE_MS - 100)
        .and.below(STOP_GRACE_MS);
      expect((await exited).code, svc.output().slice(-2000)).to.equal(0);
    });
  });

  it('SIGTERM sent to `npm start` reaches the server: it drains, and npm and the server exit 0', async function () {
    this.timeout(READY_TIMEOUT_MS + 30_000);
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-npm-'));
    let db: TestDb | undefined;
    let svc: ServiceProcess | undefined;
    try {
      db = await freshDatabase();
      // the build that `npm start` runs (npm ci makes it); what a service manager stops
      svc = await spawnService({ dataDir, databaseUrl: db.url, command: ['npm', 'start', '--silent'] });
      const { code } = await svc.kill('SIGTERM');
      expect(code, svc.output().slice(-2000)).to.equal(0);
      expect(svc.output()).to.contain('"msg":"stopped"');
      // nothing is left listening: the server was not orphaned
      const gone = await fetch(`${svc.url}/healthz`).then(
        () => false,
        () => true,
      );
      expect(gone).to.equal(true);
    } finally {
      await svc?.kill('SIGKILL');
      await db?.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

/** Reads one HTTP answer from a raw socket, up to its end (the service closes the connection after it while stopping). */
function answerOf(sock: net.Socket): Promise<{ head: string; body: string }> {
  return new Promise((resolve, reject) => {
    let text = '';
    sock.setEncoding('utf8');
    sock.on('data', (d: string) => (text += d));
    sock.once('error', reject);
    sock.once('close', () => {
      const at = text.indexOf('\r\n\r\n');
      if (at < 0) reject(new Error(`the connection closed without an answer: ${JSON.stringify(text)}`));
      else resolve({ head: text.slice(0, at), body: text.slice(at + 4) });
    });
  });
}

/**
 * Writes `request` on `sock` and holds the event loop until `until` (performance.now()), as a
 * loaded instance's is held: the service's side cannot read the request meanwhile, and the next
 * turn of the loop runs the timers then due before it reads its sockets.
 */
function sendWhileHeld(sock: net.Socket, request: string, until: number): Promise<void> {
  return new Promise((resolve) =>
    setImmediate(() => {
      sock.write(request);
      while (performance.now() < until);
      resolve();
    }),
  );
}

/** A WebSocket upgrade of /ws as the admin. */
const wsUpgrade = () =>
  `GET /ws HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${adminAuth()}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`;

const notifyRequest = (body: string) =>
  `POST /api/notifications HTTP/1.1\r\nHost: localhost\r\nAuthorization: ${adminAuth()}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;

describe('a stop on an instance running late (its event loop held up by load)', function () {
  this.timeout(30_000);
  let svc: TestService | undefined;
  afterEach(async () => svc?.destroy());

  /** rows of that title, read after the stop (which closes the service's own database handle) */
  const stored = async (title: string) => {
    const db = createDb({ databaseUrl: svc!.databaseUrl, dataDir: svc!.dataDir });
    try {
      return Number(((await db('notifications').where({ title }).count({ n: '*' }).first()) as { n: number }).n);
    } finally {
      await db.destroy();
    }
  };

  /** A keep-alive connection that has served one request and is now idle, as a balancer's is between requests. */
  async function idleConnection(): Promise<net.Socket> {
    const sock = net.connect(Number(new URL(svc!.url).port), '127.0.0.1');
    await new Promise((r) => sock.once('connect', r));
    sock.write('GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n');
    let text = '';
    await new Promise<void>((resolve) => {
      const read = (d: Buffer) => {
        text += d.toString('latin1');
        const at = text.indexOf('\r\n\r\n');
        const length = /\r\ncontent-length: (\d+)/i.exec(text);
        if (at < 0 || !length || text.length < at + 4 + Number(length[1])) return;
        sock.off('data', read);
        resolve();
      };
      sock.on('data', read);
    });
    return sock;
  }

  /**
   * In one callback that `at` schedules: a connection is opened and a notification titled `title`
   * written onto it, then the stop begins. Answers the connection's answer and the stop.
   */
  async function postAsStopBegins(title: string, at: (turn: () => void) => void) {
    const body = JSON.stringify({ title, message: 'm' });
    let answer!: Promise<{ head: string; body: string }>;
    let stopped!: Promise<void>;
    await new Promise<void>((resolve) =>
      at(() => {
        const sock = net.connect(Number(new URL(svc!.url).port), '127.0.0.1');
        answer = answerOf(sock);
        sock.write(notifyRequest(body) + body);
        stopped = svc!.service.stop({ graceMs: 5000, idleMs: 5000 });
        resolve();
      }),
    );
    return { answer, stopped };
  }

  it("a connection still in the listening socket's backlog when the stop begins is accepted and answered, not reset", async () => {
    svc = await startService();
    // in one turn of the loop, as on a loop running late: a balancer's connection completes its
    // handshake (loopback: within connect()) and waits to be accepted; then the stop begins
    const { answer, stopped } = await postAsStopBegins('in the backlog', (turn) => setImmediate(turn));
    const { head, body: text } = await answer;
    expect(head).to.match(/^HTTP\/1\.1 202 /);
    expect(head).to.match(/\r\nConnection: close/i);
    expect(JSON.parse(text).seq).to.be.a('number');
    await stopped;
    expect(await stored('in the backlog')).to.equal(1);
  });

  it("listens with the kernel's longest queue of connections waiting to be accepted, not Node's 511", async () => {
    svc = await startService();
    // ss shows a listening socket's queue limit as its Send-Q
    const port = new URL(svc.url).port;
    const line = execFileSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' }).trim();
    const somaxconn = Number(fs.readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
    expect(Number(line.split(/\s+/)[2]), line).to.equal(Math.min(somaxconn, LISTEN_BACKLOG));
    expect(Math.min(somaxconn, LISTEN_BACKLOG)).to.be.above(511);
  });

  it('a connection that completes its handshake in the poll phase where the stop begins (as a SIGTERM does) is accepted and answered, not reset', async () => {
    svc = await startService();
    // an I/O callback runs in the loop's poll phase, as a signal's handler does; the connection is
    // queued in the listening socket's backlog after this phase's accepts, before its check phase
    const { answer, stopped } = await postAsStopBegins('in the poll phase', (turn) => fs.stat(os.tmpdir(), turn));
    const { head, body: text } = await answer;
    expect(head).to.match(/^HTTP\/1\.1 202 /);
    expect(JSON.parse(text).seq).to.be.a('number');
    await stopped;
    expect(await stored('in the poll phase')).to.equal(1);
  });

  it('keeps listening while its WebSocket connections close: runs a request that comes meanwhile, refuses an upgrade (503) and closes it though its peer stays, then stops', async () => {
    svc = await startService();
    const port = Number(new URL(svc.url).port);
    // a WebSocket client that never answers the close handshake: the gateway waits for it (1 s)
    const ws = net.connect(port, '127.0.0.1');
    ws.on('error', () => undefined);
    const upgraded = new Promise<string>((resolve) => {
      let text = '';
      ws.on('data', (d: Buffer) => {
        text += d.toString('latin1');
        if (text.includes('\r\n\r\n')) resolve(text);
      });
    });
    ws.write(wsUpgrade());
    expect(await upgraded).to.match(/^HTTP\/1\.1 101 /);
    const wsGone = new Promise((r) => ws.once('close', r));
    const started = performance.now();
    const stopped = svc.service.stop({ graceMs: 5000, idleMs: 5000 });
    await new Promise((r) => setTimeout(r, 100));

    // both at once, while the gateway waits for its client
    const sock = net.connect(port, '127.0.0.1');
    const answer = answerOf(sock);
    const body = JSON.stringify({ title: 'while the WebSockets close', message: 'm' });
    sock.write(notifyRequest(body) + body);
    // a peer that keeps its side open after the answer (allowHalfOpen): the service closes it anyway
    const late = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let refused = '';
    late.on('error', () => undefined);
    late.setEncoding('utf8');
    late.on('data', (d: string) => (refused += d));
    const lateAnswered = new Promise((r) => late.once('end', r));
    late.write(wsUpgrade());

    const { head, body: text } = await answer;
    expect(head).to.match(/^HTTP\/1\.1 202 /);
    expect(head).to.match(/\r\nConnection: close/i);
    expect(JSON.parse(text).seq).to.be.a('number');
    await lateAnswered;
    expect(refused).to.match(/^HTTP\/1\.1 503 /);
    expect(refused).to.match(/\r\nRetry-After: 1/i);

    await wsGone;
    await refusesConnections(port);
    // not held past the grace (5 s) by the refused upgrade's connection, its peer's side still open
    const ended = await Promise.race([stopped.then(() => 'stopped'), new Promise((r) => setTimeout(() => r('still draining'), 4000))]);
    late.destroy();
    expect(ended).to.equal('stopped');
    expect(performance.now() - started).to.be.below(4000);
    expect(await stored('while the WebSockets close')).to.equal(1);
  });

  it('an upgrade still being authenticated when the stop closes the gateway is answered 503 at once, not when its authentication ends', async () => {
    const logs = capturingLogger('warn');
    svc = await startService({ logger: logs.logger });
    const auth = svc.service.auth.authenticator as unknown as { fromHeaders: (...args: unknown[]) => Promise<unknown> };
    const fromHeaders = auth.fromHeaders.bind(auth);
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    // the upgrade's authentication held until the stop has begun
    auth.fromHeaders = async (...args) => (entered(), await held, fromHeaders(...args));
    const sock = net.connect(Number(new URL(svc.url).port), '127.0.0.1');
    const answer = answerOf(sock);
    sock.write(wsUpgrade());
    await inside;
    const started = performance.now();
    const stopped = svc.service.stop({ graceMs: 5000, idleMs: 5000 });
    // answered while its authentication still waits (a directory that does not answer, say)
    const { head } = await answer;
    expect(head).to.match(/^HTTP\/1\.1 503 /);
    expect(head).to.match(/\r\nRetry-After: 1/i);
    await stopped;
    expect(performance.now() - started).to.be.below(4000);
    // its authentication ending afterwards writes nothing more (a write after the answer's end would be an error)
    const logged = logs.lines.length;
    release();
    await new Promise((r) => setTimeout(r, 50));
    expect(logs.lines.slice(logged), logs.text()).to.deep.equal([]);
  });

  it('a second stop waits for the first to finish instead of answering before it is done', async () => {
    svc = await startService();
    let firstDone = false;
    void svc.service.stop({ graceMs: 5000, idleMs: 5000 }).then(() => (firstDone = true));
    await svc.service.stop();
    expect(firstDone).to.equal(true);
  });

  it('a WebSocket connection refused as one too many, whose peer never answers the close, does not hold the stop', async () => {
    svc = await startService({ env: { SERVICE_WS_MAX_CONNECTIONS_PER_USER: '1' } });
    const port = Number(new URL(svc.url).port);
    /** an upgraded connection that reads what comes and never answers a close */
    const upgrade = async () => {
      const sock = net.connect(port, '127.0.0.1');
      sock.on('error', () => undefined);
      let text = '';
      const switched = new Promise<void>((resolve) =>
        sock.on('data', (d: Buffer) => {
          text += d.toString('latin1');
          if (text.includes('\r\n\r\n')) resolve();
        }),
      );
      sock.write(wsUpgrade());
      await switched;
      expect(text).to.match(/^HTTP\/1\.1 101 /);
      return { sock, text: () => text, gone: new Promise((r) => sock.once('close', r)) };
    };
    const first = await upgrade();
    const second = await upgrade();
    // the second is told why and closed (1008); it never answers, so only the service can end it
    await eventually(() => second.text().includes('too_many_connections'));
    const started = performance.now();
    await svc.service.stop({ graceMs: 5000, idleMs: 5000 });
    expect(performance.now() - started).to.be.below(3000);
    await Promise.all([first.gone, second.gone]);
  });

  it('a request that arrived unread on an idle connection when the idle timer came due is answered, not reset', async () => {
    svc = await startService();
    const sock = await idleConnection();
    const answer = answerOf(sock);
    const started = performance.now();
    const stopped = svc.service.stop({ graceMs: 5000, idleMs: 300 });
    await new Promise((r) => setTimeout(r, 150));
    const body = JSON.stringify({ title: 'unread at the idle close', message: 'm' });
    // the loop held past the idle close's time: that timer runs before the loop reads the request
    await sendWhileHeld(sock, notifyRequest(body) + body, started + 500);
    const { head, body: text } = await answer;
    expect(head).to.match(/^HTTP\/1\.1 202 /);
    expect(head).to.match(/\r\nConnection: close/i);
    expect(JSON.parse(text).seq).to.be.a('number');
    await stopped;
    expect(await stored('unread at the idle close')).to.equal(1);
  });

  it('a request the event loop had not read when the grace ended is answered 503, not cut', async () => {
    svc = await startService();
    const sock = await idleConnection();
    const answer = answerOf(sock);
    const started = performance.now();
    const stopped = svc.service.stop({ graceMs: 300, idleMs: 300, refuseMs: 3000 });
    await new Promise((r) => setTimeout(r, 150));
    const body = JSON.stringify({ title: 'unread at the grace end', message: 'm' });
    // the loop held past the grace's end (as by a reconnection storm): its timer runs before the
    // loop reads the request that arrived meanwhile
    await sendWhileHeld(sock, notifyRequest(body) + body, started + 500);
    const { head, body: text } = await answer;
    expect(head).to.match(/^HTTP\/1\.1 503 /);
    expect(head).to.match(/\r\nConnection: close/i);
    expect(head).to.match(/\r\nRetry-After: 1/i);
    expect(JSON.parse(text).error.code).to.equal('unavailable');
    await stopped;
    expect(await stored('unread at the grace end')).to.equal(0);
  });

  it('notifications not yet being written are refused (503), the batch being written commits and is answered', async () => {
    const logs = capturingLogger('info');
    svc = await startService({ logger: logs.logger });
    const notifications = svc.service.notifications.service;
    // a batch held inside its transaction, and a notification queued behind it
    let entered!: () => void;
    const inside = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const writing = notifications.notify('broadcast', { title: 'being written', message: 'm' }, { within: async () => (entered(), held) });
    await inside;
    const queued = notifications.notify('broadcast', { title: 'queued', message: 'm' });
    // and a request whose body is still arriving
    const sock = net.connect(Number(new URL(svc.url).port), '127.0.0.1');
    await new Promise((r) => sock.once('connect', r));
    const answer = answerOf(sock);
    const body = JSON.stringify({ title: 'body late', message: 'm' });
    sock.write(notifyRequest(body) + body.slice(0, 5));
    await new Promise((r) => setTimeout(r, 100));

    const stopped = svc.service.stop({ graceMs: 300, idleMs: 300, refuseMs: 3000 });
    const refused = await queued.then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).to.be.instanceOf(DomainError);
    expect((refused as DomainError).code).to.equal('unavailable');
    // one from the bus (a plugin's teardown, say) is dropped with a warning that says why
    svc.service.bus.emit('system:notify', { title: 'from the bus', message: 'm' });
    await eventually(() => logs.text().includes('notification dropped'));
    const dropped = logs.lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'notification dropped');
    expect(dropped).to.deep.include({ level: 'warn', event: 'system:notify', code: 'unavailable', reason: 'the service is shutting down; try again' });
    release();
    expect((await writing).seq).to.be.a('number');
    sock.write(body.slice(5));
    const { head, body: text } = await answer;
    expect(head).to.match(/^HTTP\/1\.1 503 /);
    expect(JSON.parse(text).error.code).to.equal('unavailable');
    await stopped;
    expect(await stored('being written')).to.equal(1);
    expect(await stored('queued')).to.equal(0);
    expect(await stored('body late')).to.equal(0);
  });
});
