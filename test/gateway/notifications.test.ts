import { expect } from 'chai';
import { adminAuth, SYSTEM_KEY, type TestService } from '../support/service.js';
import type { OutboundNotification } from '../../src/bus/events.js';
import { type WsClient, api, gatewaySuite, type TestUser } from './helpers.js';

describe('ws gateway: notifications over the socket', function () {
  this.timeout(30_000);
  const suite = gatewaySuite();
  const { connect, asUser, asAdmin } = suite;
  let svc: TestService;
  let alice: TestUser;
  let bob: TestUser;
  let sender: TestUser;
  before(() => ({ svc, alice, bob, sender } = suite));

  it('delivers a broadcast to every connected client, system included', async () => {
    const clients = [await asUser(alice), await asUser(alice), await asUser(bob), await connect(svc, { headers: { 'X-API-Key': SYSTEM_KEY } })];
    const res = await api(svc)
      .post('/api/notifications')
      .set('Authorization', adminAuth())
      .send({ title: 'Deploy', message: 'v2 is live', level: 'success', link: 'https://example.com/v2' });
    expect(res.status).to.equal(202);
    for (const c of clients) {
      const f = await c.next('system:notify', (x) => x.payload.id === res.body.id);
      expect(f.payload).to.include({
        title: 'Deploy',
        message: 'v2 is live',
        level: 'success',
        seq: res.body.seq,
        broadcast: true,
        read: false,
        toast: true,
        link: 'https://example.com/v2',
      });
    }
  });

  it('fans one broadcast out to many connections', async () => {
    const key = await api(svc).post('/api/me/api-keys').set('Authorization', bob.auth).send({ label: 'many' });
    const many: WsClient[] = [];
    for (let i = 0; i < 20; i++)
      many.push(...(await Promise.all(Array.from({ length: 15 }, () => connect(svc, { headers: { 'X-API-Key': key.body.token } })))));
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
    const toAlice = await api(svc)
      .post('/api/notifications')
      .set('Authorization', adminAuth())
      .send({ title: 'for alice', message: 'secret a', user: 'alice' });
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
    expect(bad.payload.message)
      .to.match(/message/)
      .and.match(/level/);
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

      const first = await api(svc)
        .post('/api/notifications')
        .set('Authorization', adminAuth())
        .send({ id: 'build-42', title: 'Build 42 running', message: '…', toast: false });
      const second = await api(svc)
        .post('/api/notifications')
        .set('Authorization', adminAuth())
        .send({ id: 'build-42', title: 'Build 42 passed', message: 'ok', level: 'success' });
      expect(second.body.id).to.equal('build-42');
      expect(second.body.seq).to.be.greaterThan(first.body.seq);
      const updated = await a.next('system:notify', (f) => f.payload.id === 'build-42' && f.payload.title === 'Build 42 passed');
      expect(updated.payload.seq).to.equal(second.body.seq);

      // an id of a broadcast cannot be reused for one user's notification
      const clash = await api(svc)
        .post('/api/notifications')
        .set('Authorization', adminAuth())
        .send({ id: 'build-42', title: 'x', message: 'y', user: 'alice' });
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
