import { expect } from 'chai';
import { startService, adminAuth, SYSTEM_KEY, type TestService } from '../support/service.js';
import { api, createGroup, createUser, type TestUser } from '../gateway/helpers.js';

describe('notifications history API', function () {
  this.timeout(30_000);
  let svc: TestService;
  let alice: TestUser;
  let bob: TestUser;
  let sender: TestUser;

  const post = (auth: string, body: unknown) =>
    api(svc)
      .post('/api/notifications')
      .set('Authorization', auth)
      .send(body as object);
  const list = async (auth: string, query = '') => {
    const res = await api(svc).get(`/api/notifications${query}`).set('Authorization', auth);
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    return res.body as { notifications: any[]; unread: number; last_seq: number };
  };

  before(async () => {
    svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY } });
    alice = await createUser(svc, 'alice');
    bob = await createUser(svc, 'bob');
    await createGroup(svc, 'NOTIFY_SENDERS', ['feature:notifications.send']);
    sender = await createUser(svc, 'sender', ['INT_USER', 'NOTIFY_SENDERS']);
  });

  after(async () => {
    await svc?.destroy();
  });

  describe('POST /api/notifications', () => {
    it('needs authentication and the right permission', async () => {
      expect((await api(svc).post('/api/notifications').send({ title: 't', message: 'm' })).status).to.equal(401);
      const noBroadcast = await post(alice.auth, { title: 't', message: 'm' });
      expect(noBroadcast.status).to.equal(403);
      expect(noBroadcast.body.error.message).to.contain('feature:notifications.broadcast');
      expect((await post(alice.auth, { title: 't', message: 'm', user: 'bob' })).status).to.equal(403);
      expect((await post(sender.auth, { title: 't', message: 'm' })).status).to.equal(403);
      const sent = await post(sender.auth, { title: 'hi', message: 'from sender', user: 'bob' });
      expect(sent.status).to.equal(202);
      expect(sent.body.id).to.be.a('string');
      expect(sent.body.seq).to.be.a('number');
    });

    it('answers 400 naming the field', async () => {
      const unknownUser = await post(adminAuth(), { title: 't', message: 'm', user: 'no-such-user' });
      expect(unknownUser.status).to.equal(400);
      expect(unknownUser.body.error.details.map((d: any) => d.field)).to.deep.equal(['user']);
      const bad = await post(adminAuth(), { title: '', message: 5, level: 'loud', link: 'javascript:alert(1)', colour: 'red' });
      expect(bad.status).to.equal(400);
      expect(bad.body.error.code).to.equal('validation_failed');
      expect(bad.body.error.details.map((d: any) => d.field).sort()).to.deep.equal(['colour', 'level', 'link', 'message', 'title']);
      // each in words a person reads (not joi's "failed custom validation because")
      expect(bad.body.error.details.find((d: any) => d.field === 'link').message).to.equal('must be an http(s) URL or a path starting with /');
      expect((await api(svc).post('/api/notifications').set('Authorization', adminAuth()).type('json').send('{nope')).status).to.equal(400);
      expect((await post(adminAuth(), [1, 2])).status).to.equal(400);
    });

    it('requires a title and a message, or for a clear only the id', async () => {
      const empty = await post(adminAuth(), {});
      expect(empty.status).to.equal(400);
      expect(empty.body.error.details.map((d: any) => d.field).sort()).to.deep.equal(['message', 'title']);
      const clearNoId = await post(adminAuth(), { action: 'clear' });
      expect(clearNoId.status).to.equal(400);
      expect(clearNoId.body.error.details.map((d: any) => d.field)).to.deep.equal(['id']);
      const clear = await post(adminAuth(), { id: 'never-stored', action: 'clear' });
      expect(clear.status).to.equal(202);
      expect(clear.body).to.deep.equal({ id: 'never-stored', seq: null });
    });
  });

  describe('visibility and read state', () => {
    let broadcast: { id: string; seq: number };
    let toAlice: { id: string; seq: number };
    let toBob: { id: string; seq: number };

    before(async () => {
      broadcast = (await post(adminAuth(), { title: 'maintenance', message: 'tonight', level: 'warning', link: '/status' })).body;
      toAlice = (await post(adminAuth(), { title: 'alice only', message: 'a', user: 'alice' })).body;
      toBob = (await post(adminAuth(), { title: 'bob only', message: 'b', user: bob.id })).body;
    });

    it('shows a user broadcasts and their own notifications, never another user’s', async () => {
      const a = await list(alice.auth, '?limit=200');
      const ids = a.notifications.map((n) => n.id);
      expect(ids).to.include(broadcast.id).and.include(toAlice.id).and.not.include(toBob.id);
      const b = await list(bob.auth, '?limit=200');
      expect(b.notifications.map((n) => n.id))
        .to.include(toBob.id)
        .and.not.include(toAlice.id);
      // not even an administrator sees a notification addressed to someone else
      const admin = await list(adminAuth(), '?limit=200');
      expect(admin.notifications.map((n) => n.id))
        .to.include(broadcast.id)
        .and.not.include(toAlice.id)
        .and.not.include(toBob.id);
      const system = await list(`Bearer ${SYSTEM_KEY}`, '?limit=200');
      expect(system.notifications.map((n) => n.id)).to.not.include(toAlice.id);
    });

    it('lists newest first with the documented fields', async () => {
      const a = await list(alice.auth);
      const seqs = a.notifications.map((n) => n.seq);
      expect(seqs).to.deep.equal([...seqs].sort((x, y) => y - x));
      const b = a.notifications.find((n) => n.id === broadcast.id);
      expect(b).to.include({ title: 'maintenance', message: 'tonight', level: 'warning', link: '/status', read: false, broadcast: true, seq: broadcast.seq });
      expect(b.source).to.equal(null);
      expect(new Date(b.created_at).toISOString()).to.equal(b.created_at);
      expect(a.notifications.find((n) => n.id === toAlice.id).broadcast).to.equal(false);
      expect(a.last_seq).to.be.at.least(toBob.seq);
    });

    it('keeps read state per user, also for one broadcast row', async () => {
      const before = await list(bob.auth);
      expect((await api(svc).post(`/api/notifications/${broadcast.id}/read`).set('Authorization', alice.auth)).status).to.equal(204);
      const a = await list(alice.auth, '?limit=200');
      expect(a.notifications.find((n) => n.id === broadcast.id).read).to.equal(true);
      const b = await list(bob.auth, '?limit=200');
      expect(b.notifications.find((n) => n.id === broadcast.id).read).to.equal(false);
      expect(b.unread).to.equal(before.unread);
      const unreadOnly = await list(alice.auth, '?unread=true&limit=200');
      expect(unreadOnly.notifications.map((n) => n.id))
        .to.include(toAlice.id)
        .and.not.include(broadcast.id);
      expect(unreadOnly.notifications.every((n) => n.read === false)).to.equal(true);
      expect(a.unread).to.equal(unreadOnly.notifications.length);
      // a broadcast read by a user is still one row: no per-user copies
      const rows = await svc.service.db('notifications').where({ id: broadcast.id });
      expect(rows).to.have.length(1);
    });

    it('answers 404 for what the user cannot see', async () => {
      expect((await api(svc).post(`/api/notifications/${toBob.id}/read`).set('Authorization', alice.auth)).status).to.equal(404);
      expect((await api(svc).delete(`/api/notifications/${toBob.id}`).set('Authorization', alice.auth)).status).to.equal(404);
      expect((await api(svc).post('/api/notifications/does-not-exist/read').set('Authorization', alice.auth)).status).to.equal(404);
      expect((await api(svc).post('/api/notifications/bad%20id/read').set('Authorization', alice.auth)).status).to.equal(400);
      const b = await list(bob.auth, '?limit=200');
      expect(b.notifications.find((n) => n.id === toBob.id).read).to.equal(false);
    });

    it('dismisses for one user only', async () => {
      expect((await api(svc).delete(`/api/notifications/${broadcast.id}`).set('Authorization', bob.auth)).status).to.equal(204);
      expect((await list(bob.auth, '?limit=200')).notifications.map((n) => n.id)).to.not.include(broadcast.id);
      expect((await list(alice.auth, '?limit=200')).notifications.map((n) => n.id)).to.include(broadcast.id);
      // updating it by id brings the new version back as unread
      const again = await post(adminAuth(), { id: broadcast.id, title: 'maintenance moved', message: 'tomorrow' });
      expect(again.status).to.equal(202);
      const b = (await list(bob.auth, '?limit=200')).notifications.find((n) => n.id === broadcast.id);
      expect(b).to.include({ title: 'maintenance moved', read: false, seq: again.body.seq });
      expect((await list(alice.auth, '?limit=200')).notifications.find((n) => n.id === broadcast.id).read).to.equal(false);
    });

    it('marks everything read with read-all, per user', async () => {
      expect((await api(svc).post('/api/notifications/read-all').set('Authorization', alice.auth)).status).to.equal(204);
      const a = await list(alice.auth, '?limit=200');
      expect(a.unread).to.equal(0);
      expect(a.notifications.every((n) => n.read)).to.equal(true);
      expect((await list(bob.auth)).unread).to.be.greaterThan(0);
      const fresh = await post(adminAuth(), { title: 'after read-all', message: 'new' });
      const after = await list(alice.auth, '?unread=true');
      expect(after.notifications.map((n) => n.id)).to.deep.equal([fresh.body.id]);
      expect(after.unread).to.equal(1);
    });
  });

  describe('since and limit', () => {
    it('pages forward from `since` without gaps or repeats', async () => {
      const start = (await list(alice.auth)).last_seq;
      const sent: number[] = [];
      for (let i = 0; i < 7; i++) {
        const target = i % 3 === 2 ? { user: 'bob' } : i % 3 === 1 ? { user: 'alice' } : {};
        const r = await post(adminAuth(), { title: `page ${i}`, message: 'p', ...target });
        if (!('user' in target) || target.user === 'alice') sent.push(r.body.seq);
      }
      const seen: number[] = [];
      let since = start;
      for (let guard = 0; guard < 10; guard++) {
        const page = await list(alice.auth, `?since=${since}&limit=2`);
        seen.push(...page.notifications.map((n) => n.seq));
        expect(page.last_seq).to.be.at.least(since);
        if (page.notifications.length < 2) break;
        since = page.last_seq;
      }
      expect(seen).to.deep.equal(sent);
    });

    it('includes clears after `since`, so a catching-up client can drop them', async () => {
      const start = (await list(alice.auth)).last_seq;
      const made = await post(adminAuth(), { id: 'to-clear', title: 'soon gone', message: 'x' });
      const cleared = await post(adminAuth(), { id: 'to-clear', action: 'clear' });
      expect(cleared.body.seq).to.be.greaterThan(made.body.seq);
      const page = await list(alice.auth, `?since=${start}`);
      const entry = page.notifications.find((n) => n.id === 'to-clear');
      expect(entry).to.include({ cleared: true, seq: cleared.body.seq });
      expect((await list(alice.auth, '?limit=200')).notifications.map((n) => n.id)).to.not.include('to-clear');
      expect((await api(svc).post('/api/notifications/to-clear/read').set('Authorization', alice.auth)).status).to.equal(404);
    });

    it('validates the query', async () => {
      for (const q of ['?limit=0', '?limit=201', '?since=-1', '?since=abc', '?unread=maybe', '?other=1', '?since=1&before=5']) {
        const res = await api(svc).get(`/api/notifications${q}`).set('Authorization', alice.auth);
        expect(res.status, q).to.equal(400);
      }
      expect((await api(svc).get('/api/notifications')).status).to.equal(401);
    });
  });
});
