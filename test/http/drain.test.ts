import { expect } from 'chai';
import type http from 'node:http';
import net from 'node:net';
import { drain, drainableServer } from '../../src/http/drain.js';

/** A drainable server answering 200 on a free loopback port; `draining` turns its answers to `Connection: close`. */
async function listening(): Promise<{ server: http.Server; port: number; stopping: { now: boolean } }> {
  const stopping = { now: false };
  const server = drainableServer(
    (_req, res) => res.end('ok'),
    () => stopping.now,
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as net.AddressInfo).port, stopping };
}

/** A client connection to the port, once connected, and when it closed (performance.now()). */
async function connected(port: number): Promise<{ sock: net.Socket; closedAt: Promise<number> }> {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => undefined);
  await new Promise((r) => sock.once('connect', r));
  return { sock, closedAt: new Promise<number>((resolve) => sock.once('close', () => resolve(performance.now()))) };
}

describe('drain (src/http/drain.ts)', () => {
  let server: http.Server | undefined;
  afterEach(() => {
    server?.closeAllConnections();
    server?.close();
  });

  it('keeps listening until what loads the loop has settled, then stops after a turn of the loop that accepted nothing', async () => {
    const s = await listening();
    server = s.server;
    s.stopping.now = true;
    let settle!: () => void;
    const unloaded = new Promise<void>((resolve) => (settle = resolve));
    const drained = drain(s.server, { graceMs: 5000, idleMs: 5000 }, undefined, unloaded);
    await new Promise((r) => setTimeout(r, 100));
    expect(s.server.listening, 'listening while the load is there').to.equal(true);
    settle();
    await Promise.resolve();
    // not in the turn it settled in: what waits in the listening socket's queue is accepted first
    await new Promise((r) => setImmediate(r));
    expect(s.server.listening).to.equal(true);
    await drained;
    expect(s.server.listening).to.equal(false);
  });

  it("accepts every connection waiting in the listening socket's queue before it stops listening (the loop accepts one a turn)", async () => {
    const s = await listening();
    server = s.server;
    const answers: Array<Promise<string>> = [];
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        // fifty connections complete their handshake while the loop is held, as on a loaded instance
        for (let i = 0; i < 50; i++) {
          const sock = net.connect(s.port, '127.0.0.1');
          sock.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
          answers.push(
            new Promise((done) => {
              let text = '';
              sock.on('data', (d: Buffer) => (text += d.toString()));
              sock.on('close', () => done(text));
              sock.on('error', (err) => done(`error: ${err.message}`));
            }),
          );
        }
        setTimeout(() => {
          const until = performance.now() + 200;
          while (performance.now() < until);
          s.stopping.now = true;
          void drain(s.server, { graceMs: 5000, idleMs: 5000 });
          resolve();
        }, 0);
      }),
    );
    const texts = await Promise.all(answers);
    expect(
      texts.filter((t) => !t.startsWith('HTTP/1.1 200')),
      'answers other than 200',
    ).to.deep.equal([]);
    expect(texts.every((t) => /\r\nConnection: close\r\n/i.test(t))).to.equal(true);
  });

  it('stops listening at the grace end when the load never settles', async () => {
    const s = await listening();
    server = s.server;
    s.stopping.now = true;
    let refused = false;
    const started = performance.now();
    await drain(s.server, { graceMs: 300, idleMs: 300, refuseMs: 100 }, () => (refused = true), new Promise<void>(() => undefined));
    expect(refused).to.equal(true);
    expect(s.server.listening).to.equal(false);
    expect(performance.now() - started).to.be.below(2000);
  });

  it('closes a connection that never sent a byte at the idle close, instead of holding the drain to its cut', async () => {
    const s = await listening();
    server = s.server;
    const silent = await connected(s.port);
    // a second's silence before the idle close: not a balancer about to write
    await new Promise((r) => setTimeout(r, 1100));
    s.stopping.now = true;
    const started = performance.now();
    await drain(s.server, { graceMs: 5000, idleMs: 200 });
    const took = performance.now() - started;
    expect(took).to.be.below(2000);
    expect((await silent.closedAt) - started).to.be.below(2000);
  });

  it('closes a connection stalled in its headers a second after the idle close, instead of holding the drain to its cut', async () => {
    const s = await listening();
    server = s.server;
    const stalled = await connected(s.port);
    // one byte and no more: Node counts the connection busy (a request begun), never idle
    stalled.sock.write('G');
    await new Promise((r) => setTimeout(r, 100));
    s.stopping.now = true;
    const started = performance.now();
    await drain(s.server, { graceMs: 5000, idleMs: 200 });
    expect(performance.now() - started).to.be.below(2500);
    expect((await stalled.closedAt) - started).to.be.within(1000, 2500);
  });

  it('does not take a connection accepted after the idle timer came due for a silent one, however long that turn lasts', async () => {
    const s = await listening();
    server = s.server;
    s.stopping.now = true;
    let answer!: Promise<string>;
    // listening until the answer is in (as while WebSocket connections close)
    let settle!: () => void;
    const drained = drain(s.server, { graceMs: 5000, idleMs: 100 }, undefined, new Promise<void>((r) => (settle = r)));
    // the same duration, set after the drain's idle timer: runs just after it, in the same timers phase
    setTimeout(() => {
      const sock = net.connect(s.port, '127.0.0.1');
      sock.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      answer = new Promise((done) => {
        let text = '';
        sock.on('data', (d: Buffer) => (text += d.toString()));
        sock.on('close', () => done(text));
        sock.on('error', (err) => done(`error: ${err.message}`));
      });
      // the poll phase that accepts it then runs 1.2 s of other work before the loop reads it
      s.server.once('connection', () => {
        const until = performance.now() + 1200;
        while (performance.now() < until);
      });
    }, 100);
    await new Promise((r) => setTimeout(r, 150));
    const text = await answer;
    settle();
    await drained;
    expect(text).to.match(/^HTTP\/1\.1 200 /);
  });

  it('cuts at its end an upgraded connection its owner never closes', async () => {
    const s = await listening();
    server = s.server;
    // an owner that takes the upgrade and then forgets it
    s.server.on('upgrade', (_req, socket: net.Socket) => socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n'));
    const sock = net.connect(s.port, '127.0.0.1');
    sock.on('error', () => undefined);
    const switched = new Promise((r) => sock.once('data', r));
    sock.write('GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
    await switched;
    const closed = new Promise((r) => sock.once('close', r));
    s.stopping.now = true;
    const started = performance.now();
    await drain(s.server, { graceMs: 300, idleMs: 300, refuseMs: 100 });
    await closed;
    expect(performance.now() - started).to.be.below(2000);
  });
});
