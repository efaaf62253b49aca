import { expect } from 'chai';
import crypto from 'node:crypto';
import net from 'node:net';
import { adminAuth, SYSTEM_KEY, type TestService } from '../support/service.js';
import { SESSION_COOKIE } from '../../src/auth/web-session.js';
import { sha256 } from '../../src/digest.js';
import { WsTickets } from '../../src/gateway/tickets.js';
import { passwordProof } from '../../src/auth/authenticate.js';
import { api, gatewaySuite, refusal, refusedStatus, sleep, type TestUser } from './helpers.js';

const ORIGIN = 'http://localhost:8080';

describe('ws gateway', function () {
  this.timeout(30_000);
  const suite = gatewaySuite();
  const { connect, asUser, asAdmin } = suite;
  let svc: TestService;
  let alice: TestUser;
  let bob: TestUser;
  before(() => ({ svc, alice, bob } = suite));

  /** A UI cookie session for `user`, exactly as koa-session stores and signs it. */
  async function cookieFor(user: TestUser): Promise<string> {
    const { key } = await svc.service.auth.apiKeys.create(user.id, 'session', { label: 'ui', expiresAt: Date.now() + 3600_000 });
    const sid = crypto.randomUUID();
    await svc.service.db('web_sessions').insert({
      id: sha256(sid),
      data: JSON.stringify({ key_id: key.id, _expire: Date.now() + 3600_000, _maxAge: 3600_000 }),
      expires_at: Date.now() + 3600_000,
    });
    const value = `${SESSION_COOKIE}=${sid}`;
    // koa's signed cookie: base64url HMAC-SHA1 of `name=value` under the app key (keygrip)
    const sig = crypto.createHmac('sha1', svc.config.secretKey).update(value).digest('base64url');
    return `${value}; ${SESSION_COOKIE}.sig=${sig}`;
  }

  describe('upgrade', () => {
    it('answers 401 without credentials and with bad ones, naming what came (as HTTP does)', async () => {
      const token = 'the API key or token is not valid: unknown, revoked or expired';
      expect(await refusal(svc)).to.deep.equal({ status: 401, message: 'authentication required' });
      expect(await refusal(svc, { headers: { Authorization: 'Bearer svk_not-a-real-token-0123456789' } })).to.deep.equal({ status: 401, message: token });
      expect(await refusal(svc, { headers: { 'X-API-Key': 'nope-nope-nope-nope-nope' } })).to.deep.equal({ status: 401, message: token });
      expect(await refusal(svc, { headers: { Authorization: `Basic ${Buffer.from('alice:wrong-password').toString('base64')}` } })).to.deep.equal({
        status: 401,
        message: 'invalid username or password',
      });
    });

    it('answers 404 on another path', async () => {
      const status = await new Promise<number>((resolve, reject) => {
        const sock = net.connect(new URL(svc.url).port as unknown as number, '127.0.0.1', () => {
          sock.write(
            'GET /elsewhere HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
          );
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
      const shortLived = new WsTickets(svc.service.auth.oneTime, 1);
      const hash = (await svc.service.iam.store.userById(alice.id))!.hashedPassword;
      const { ticket } = await shortLived.mint((await svc.service.auth.authenticator.identityOf(alice.id, 'basic', { proof: passwordProof(hash) }))!);
      await sleep(20);
      expect(await refusedStatus(svc, { query: `ticket=${ticket}` })).to.equal(401);
      const key = await api(svc)
        .post('/api/me/api-keys')
        .set('Authorization', adminAuth())
        .send({ label: 'read-only', scopes: ['api:read'] });
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
      expect(noEvent.payload).to.include({ code: 'bad_frame', message: 'event: is required' });
      c.send({ event: 'x', payload: 'not-an-object', ref: 'bad-payload' });
      const badPayload = await c.next('gateway:error', (f) => f.payload.ref === 'bad-payload');
      expect(badPayload.payload).to.include({ code: 'bad_frame', message: 'payload: must be of type object' });
      c.ws.send('{"event":"gateway:ping","payload":{"note":"half \\ud800"},"ref":"lone"}');
      expect((await c.next('gateway:error', (f) => f.payload.ref === 'lone')).payload).to.include({
        code: 'bad_frame',
        message: 'payload.note: is not well-formed Unicode (half of a surrogate pair)',
      });
      c.send([1, 2]);
      expect((await c.next('gateway:error', (f) => f.payload.message.startsWith('frame:'))).payload).to.include({
        code: 'bad_frame',
        message: 'frame: must be of type object',
      });
      c.ws.send(Buffer.from([1, 2, 3]), { binary: true });
      await c.next('gateway:error', (f) => f.payload.message === 'frames are JSON text');
      c.send({ event: 'no:such', ref: 'u1' });
      const unknown = await c.next('gateway:error', (f) => f.payload.ref === 'u1');
      expect(unknown.payload.code).to.equal('unknown_event');
      c.send({ event: 'notifications:resume', payload: { since: -1 }, ref: 'r1' });
      const invalid = await c.next('gateway:error', (f) => f.payload.ref === 'r1');
      // each problem named by its field, as the HTTP error body names it (never joi's own quoting)
      expect(invalid.payload).to.include({ code: 'invalid_args', message: 'since: must be greater than or equal to 0' });
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
          const r = await api(svc)
            .post('/api/notifications')
            .set('Authorization', adminAuth())
            .send({ title: `missed ${i}`, message: 'm' });
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
});
