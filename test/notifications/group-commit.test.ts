import crypto from 'node:crypto';
import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import { GatewayClient, type SocketFactory } from '../../src/client/gateway-client.js';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { eventually } from '../plugins/helpers.js';
import { wsUrl } from '../gateway/helpers.js';
import { githubExample, hmacHex } from './scm/fixtures/load.js';

const SECRET = 'group-commit-webhook-secret-0123456789';

/** Many writers at once: batched into few transactions, every acknowledged one stored once, every push in seq order. */
describe('notifications: group commit, bulk sends, history pages', function () {
  this.timeout(60_000);
  let svc: TestService;
  const clients: GatewayClient[] = [];
  const admin = { Authorization: adminAuth() };

  before(async () => {
    svc = await startService({ env: { SERVICE_SCM_WEBHOOK_SECRET: SECRET } });
    for (const name of ['gina', 'hank']) {
      await request(svc.url)
        .post('/api/users')
        .set(admin)
        .send({ username: name, password: `${name}-password-1`, groups: ['INT_USER'] })
        .expect(201);
    }
  });
  afterEach(() => {
    for (const c of clients.splice(0)) c.close();
  });
  after(async () => svc?.destroy());

  const client = (headers: Record<string, string>) => {
    const seqs: number[] = [];
    const c = new GatewayClient({ url: wsUrl(svc), WebSocket: WebSocket as unknown as SocketFactory, headers });
    c.on('notification', ({ payload }) => payload.seq !== null && seqs.push(payload.seq));
    clients.push(c);
    return { c, seqs };
  };
  const countRows = async () => Number(((await svc.service.db('notifications').count({ n: '*' }).first()) as { n: number }).n);

  it('500 concurrent notify calls from HTTP, the bus, ws frames and the webhook: stored once each, unique increasing seqs, pushed in order with no gap', async () => {
    const watchers = [client(admin), client({ Authorization: 'Basic ' + Buffer.from('gina:gina-password-1').toString('base64') })];
    await Promise.all(watchers.map((w) => w.c.ready()));
    // ws senders within their frame budget (a burst of 60 each)
    const senders = [client(admin), client(admin), client(admin)];
    await Promise.all(senders.map((x) => x.c.ready()));
    const before = await countRows();
    const start = (await request(svc.url).get('/api/notifications?limit=1').set(admin).expect(200)).body.last_seq as number;
    const batchesBefore = svc.service.notifications.service.stats.batches;

    const acked: string[] = [];
    const work: Promise<unknown>[] = [];
    for (let i = 0; i < 200; i++) {
      const body = i % 2 ? { title: `http ${i}`, message: 'm' } : { title: `http ${i}`, message: 'm', user: 'gina' };
      work.push(
        request(svc.url)
          .post('/api/notifications')
          .set(admin)
          .send(body)
          .expect(202)
          .then((r) => acked.push(r.body.id)),
      );
    }
    for (let i = 0; i < 100; i++) {
      const id = `bus-${i}`;
      if (i % 2) svc.service.bus.emit('system:notify', { id, title: `bus ${i}`, message: 'm' });
      else svc.service.bus.emit('user:notify', { id, title: `bus ${i}`, message: 'm', user: 'hank' });
    }
    for (let i = 0; i < 150; i++) senders[i % 3].c.send('system:notify', { id: `ws-${i}`, title: `ws ${i}`, message: 'm' });
    const push = githubExample('push', (e) => e.ref === 'refs/heads/master' && !e.deleted);
    for (let i = 0; i < 50; i++) {
      const body = JSON.stringify({ ...push, after: crypto.randomUUID().replace(/-/g, '').padEnd(40, '0') });
      work.push(
        request(svc.url)
          .post('/api/notifications/webhook/scm')
          .set({
            'Content-Type': 'application/json',
            'X-GitHub-Event': 'push',
            'X-GitHub-Delivery': crypto.randomUUID(),
            'X-Hub-Signature-256': `sha256=${hmacHex(Buffer.from(body), SECRET)}`,
          })
          .send(body)
          .expect(202)
          .then((r) => acked.push(r.body.notification_id)),
      );
    }
    await Promise.all(work);
    // bus and ws writes are not answered: they are done once their rows are there
    await eventually(async () => expect(await countRows()).to.equal(before + 500), 10_000, 50);

    const rows: Array<{ id: string; seq: number; user_id: string | null }> = await svc.service
      .db('notifications')
      .where('seq', '>', start)
      .orderBy('seq')
      .select('id', 'seq', 'user_id');
    expect(rows).to.have.length(500);
    expect(new Set(rows.map((r) => r.id)).size).to.equal(500);
    // one seq range, no hole: seqs are contiguous after the start
    expect(rows.map((r) => Number(r.seq))).to.deep.equal(rows.map((_, i) => start + 1 + i));
    for (const id of acked) expect(rows.some((r) => r.id === id)).to.equal(true);
    // written in batches, not one transaction each
    const batches = svc.service.notifications.service.stats.batches - batchesBefore;
    expect(batches, `${batches} transactions for 500 notifications`).to.be.below(500 / 3);

    const broadcasts = rows.filter((r) => r.user_id === null).map((r) => Number(r.seq));
    const ginaId = (await svc.service.db('users').where({ username: 'gina' }).first('id')).id as string;
    const ginasView = rows.filter((r) => r.user_id === null || r.user_id === ginaId).map((r) => Number(r.seq));
    await eventually(() => expect(watchers[0].seqs.filter((s) => s > start)).to.deep.equal(broadcasts), 5000, 50);
    await eventually(() => expect(watchers[1].seqs.filter((s) => s > start)).to.deep.equal(ginasView), 5000, 50);
  });

  it('bulk: 1,000 notifications in one request, one transaction, seqs in input order', async () => {
    const batches = svc.service.notifications.service.stats.batches;
    const items = Array.from({ length: 1000 }, (_, i) =>
      i % 3 ? { title: `bulk ${i}`, message: 'm', user: i % 2 ? 'gina' : 'hank' } : { title: `bulk ${i}`, message: 'm' },
    );
    const res = await request(svc.url).post('/api/notifications/batch').set(admin).send({ notifications: items }).expect(202);
    const out = res.body.notifications as Array<{ id: string; seq: number }>;
    expect(out).to.have.length(1000);
    expect(out.map((o) => o.seq)).to.deep.equal(out.map((_, i) => out[0].seq + i));
    expect(svc.service.notifications.service.stats.batches - batches).to.equal(1);
    const stored = await svc.service
      .db('notifications')
      .whereIn(
        'id',
        out.slice(0, 3).map((o) => o.id),
      )
      .orderBy('seq')
      .select('title');
    expect(stored.map((r: { title: string }) => r.title)).to.deep.equal(['bulk 0', 'bulk 1', 'bulk 2']);
  });

  it('bulk: any bad item is a 400 naming its index and field, and nothing is written', async () => {
    const before = await countRows();
    const cases: Array<[unknown, string[]]> = [
      [
        {
          notifications: [
            { title: 'ok', message: 'm' },
            { title: '', message: 'm' },
            { title: 'x', message: 5, level: 'loud' },
          ],
        },
        ['notifications[1].title', 'notifications[2].message', 'notifications[2].level'],
      ],
      [
        {
          notifications: [
            { title: 'ok', message: 'm' },
            { title: 'who', message: 'm', user: 'nobody-at-all' },
          ],
        },
        ['notifications[1].user'],
      ],
      [{ notifications: [] }, ['notifications']],
      [{ notifications: Array.from({ length: 1001 }, () => ({ title: 't', message: 'm' })) }, ['notifications']],
      [{ nope: true }, ['notifications', 'nope']],
    ];
    for (const [body, fields] of cases) {
      const res = await request(svc.url)
        .post('/api/notifications/batch')
        .set(admin)
        .send(body as object)
        .expect(400);
      expect(res.body.error.details.map((d: { field: string }) => d.field)).to.include.members(fields);
    }
    // an id of another audience: 409, nothing written
    await request(svc.url).post('/api/notifications').set(admin).send({ id: 'for-gina', title: 't', message: 'm', user: 'gina' }).expect(202);
    const conflict = await request(svc.url)
      .post('/api/notifications/batch')
      .set(admin)
      .send({
        notifications: [
          { title: 'a', message: 'm' },
          { id: 'for-gina', title: 'b', message: 'm' },
        ],
      })
      .expect(409);
    expect(conflict.body.error.details).to.deep.equal([{ field: 'notifications[1].id', message: 'is in use by a notification for another audience' }]);
    expect(await countRows()).to.equal(before + 1);
    // each kind needs its permission
    await request(svc.url)
      .post('/api/notifications/batch')
      .set('Authorization', 'Basic ' + Buffer.from('gina:gina-password-1').toString('base64'))
      .send({ notifications: [{ title: 'a', message: 'm', user: 'hank' }] })
      .expect(403);
  });

  it('bulk: a clear of an id never stored is pushed without a seq', async () => {
    const res = await request(svc.url)
      .post('/api/notifications/batch')
      .set(admin)
      .send({
        notifications: [
          { id: 'bulk-never-stored', action: 'clear' },
          { title: 'after it', message: 'm' },
        ],
      })
      .expect(202);
    expect(res.body.notifications[0]).to.deep.equal({ id: 'bulk-never-stored', seq: null });
    expect(res.body.notifications[1].seq).to.be.a('number');
  });

  it('a database error inside a batch fails exactly the callers of that batch, and none of it is visible', async () => {
    const db = svc.service.db;
    const pg = db.client.config.client === 'pg';
    if (pg) {
      await db.raw(
        `CREATE OR REPLACE FUNCTION poison() RETURNS trigger AS $$ BEGIN IF NEW.title = 'poison' THEN RAISE EXCEPTION 'poisoned row'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql`,
      );
      await db.raw('CREATE TRIGGER poison BEFORE INSERT ON notifications FOR EACH ROW EXECUTE FUNCTION poison()');
    } else {
      await db.raw(`CREATE TRIGGER poison BEFORE INSERT ON notifications WHEN NEW.title = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END`);
    }
    try {
      const service = svc.service.notifications.service;
      const before = await countRows();
      // the same moment: one batch
      const doomed = [
        service.notify('broadcast', { title: 'poison', message: 'm' }),
        ...Array.from({ length: 10 }, (_, i) => service.notify('broadcast', { title: `bystander ${i}`, message: 'm' })),
      ];
      const outcomes = await Promise.allSettled(doomed);
      expect(outcomes.every((o) => o.status === 'rejected')).to.equal(true);
      expect(String((outcomes[0] as PromiseRejectedResult).reason)).to.match(/poisoned row/);
      expect(await countRows()).to.equal(before);
      // the next batch is fine
      const later = await Promise.all(Array.from({ length: 5 }, (_, i) => service.notify('broadcast', { title: `later ${i}`, message: 'm' })));
      expect(later.every((r) => r.seq !== null)).to.equal(true);
      expect(await countRows()).to.equal(before + 5);
    } finally {
      await db.raw('DROP TRIGGER IF EXISTS poison' + (pg ? ' ON notifications' : ''));
    }
  });

  it('a batch of new notifications is stored as sent, whatever its characters; generated ids are UUIDv7s in time order', async () => {
    // on PostgreSQL such a batch goes as one array a column: quotes, braces, backslashes and the word NULL must survive it
    const odd = ['quote \' " \\ { } , ( )', 'NULL', 'null', '', 'emoji 🙂 and ünïcödé', '{"a":[1,2]}', 'line\nbreak\ttab'];
    const items = odd.map((message, i) => ({ title: i === 1 ? 'NULL' : `odd ${i}`, message, user: 'gina', link: i % 2 ? null : '/x?a=1,2' }));
    const res = await request(svc.url).post('/api/notifications/batch').set(admin).send({ notifications: items }).expect(202);
    const out = res.body.notifications as Array<{ id: string; seq: number }>;
    const rows: Array<{ id: string; title: string; message: string; link: string | null; source: string | null }> = await svc.service
      .db('notifications')
      .whereIn(
        'id',
        out.map((o) => o.id),
      )
      .orderBy('seq')
      .select('id', 'title', 'message', 'link', 'source');
    expect(rows.map((r) => [r.title, r.message, r.link, r.source])).to.deep.equal(items.map((n) => [n.title, n.message, n.link, null]));
    // version 7: the first 48 bits are the time in ms, so an id of a later millisecond sorts after (within one, the rest is random)
    for (const { id } of out) expect(id).to.match(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const msOf = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);
    expect(Math.abs(msOf(out[0].id) - Date.now())).to.be.below(60_000);
    await new Promise((r) => setTimeout(r, 5));
    const later = (await request(svc.url).post('/api/notifications').set(admin).send({ title: 'later', message: 'm' }).expect(202)).body.id as string;
    expect(out.every((o) => o.id < later)).to.equal(true);
  });

  it('history pages: `before` gives the older page, newest first', async () => {
    const made = [];
    for (let i = 0; i < 5; i++)
      made.push(
        (
          await request(svc.url)
            .post('/api/notifications')
            .set(admin)
            .send({ title: `page ${i}`, message: 'm', user: 'hank' })
            .expect(202)
        ).body.seq as number,
      );
    const hank = { Authorization: 'Basic ' + Buffer.from('hank:hank-password-1').toString('base64') };
    const first = (await request(svc.url).get('/api/notifications?limit=2').set(hank).expect(200)).body.notifications.map((n: { seq: number }) => n.seq);
    expect(first).to.deep.equal([made[4], made[3]]);
    const older = (await request(svc.url).get(`/api/notifications?limit=2&before=${first[1]}`).set(hank).expect(200)).body.notifications.map(
      (n: { seq: number }) => n.seq,
    );
    expect(older).to.deep.equal([made[2], made[1]]);
    const both = await request(svc.url).get('/api/notifications?since=1&before=5').set(hank).expect(400);
    expect(both.body.error.details).to.deep.equal([{ field: 'before', message: 'cannot be given with since' }]);
    await request(svc.url).get('/api/notifications?before=0').set(hank).expect(400);
  });
});
