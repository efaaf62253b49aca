import { expect } from 'chai';
import { startService, startPeer, adminAuth, type TestService } from '../support/service.js';
import { WsClient, api, createUser, type Frame, type TestUser } from '../gateway/helpers.js';

const notifyFrames = (c: WsClient) => c.frames.filter((f) => f.event === 'system:notify' || f.event === 'user:notify');
const seqsOf = (frames: Frame[]) => frames.map((f) => f.payload.seq as number);

async function post(svc: TestService, body: Record<string, unknown>): Promise<{ id: string; seq: number }> {
  const res = await api(svc).post('/api/notifications').set('Authorization', adminAuth()).send(body);
  expect(res.status, JSON.stringify(res.body)).to.equal(202);
  return res.body;
}

/** Connects, resumes from `since` and waits for notifications:resumed. */
async function reconnectAndResume(svc: TestService, user: TestUser, since: number) {
  const client = await WsClient.basic(svc, user.username, user.password);
  client.send({ event: 'notifications:resume', payload: { since }, ref: 'resume' });
  const resumed = await client.next('notifications:resumed', () => true, 15_000);
  return { client, resumed };
}

describe('notifications resume', function () {
  this.timeout(60_000);

  describe('after a disconnect', () => {
    let svc: TestService;
    let alice: TestUser;
    const clients: WsClient[] = [];

    before(async () => {
      svc = await startService();
      alice = await createUser(svc, 'alice');
      await createUser(svc, 'bob');
    });

    after(async () => {
      await Promise.all(clients.map((c) => c.close()));
      await svc?.destroy();
    });

    it('replays exactly what the user missed, in order, then continues live', async () => {
      const first = await WsClient.basic(svc, alice.username, alice.password);
      clients.push(first);
      const early = await post(svc, { id: 'deploy-1', title: 'deploy started', message: 'v1' });
      const keep = await post(svc, { id: 'keep-1', title: 'will be cleared', message: 'x' });
      await first.next('system:notify', (f) => f.payload.seq === keep.seq);
      const lastSeen = Math.max(...seqsOf(notifyFrames(first)));
      expect(lastSeen).to.equal(keep.seq);
      await first.close();

      // while alice is away
      const b1 = await post(svc, { title: 'broadcast while away', message: 'b1' });
      const forAlice = await post(svc, { title: 'alice, look', message: 'a1', user: 'alice' });
      const forBob = await post(svc, { title: 'bob only', message: 'no', user: 'bob' });
      const update = await post(svc, { id: 'deploy-1', title: 'deploy finished', message: 'v1', level: 'success' });
      const clear = await post(svc, { id: 'keep-1', action: 'clear' });
      expect(early.seq).to.be.lessThan(update.seq);

      const { client, resumed } = await reconnectAndResume(svc, alice, lastSeen);
      clients.push(client);
      const replay = notifyFrames(client);
      expect(seqsOf(replay)).to.deep.equal([b1.seq, forAlice.seq, update.seq, clear.seq]);
      expect(replay.map((f) => f.event)).to.deep.equal(['system:notify', 'user:notify', 'system:notify', 'system:notify']);
      expect(replay[2].payload).to.include({ id: 'deploy-1', title: 'deploy finished' });
      expect(replay[3].payload).to.include({ id: 'keep-1', action: 'clear' });
      expect(replay.some((f) => f.payload.id === forBob.id)).to.equal(false);
      expect(resumed.payload).to.include({ count: 4, more: false });
      expect(resumed.payload.last_seq).to.be.at.least(clear.seq);
      expect(resumed.ref).to.equal('resume');

      const live = await post(svc, { title: 'live again', message: 'l' });
      await client.next('system:notify', (f) => f.payload.seq === live.seq);
      await client.roundTrip();
      expect(seqsOf(notifyFrames(client)).filter((s) => s === live.seq)).to.have.length(1);

      // the history API with `since` says the same
      const hist = await api(svc).get(`/api/notifications?since=${lastSeen}`).set('Authorization', alice.auth);
      expect(hist.body.notifications.map((n: any) => n.seq)).to.deep.equal([b1.seq, forAlice.seq, update.seq, clear.seq, live.seq]);
    });

    it('has no gap and no duplicate when notifications keep coming during the resume', async () => {
      const probe = await WsClient.basic(svc, alice.username, alice.password);
      const since = probe.frames[0].payload.last_seq as number;
      await probe.close();

      let producing = true;
      const produced: number[] = [];
      const producer = (async () => {
        for (let i = 0; producing && i < 400; i++) {
          const r = await post(
            svc,
            i % 4 === 3
              ? { title: `bob ${i}`, message: 'x', user: 'bob' }
              : i % 2
                ? { title: `to alice ${i}`, message: 'x', user: 'alice' }
                : { title: `all ${i}`, message: 'x' },
          );
          if (i % 4 !== 3) produced.push(r.seq);
        }
      })();
      // a few for alice before the resume (its replay) and a few after its answer (live pushes),
      // however long this machine takes to post them
      const producedAtLeast = async (n: number) => {
        const deadline = Date.now() + 15_000;
        while (produced.length < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      };
      await producedAtLeast(3);
      const { client, resumed } = await reconnectAndResume(svc, alice, since);
      clients.push(client);
      await producedAtLeast(produced.length + 3);
      producing = false;
      await producer;
      const lastProduced = produced[produced.length - 1];
      const deadline = Date.now() + 15_000;
      while (!seqsOf(notifyFrames(client)).includes(lastProduced) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await client.roundTrip();
      const got = seqsOf(notifyFrames(client));
      expect(new Set(got).size, 'no duplicates').to.equal(got.length);
      expect(
        [...got].sort((a, b) => a - b),
        'nothing missing',
      ).to.deep.equal(produced);
      // both paths were exercised: a replay, and live pushes after it
      expect(resumed.payload.count).to.be.greaterThan(0);
      expect(notifyFrames({ frames: client.frames.slice(client.frames.indexOf(resumed)) } as WsClient).length).to.be.greaterThan(0);
    });
  });

  describe('across a service restart', () => {
    let first: TestService;
    let second: TestService | null = null;
    let alice: TestUser;
    const clients: WsClient[] = [];

    before(async () => {
      first = await startService();
      alice = await createUser(first, 'alice');
      await createUser(first, 'bob');
    });

    after(async () => {
      await Promise.all(clients.map((c) => c.close()));
      await second?.stop();
      await first?.destroy();
    });

    it('replays what was missed before and after the restart, with seqs that keep growing', async () => {
      const c1 = await WsClient.basic(first, alice.username, alice.password);
      clients.push(c1);
      const seen = await post(first, { title: 'seen before restart', message: 's' });
      await c1.next('system:notify', (f) => f.payload.seq === seen.seq);
      await c1.close();

      const beforeStop = [
        await post(first, { title: 'missed 1', message: 'm' }),
        await post(first, { title: 'missed 2 (alice)', message: 'm', user: 'alice' }),
      ];
      await post(first, { title: 'bob only', message: 'b', user: 'bob' });
      await first.stop();

      second = await startService({ dataDir: first.dataDir, databaseUrl: first.databaseUrl });
      const afterStart = [
        await post(second, { title: 'missed 3', message: 'm' }),
        await post(second, { title: 'missed 4 (alice)', message: 'm', user: alice.id }),
      ];
      expect(afterStart[0].seq).to.be.greaterThan(beforeStop[1].seq);

      const { client, resumed } = await reconnectAndResume(second, alice, seen.seq);
      clients.push(client);
      const expected = [...beforeStop, ...afterStart].map((n) => n.seq);
      expect(seqsOf(notifyFrames(client))).to.deep.equal(expected);
      expect(resumed.payload.count).to.equal(4);
      expect(client.frames[0].payload.last_seq).to.be.at.least(afterStart[1].seq);

      const hist = await api(second).get(`/api/notifications?since=${seen.seq}`).set('Authorization', alice.auth);
      expect(hist.body.notifications.map((n: any) => n.seq)).to.deep.equal(expected);
    });
  });
});

describe('resume across two instances', function () {
  this.timeout(60_000);
  let a: TestService;
  let b: TestService;
  before(async () => {
    a = await startService();
    b = await startPeer(a);
  });
  after(async () => {
    await b?.stop();
    await a?.destroy();
  });

  it('replays a seq committed on the other instance even after a later live push here', async () => {
    const user = await createUser(a, 'carol');
    const client = await WsClient.basic(b, user.username, user.password);
    try {
      const welcome = await client.next('gateway:welcome', () => true);
      const since = welcome.payload.last_seq as number;
      // committed on b: pushed live to this connection
      const onB = await post(b, { title: 'from b', message: 'live here' });
      await client.next('system:notify', (f) => f.payload.seq === onB.seq);
      // committed on a afterwards: a higher seq that this connection never saw
      const onA = await post(a, { title: 'from a', message: 'only on the other instance' });
      expect(onA.seq).to.be.greaterThan(onB.seq);
      client.send({ event: 'notifications:resume', payload: { since }, ref: 'r' });
      const resumed = await client.next('notifications:resumed', () => true, 15_000);
      const seqs = seqsOf(notifyFrames(client));
      expect(seqs).to.include(onA.seq);
      // and nothing twice
      expect(seqs.filter((s) => s === onB.seq).length).to.equal(1);
      expect(resumed.payload.last_seq).to.be.at.least(onA.seq);
    } finally {
      await client.close();
    }
  });
});
