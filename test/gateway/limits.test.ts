import type net from 'node:net';
import { expect } from 'chai';
import WebSocket from 'ws';
import { startService, type TestService } from '../support/service.js';
import { WsClient, api, createUser, sleep, wsUrl, type TestUser } from './helpers.js';

/** One viewer cannot make the gateway do unbounded work: connection cap, frame rate, one resume at a time, paced replays. */
describe('ws gateway: limits per user and per connection', function () {
  this.timeout(60_000);
  let svc: TestService;
  let mallory: TestUser;
  const open: WsClient[] = [];

  before(async () => {
    svc = await startService();
    mallory = await createUser(svc, 'mallory', ['INT_VIEWER']);
    // history worth replaying: 400 broadcasts of ~2 KB
    const text = 'h'.repeat(2000);
    for (let i = 0; i < 400; i++) await svc.service.notifications.service.notify('broadcast', { title: `old ${i}`, message: text }, { sender: 'test' });
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((c) => c.close()));
  });
  after(async () => svc?.destroy());

  const connect = async () => {
    const c = await WsClient.connect(svc, { headers: { Authorization: mallory.auth } });
    open.push(c);
    return c;
  };

  /** /healthz round trip in ms. */
  async function health(): Promise<number> {
    const t = Date.now();
    await api(svc).get('/healthz').expect(200);
    return Date.now() - t;
  }

  it('a user gets at most SERVICE_WS_MAX_CONNECTIONS_PER_USER (default 20) connections; the next is told why and closed 1008', async () => {
    expect(svc.config.wsMaxConnectionsPerUser).to.equal(20);
    // each held open until every one has its first frame (however long the machine takes to
    // authenticate 60): a welcomed one closed early would free a place for another
    const attempts = await Promise.all(
      Array.from(
        { length: 60 },
        () =>
          new Promise<{ ws: WebSocket; first: string | null; closed: Promise<number> }>((resolve) => {
            const ws = new WebSocket(wsUrl(svc), { headers: { Authorization: mallory.auth } });
            const closed = new Promise<number>((r) => ws.on('close', (code) => r(code)));
            ws.once('message', (d) => {
              const frame = JSON.parse(d.toString());
              resolve({ ws, first: frame.event === 'gateway:error' ? frame.payload.code : frame.event, closed });
            });
            ws.on('close', () => resolve({ ws, first: null, closed }));
            ws.on('error', () => undefined);
          }),
      ),
    );
    const welcomed = attempts.filter((a) => a.first === 'gateway:welcome');
    const refused = attempts.filter((a) => a.first === 'too_many_connections');
    expect(welcomed).to.have.length(20);
    expect(refused).to.have.length(40);
    for (const r of refused) expect(await r.closed).to.equal(1008);
    for (const w of welcomed) w.ws.close();
    await Promise.all(welcomed.map((w) => w.closed));
    // others are not affected by mallory's cap
    const other = await createUser(svc, 'bystander');
    const c = await WsClient.connect(svc, { headers: { Authorization: other.auth } });
    await c.close();
  });

  it('a flood of resume frames ends in gateway:error rate_limited and 1008, with bounded replies and a responsive service', async () => {
    const c = await connect();
    let bytes = 0;
    c.ws.on('message', (d: Buffer) => (bytes += d.length));
    // a resume, and a second one while its replay runs (busy); then the flood, while the replay
    // still runs. (Sent all at once, the flood's 61st frame closes the connection before the
    // frames ahead of it are handled, and whether anything is answered busy is up to chance.)
    c.send({ event: 'notifications:resume', payload: { since: 0 }, ref: 'r0' });
    c.send({ event: 'notifications:resume', payload: { since: 0 }, ref: 'r1' });
    await c.next('gateway:error', (f) => f.ref === 'r1');
    for (let i = 2; i < 200; i++) c.send({ event: 'notifications:resume', payload: { since: 0 }, ref: `r${i}` });
    const latency = await health();
    const closed = await Promise.race([c.closed, sleep(5000).then(() => null)]);
    expect(closed?.code).to.equal(1008);
    expect(c.all('gateway:error').map((f) => f.payload.code)).to.include('rate_limited');
    // at most one replay ran (the others were refused while it did): 400 x ~2 KB, not 200 x that
    expect(c.all('gateway:error').map((f) => f.payload.code)).to.include('busy');
    expect(c.all('notifications:resumed').length).to.be.at.most(1);
    expect(c.all('system:notify').length).to.be.at.most(400);
    expect(bytes).to.be.below(2 * 1024 * 1024);
    expect(latency).to.be.below(1000);
  });

  it('one resume at a time per connection: a second one meanwhile is answered busy, and the connection stays', async () => {
    const c = await connect();
    c.send({ event: 'notifications:resume', payload: { since: 0 }, ref: 'first' });
    c.send({ event: 'notifications:resume', payload: { since: 0 }, ref: 'second' });
    const busy = await c.next('gateway:error', (f) => f.ref === 'second');
    expect(busy.payload.code).to.equal('busy');
    const done = await c.next('notifications:resumed', (f) => f.ref === 'first', 15_000);
    expect(done.payload.count).to.equal(400);
    await c.roundTrip();
    c.send({ event: 'notifications:resume', payload: { since: done.payload.last_seq }, ref: 'third' });
    expect((await c.next('notifications:resumed', (f) => f.ref === 'third')).payload.count).to.equal(0);
  });

  it('a replay waits for a client that does not read instead of queueing its whole history', async () => {
    const gateway = svc.service.gateway.gateway;
    const c = await connect();
    const socket = (c.ws as unknown as { _socket: net.Socket })._socket;
    socket.pause();
    c.send({ event: 'notifications:resume', payload: { since: 0 }, ref: 'paced' });
    await sleep(1500);
    // the server side of this connection holds about the high-water mark, not 400 x 2 KB
    const conns = [...(gateway as unknown as { all: Set<{ ws: WebSocket; viewer: { userId: string | null } }> }).all].filter(
      (x) => x.viewer.userId === mallory.id,
    );
    expect(conns).to.have.length(1);
    expect(conns[0].ws.bufferedAmount).to.be.below(gateway.options.replayHighWaterBytes + 64 * 1024);
    expect(gateway.stats.slowClosed).to.equal(0);
    socket.resume();
    const done = await c.next('notifications:resumed', (f) => f.ref === 'paced', 15_000);
    expect(done.payload.count).to.equal(400);
    expect(c.all('system:notify')).to.have.length(400);
  });
});
