import { expect } from 'chai';
import crypto from 'node:crypto';
import net from 'node:net';
import { startService, adminAuth, SYSTEM_KEY, type TestService } from '../support/service.js';
import { SESSION_COOKIE } from '../../src/auth/web-session.js';
import { sha256 } from '../../src/auth/tokens.js';
import { WsTickets } from '../../src/gateway/tickets.js';
import { passwordProof } from '../../src/auth/authenticate.js';
import type { OutboundNotification } from '../../src/bus/events.js';
import { WsClient, api, createGroup, createUser, refusedStatus, sleep, type TestUser } from './helpers.js';

const ORIGIN = 'http://localhost:8080';

describe('ws gateway', function () {
  this.timeout(30_000);
  let svc: TestService;
  let alice: TestUser;
  let bob: TestUser;
  let sender: TestUser;
  const open: WsClient[] = [];
  const connect = async (...args: Parameters<typeof WsClient.connect>) => {
    const c = await WsClient.connect(...args);
    open.push(c);
    return c;
  };
  const asUser = (u: TestUser, extra: { origin?: string } = {}) => connect(svc, { ...extra, headers: { Authorization: u.auth } });
  const asAdmin = () => connect(svc, { headers: { Authorization: adminAuth() } });

  before(async () => {
    // many connections of one user below (fan-out): above the default per-user cap
    svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY, SERVICE_WS_MAX_CONNECTIONS_PER_USER: '400' } });
    alice = await createUser(svc, 'alice');
    bob = await createUser(svc, 'bob');
    await createGroup(svc, 'NOTIFY_SENDERS', ['feature:notifications.send']);
    sender = await createUser(svc, 'sender', ['INT_USER', 'NOTIFY_SENDERS']);
  });

  afterEach(async () => {
    await Promise.all(open.splice(0).map((c) => c.close()));
  });

  after(async () => {
    await svc?.destroy();
  });

  /** A UI cookie session for `user`, exactly as koa-session stores and signs it. */
  async function cookieFor(user: TestUser): Promise<string> {
    const { key } = await svc.service.iam.apiKeys.create(user.id, 'session', { label: 'ui', expiresAt: Date.now() + 3600_000 });
    const sid = crypto.randomUUID();
    await svc.service.db('web_sessions').insert({ id: sha256(sid), data: JSON.stringify({ key_id: key.id, _expire: Date.now() + 3600_000, _maxAge: 3600_000 }), expires_at: Date.now() + 3600_000 });
    const value = `${SESSION_COOKIE}=${sid}`;
    // koa's signed cookie: base64url HMAC-SHA1 of `name=value` under the app key (keygrip)
    const sig = crypto.createHmac('sha1', svc.config.secretKey).update(value).digest('base64url');
    return `${value}; ${SESSION_COOKIE}.sig=${sig}`;
  }

  describe('upgrade', () => {
    it('answers 401 without credentials and with bad ones', async () => {
      expect(await refusedStatus(svc)).to.equal(401);
      expect(await refusedStatus(svc, { headers: { Authorization: 'Bearer svk_not-a-real-token-0123456789' } })).to.equal(401);
      expect(await refusedStatus(svc, { headers: { 'X-API-Key': 'nope-nope-nope-nope-nope' } })).to.equal(401);
      expect(await refusedStatus(svc, { headers: { Authorization: `Basic ${Buffer.from('alice:wrong-password').toString('base64')}` } })).to.equal(401);
    });

    it('answers 404 on another path', async () => {
      const status = await new Promise<number>((resolve, reject) => {
        const sock = net.connect(new URL(svc.url).port as unknown as number, '127.0.0.1', () => {
          sock.write('GET /elsewhere HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n');
        });
        let buf = '';
        sock.on('data', (d) => (buf += d.toString()));
        sock.on('end', () => resolve(Number(buf.split(' ')[1])));
        sock.on('error', reject);
      });
      expect(status).to.equal(404);
    });

    it('accepts a cookie session only from an allowed Origin', async () => {
      const cookie = await cookieFor(alice);
      const c = await connect(svc, { headers: { Cookie: cookie }, origin: ORIGIN });
      expect(c.frames[0].payload.username).to.equal('alice');
      expect(await refusedStatus(svc, { headers: { Cookie: cookie }, origin: 'https://evil.example' })).to.equal(401);
      expect(await refusedStatus(svc, { headers: { Cookie: cookie } })).to.equal(401);
    });

    it('refuses Basic credentials sent from a foreign Origin (browser-cached credentials)', async () => {
      expect(await refusedStatus(svc, { headers: { Authorization: alice.auth }, origin: 'https://evil.example' })).to.equal(401);
      const c = await asUser(alice, { origin: ORIGIN });
      expect(c.frames[0].payload.username).to.equal('alice');
    });

    it('accepts X-API-Key, Bearer and the system key', async () => {
      const key = await api(svc).post('/api/me/api-keys').set('Authorization', alice.auth).send({ label: 'ws' });
      expect(key.status, JSON.stringify(key.body)).to.equal(201);
      const viaKey = await connect(svc, { headers: { 'X-API-Key': key.body.token } });
      expect(viaKey.frames[0].payload.username).to.equal('alice');
      const viaBearer = await connect(svc, { headers: { Authorization: `Bearer ${key.body.token}` } });
      expect(viaBearer.frames[0].payload.username).to.equal('alice');
      const system = await connect(svc, { headers: { 'X-API-Key': SYSTEM_KEY } });
      expect(system.frames[0].payload.username).to.equal('system');
    });

    it('closes a connection (1008) once its key is revoked or its session ends', async () => {
      const key = (await api(svc).post('/api/me/api-keys').set('Authorization', alice.auth).send({ label: 'short-lived' }).expect(201)).body;
      const keep = (await api(svc).post('/api/me/api-keys').set('Authorization', alice.auth).send({ label: 'kept' }).expect(201)).body;
      const revoked = await connect(svc, { headers: { 'X-API-Key': key.token } });
      const kept = await connect(svc, { headers: { 'X-API-Key': keep.token } });
      const login = (await api(svc).post('/api/auth/login').send({ username: 'alice', password: alice.password }).expect(200)).body;
      const session = await connect(svc, { headers: { Authorization: `Bearer ${login.token}` } });
      await api(svc).delete(`/api/me/api-keys/${key.id}`).set('Authorization', alice.auth).expect(204);
      await api(svc).post('/api/auth/logout').set('Authorization', `Bearer ${login.token}`).expect(204);
      await svc.service.gateway.gateway.revalidate();
      expect((await revoked.closed).code).to.equal(1008);
      expect((await session.closed).code).to.equal(1008);
      expect(kept.ws.readyState).to.equal(kept.ws.OPEN);
    });

    it('accepts a one-time ticket exactly once', async () => {
      const res = await api(svc).post('/api/ws/ticket').set('Authorization', bob.auth);
      expect(res.status).to.equal(200);
      expect(res.body.expires_in).to.equal(30);
      expect(res.body.ticket).to.be.a('string');
      const c = await connect(svc, { query: `ticket=${encodeURIComponent(res.body.ticket)}` });
      expect(c.frames[0].payload.username).to.equal('bob');
      expect(await refusedStatus(svc, { query: `ticket=${encodeURIComponent(res.body.ticket)}` })).to.equal(401);
      expect(await refusedStatus(svc, { query: 'ticket=svt_forged' })).to.equal(401);
      expect((await api(svc).post('/api/ws/ticket')).status).to.equal(401);
    });

    it('refuses an expired ticket; a ticket keeps the scopes of the key that minted it', async () => {
      const shortLived = new WsTickets(svc.service.db, 1);
      const hash = (await svc.service.iam.store.userById(alice.id))!.hashed_password;
      const { ticket } = await shortLived.mint((await svc.service.iam.auth.identityOf(alice.id, 'basic', { proof: passwordProof(hash) }))!);
      await sleep(20);
      expect(await refusedStatus(svc, { query: `ticket=${ticket}` })).to.equal(401);
      const key = await api(svc).post('/api/me/api-keys').set('Authorization', adminAuth()).send({ label: 'read-only', scopes: ['api:read'] });
      expect(key.status, JSON.stringify(key.body)).to.equal(201);
      const minted = await api(svc).post('/api/ws/ticket').set('X-API-Key', key.body.token);
      const c = await connect(svc, { query: `ticket=${minted.body.ticket}` });
      expect(c.frames[0].payload).to.include({ username: 'admin' });
      expect(c.frames[0].payload.permissions).to.deep.equal(['api:read']);
      c.send({ event: 'system:notify', payload: { title: 'scoped', message: 'no' }, ref: 'scoped' });
      expect((await c.next('gateway:error', (f) => f.ref === 'scoped')).payload.code).to.equal('forbidden');
    });

    it('answers a plain GET /ws with 426', async () => {
      const res = await api(svc).get('/ws').set('Authorization', alice.auth);
      expect(res.status).to.equal(426);
    });
  });

  describe('frames', () => {
    it('sends gateway:welcome first with username, permissions and last_seq', async () => {
      const c = await asUser(alice);
      const welcome = c.frames[0];
      expect(welcome.event).to.equal('gateway:welcome');
      expect(welcome.payload.username).to.equal('alice');
      expect(welcome.payload.permissions).to.include('api:read');
      expect(welcome.payload.last_seq).to.be.a('number');
      const admin = await asAdmin();
      expect(admin.frames[0].payload.permissions).to.include('feature:*');
    });

    it('answers gateway:ping with gateway:pong carrying the ref', async () => {
      const c = await asUser(alice);
      c.send({ event: 'gateway:ping', ref: 'p1' });
      const pong = await c.next('gateway:pong');
      expect(pong.ref).to.equal('p1');
    });

    it('answers bad frames with gateway:error and keeps the connection', async () => {
      const c = await asUser(alice);
      c.send('this is not json');
      expect((await c.next('gateway:error', (f) => f.payload.code === 'bad_frame')).payload.ref).to.equal(null);
      c.send({ payload: {}, ref: 'no-event' });
      const noEvent = await c.next('gateway:error', (f) => f.payload.ref === 'no-event');
      expect(noEvent.payload.code).to.equal('bad_frame');
      c.send({ event: 'x', payload: 'not-an-object', ref: 'bad-payload' });
      expect((await c.next('gateway:error', (f) => f.payload.ref === 'bad-payload')).payload.code).to.equal('bad_frame');
      c.ws.send(Buffer.from([1, 2, 3]), { binary: true });
      await c.next('gateway:error', (f) => f.payload.message === 'frames are JSON text');
      c.send({ event: 'no:such', ref: 'u1' });
      const unknown = await c.next('gateway:error', (f) => f.payload.ref === 'u1');
      expect(unknown.payload.code).to.equal('unknown_event');
      c.send({ event: 'notifications:resume', payload: { since: -1 }, ref: 'r1' });
      expect((await c.next('gateway:error', (f) => f.payload.ref === 'r1')).payload.code).to.equal('invalid_args');
      await c.roundTrip();
      expect(c.ws.readyState).to.equal(c.ws.OPEN);
    });

    it('closes with 1009 on a frame over 64 KiB', async () => {
      const c = await asUser(alice);
      c.send({ event: 'gateway:ping', payload: { pad: 'x'.repeat(70 * 1024) } });
      const { code } = await c.closed;
      expect(code).to.equal(1009);
    });

    it('drops a peer that stops answering pings', async () => {
      const gateway = svc.service.gateway.gateway;
      const before = gateway.stats.deadDropped;
      gateway.setHeartbeat(100);
      try {
        const dead = await connect(svc, { headers: { Authorization: alice.auth }, autoPong: false });
        const live = await asUser(bob);
        const { code } = await dead.closed;
        expect(code).to.equal(1006);
        expect(gateway.stats.deadDropped).to.be.greaterThan(before);
        await sleep(300);
        expect(live.ws.readyState).to.equal(live.ws.OPEN);
      } finally {
        gateway.setHeartbeat(30_000);
      }
    });

    it('closes a consumer that does not drain with 1013, and it can resume', async () => {
      const gateway = svc.service.gateway.gateway;
      const saved = gateway.options.maxBufferedBytes;
      gateway.options.maxBufferedBytes = 64 * 1024;
      try {
        const slow = await asUser(alice);
        const fast = await asUser(bob);
        const since = slow.frames[0].payload.last_seq;
        const socket = (slow.ws as any)._socket as net.Socket;
        socket.pause();
        const big = 'y'.repeat(4000);
        // transient broadcasts fill the socket buffers fast (no database write each)
        for (let batch = 0; batch < 50 && gateway.connectionsOf(alice.id) > 0; batch++) {
          for (let i = 0; i < 100; i++) svc.service.bus.emit('system:notify', { title: `flood ${batch}/${i}`, message: big, persist: false, toast: false });
          await sleep(20);
        }
        expect(gateway.connectionsOf(alice.id)).to.equal(0);
        expect(gateway.stats.slowClosed).to.be.greaterThan(0);
        expect(gateway.connectionsOf(bob.id)).to.equal(1);
        // stored while alice is away
        const missed: number[] = [];
        for (let i = 0; i < 3; i++) {
          const r = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ title: `missed ${i}`, message: 'm' });
          missed.push(r.body.seq);
        }
        socket.resume();
        const { code } = await slow.closed;
        expect(code).to.equal(1013);
        await fast.next('system:notify', (f) => f.payload.seq === missed[2], 15_000);
        // the closed consumer comes back and gets exactly what it missed
        const again = await asUser(alice);
        again.send({ event: 'notifications:resume', payload: { since }, ref: 'back' });
        const resumed = await again.next('notifications:resumed', () => true, 15_000);
        expect(resumed.ref).to.equal('back');
        expect(again.all('system:notify').map((f) => f.payload.seq)).to.deep.equal(missed);
        expect(resumed.payload).to.include({ count: 3, more: false });
        expect(resumed.payload.last_seq).to.be.at.least(missed[2]);
      } finally {
        gateway.options.maxBufferedBytes = saved;
      }
    });
  });

  describe('notifications over the socket', () => {
    it('delivers a broadcast to every connected client, system included', async () => {
      const clients = [await asUser(alice), await asUser(alice), await asUser(bob), await connect(svc, { headers: { 'X-API-Key': SYSTEM_KEY } })];
      const res = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ title: 'Deploy', message: 'v2 is live', level: 'success', link: 'https://example.com/v2' });
      expect(res.status).to.equal(202);
      for (const c of clients) {
        const f = await c.next('system:notify', (x) => x.payload.id === res.body.id);
        expect(f.payload).to.include({ title: 'Deploy', message: 'v2 is live', level: 'success', seq: res.body.seq, broadcast: true, read: false, toast: true, link: 'https://example.com/v2' });
      }
    });

    it('fans one broadcast out to many connections', async () => {
      const key = await api(svc).post('/api/me/api-keys').set('Authorization', bob.auth).send({ label: 'many' });
      const many: WsClient[] = [];
      for (let i = 0; i < 20; i++) many.push(...(await Promise.all(Array.from({ length: 15 }, () => connect(svc, { headers: { 'X-API-Key': key.body.token } })))));
      expect(svc.service.gateway.gateway.connectionsOf(bob.id)).to.be.at.least(300);
      const started = Date.now();
      const res = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ title: 'to all 300', message: 'm' });
      await Promise.all(many.map((c) => c.next('system:notify', (f) => f.payload.id === res.body.id)));
      // generous: the machine is shared; this guards against per-recipient work, not for speed
      expect(Date.now() - started).to.be.lessThan(3000);
    });

    it('delivers a targeted notification only to its user (every connection of that user)', async () => {
      const a1 = await asUser(alice);
      const a2 = await asUser(alice);
      const b1 = await asUser(bob);
      const b2 = await asUser(bob);
      const admin = await asAdmin();
      const system = await connect(svc, { headers: { 'X-API-Key': SYSTEM_KEY } });
      const toAlice = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ title: 'for alice', message: 'secret a', user: 'alice' });
      const toBob = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ title: 'for bob', message: 'secret b', user: bob.id });
      expect(toAlice.status).to.equal(202);
      expect(toBob.status).to.equal(202);
      for (const c of [a1, a2]) expect((await c.next('user:notify', (f) => f.payload.id === toAlice.body.id)).payload.broadcast).to.equal(false);
      for (const c of [b1, b2]) await c.next('user:notify', (f) => f.payload.id === toBob.body.id);
      for (const c of [a1, a2, b1, b2, admin, system]) await c.roundTrip();
      for (const c of [a1, a2]) expect(c.all('user:notify', (f) => f.payload.id === toBob.body.id)).to.have.length(0);
      for (const c of [b1, b2]) expect(c.all('user:notify', (f) => f.payload.id === toAlice.body.id)).to.have.length(0);
      for (const c of [admin, system]) expect(c.all('user:notify')).to.have.length(0);
    });

    it('checks permissions on client-sent notify frames', async () => {
      const a = await asUser(alice);
      const s = await asUser(sender);
      const b = await asUser(bob);
      a.send({ event: 'system:notify', payload: { title: 't', message: 'm' }, ref: 'a-bc' });
      expect((await a.next('gateway:error', (f) => f.ref === 'a-bc')).payload).to.include({ code: 'forbidden', ref: 'a-bc' });
      a.send({ event: 'user:notify', payload: { title: 't', message: 'm', user: 'bob' }, ref: 'a-us' });
      expect((await a.next('gateway:error', (f) => f.ref === 'a-us')).payload.code).to.equal('forbidden');
      s.send({ event: 'system:notify', payload: { title: 't', message: 'm' }, ref: 's-bc' });
      expect((await s.next('gateway:error', (f) => f.ref === 's-bc')).payload.code).to.equal('forbidden');
      s.send({ event: 'user:notify', payload: { title: 'hi bob', message: 'from sender', user: 'bob' }, ref: 's-us' });
      const got = await b.next('user:notify', (f) => f.payload.title === 'hi bob');
      expect(got.payload.seq).to.be.a('number');
      s.send({ event: 'user:notify', payload: { title: 'x', message: 'y', user: 'nobody-here' }, ref: 's-unknown' });
      const unknown = await s.next('gateway:error', (f) => f.ref === 's-unknown');
      expect(unknown.payload.code).to.equal('invalid_args');
      expect(unknown.payload.message).to.match(/user/);
      s.send({ event: 'user:notify', payload: { title: 'x', user: 'bob', level: 'loud' }, ref: 's-bad' });
      const bad = await s.next('gateway:error', (f) => f.ref === 's-bad');
      expect(bad.payload.code).to.equal('invalid_args');
      expect(bad.payload.message).to.match(/message/).and.match(/level/);
      const admin = await asAdmin();
      admin.send({ event: 'system:notify', payload: { title: 'from admin ws', message: 'hello all' } });
      await a.next('system:notify', (f) => f.payload.title === 'from admin ws');
      await admin.next('system:notify', (f) => f.payload.title === 'from admin ws');
      // none of the refused frames was stored
      const hist = await api(svc).get('/api/notifications?limit=200').set('Authorization', bob.auth);
      expect(hist.body.notifications.map((n: any) => n.title)).to.not.include('t');
    });

    it('relays socket:request to the handler and answers only that connection', async () => {
      const a1 = await asUser(alice);
      const a2 = await asUser(alice);
      a1.send({ event: 'socket:request', payload: { request_id: 'r-1', operation: 'provider:list' }, ref: 'sr1' });
      const res = await a1.next('socket:response', (f) => f.ref === 'sr1');
      expect(res.payload.request_id).to.equal('r-1');
      expect(res.payload.ok).to.equal(true);
      a1.send({ event: 'socket:request', payload: { request_id: 'r-2', operation: 'nothing:here' }, ref: 'sr2' });
      const unknown = await a1.next('socket:response', (f) => f.ref === 'sr2');
      expect(unknown.payload.ok).to.equal(false);
      expect(unknown.payload.error.code).to.equal('unknown_provider');
      await a2.roundTrip();
      expect(a2.all('socket:response')).to.have.length(0);
    });

    it('consumes system:notify and user:notify from the bus; a bad bus payload is dropped', async () => {
      const a = await asUser(alice);
      const b = await asUser(bob);
      const outbound: OutboundNotification[] = [];
      const off = svc.service.bus.on('notification:outbound', (o) => {
        outbound.push(o);
      });
      try {
        svc.service.bus.emit('system:notify', { title: 'from the bus', message: 'plugin says hi', source: 'plugin:demo' });
        svc.service.bus.emit('user:notify', { title: 'just bob', message: 'bus to bob', user: 'bob' });
        svc.service.bus.emit('user:notify', { title: 'nobody', message: 'x', user: 'ghost-user' });
        svc.service.bus.emit('system:notify', { title: '', message: 'empty title' } as any);
        const f = await a.next('system:notify', (x) => x.payload.title === 'from the bus');
        expect(f.payload.source).to.equal('plugin:demo');
        await b.next('user:notify', (x) => x.payload.title === 'just bob');
        await a.roundTrip();
        expect(a.all('user:notify', (x) => x.payload.title === 'just bob')).to.have.length(0);
        expect(a.all('system:notify', (x) => x.payload.message === 'empty title')).to.have.length(0);
        const toBob = outbound.find((o) => o.title === 'just bob')!;
        expect(toBob.user).to.deep.equal({ id: bob.id, username: 'bob' });
        expect(toBob.seq).to.be.a('number');
        expect(outbound.find((o) => o.title === 'from the bus')!.user).to.equal(null);
        expect(outbound.some((o) => o.title === 'nobody')).to.equal(false);
      } finally {
        off();
      }
    });

    it('pushes persist:false without storing it; updates by id; clears by id', async () => {
      const a = await asUser(alice);
      const outbound: OutboundNotification[] = [];
      const off = svc.service.bus.on('notification:outbound', (o) => {
        outbound.push(o);
      });
      try {
        svc.service.bus.emit('system:notify', { id: 'transient-1', title: 'typing…', message: 'just now', persist: false });
        const t = await a.next('system:notify', (f) => f.payload.id === 'transient-1');
        expect(t.payload.seq).to.equal(null);
        expect(t.payload.persist).to.equal(false);
        expect(outbound.find((o) => o.id === 'transient-1')!.seq).to.equal(null);

        const first = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ id: 'build-42', title: 'Build 42 running', message: '…', toast: false });
        const second = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ id: 'build-42', title: 'Build 42 passed', message: 'ok', level: 'success' });
        expect(second.body.id).to.equal('build-42');
        expect(second.body.seq).to.be.greaterThan(first.body.seq);
        const updated = await a.next('system:notify', (f) => f.payload.id === 'build-42' && f.payload.title === 'Build 42 passed');
        expect(updated.payload.seq).to.equal(second.body.seq);

        // an id of a broadcast cannot be reused for one user's notification
        const clash = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ id: 'build-42', title: 'x', message: 'y', user: 'alice' });
        expect(clash.status).to.equal(409);

        const cleared = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send({ id: 'build-42', action: 'clear' });
        expect(cleared.status).to.equal(202);
        const clearFrame = await a.next('system:notify', (f) => f.payload.id === 'build-42' && f.payload.action === 'clear');
        expect(clearFrame.payload.seq).to.equal(cleared.body.seq);

        const hist = await api(svc).get('/api/notifications?limit=200').set('Authorization', alice.auth);
        const ids = hist.body.notifications.map((n: any) => n.id);
        expect(ids).to.not.include('transient-1');
        expect(ids).to.not.include('build-42');
      } finally {
        off();
      }
    });
  });
});
