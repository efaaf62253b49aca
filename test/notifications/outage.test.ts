import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import knex from 'knex';
import { expect } from 'chai';
import WebSocket from 'ws';
import { GatewayClient, type SocketFactory } from '../../src/client/gateway-client.js';
import { NotificationRetention } from '../../src/notifications/retention.js';
import { createLogger } from '../../src/log.js';
import { adminAuth, startService, type TestService } from '../support/service.js';
import { startPostgres, type TestPostgres } from '../support/postgres.js';
import { eventually } from '../plugins/helpers.js';
import { wsUrl } from '../gateway/helpers.js';

const admin = { authorization: adminAuth(), 'content-type': 'application/json' };

/** POSTs a notification; the status and, for 202, its id. Never throws for a status. */
async function post(svc: TestService, title: string): Promise<{ status: number; id?: string; ms: number; body: any; retryAfter: string | null }> {
  const t = Date.now();
  const res = await fetch(`${svc.url}/api/notifications`, { method: 'POST', headers: admin, body: JSON.stringify({ title, message: 'm' }) });
  const body = await res.json().catch(() => null);
  return { status: res.status, id: body?.id, ms: Date.now() - t, body, retryAfter: res.headers.get('retry-after') };
}

describe('notifications when the database goes away', function () {
  this.timeout(120_000);

  describe('PostgreSQL stopped and started again under load (a throwaway cluster)', () => {
    let pg: TestPostgres;
    let svc: TestService;

    before(async () => {
      pg = await startPostgres();
      const admin = knex({ client: 'pg', connection: pg.url });
      await admin.raw('CREATE DATABASE outage');
      await admin.destroy();
      svc = await startService({ databaseUrl: pg.url.replace(/\/postgres$/, '/outage') });
    });
    after(async () => {
      // its data dir goes too; the database goes with the throwaway cluster
      await svc?.destroy();
      await pg?.destroy();
    });

    it('answers only 202 or 503 (within 2 s), /readyz goes 503 and back, nothing acknowledged is lost, clients resume to a complete history', async () => {
      const watcher = new GatewayClient({ url: wsUrl(svc), WebSocket: WebSocket as unknown as SocketFactory, headers: { Authorization: adminAuth() } });
      const seen = new Set<string>();
      watcher.on('notification', ({ payload }) => seen.add(payload.id));
      await watcher.ready();
      const answers: Array<Awaited<ReturnType<typeof post>>> = [];
      let stop = false;
      // four writers in a loop for the whole test
      const load = Promise.all(
        Array.from({ length: 4 }, async (_, w) => {
          for (let i = 0; !stop; i++) {
            answers.push(await post(svc, `w${w}-${i}`));
            await new Promise((r) => setTimeout(r, 10));
          }
        }),
      );
      await new Promise((r) => setTimeout(r, 500));
      await pg.stop();
      await eventually(async () => expect((await fetch(`${svc.url}/readyz`)).status).to.equal(503), 3000, 100);
      const readyz = await (await fetch(`${svc.url}/readyz`)).json();
      expect(readyz.status).to.equal('unavailable');
      await new Promise((r) => setTimeout(r, 1500));
      // the WebSocket connection stayed open through it
      expect(watcher.state).to.equal('live');
      await pg.start();
      const upAt = Date.now();
      await eventually(async () => expect((await fetch(`${svc.url}/readyz`)).status).to.equal(200), 5000, 50);
      const readyAgainMs = Date.now() - upAt;
      await new Promise((r) => setTimeout(r, 500));
      stop = true;
      await load;

      const statuses = new Set(answers.map((a) => a.status));
      expect([...statuses].sort()).to.deep.equal([202, 503]);
      for (const a of answers.filter((x) => x.status === 503)) {
        expect(a.body.error.code).to.equal('unavailable');
        expect(a.retryAfter).to.match(/^\d+$/);
        expect(a.ms, 'a 503 within 2 s').to.be.below(2500);
      }
      expect(readyAgainMs, `/readyz 200 ${readyAgainMs} ms after the database came back`).to.be.below(1500);
      const acked = answers.filter((a) => a.status === 202).map((a) => a.id!);
      const stored = new Set((await svc.service.db('notifications').whereIn('id', acked).select('id')).map((r: { id: string }) => r.id));
      expect(acked.filter((id) => !stored.has(id))).to.deep.equal([]);
      // a client resuming from the start gets the complete history
      const late = new GatewayClient({ url: wsUrl(svc), WebSocket: WebSocket as unknown as SocketFactory, headers: { Authorization: adminAuth() }, since: 0 });
      const replayed = new Set<string>();
      late.on('notification', ({ payload }) => replayed.add(payload.id));
      await late.ready();
      expect(acked.filter((id) => !replayed.has(id))).to.deep.equal([]);
      // and the one that watched live catches up by resuming
      watcher.send('notifications:resume', { since: 0 });
      await eventually(() => expect(acked.filter((id) => !seen.has(id))).to.deep.equal([]), 5000, 50);
      watcher.close();
      late.close();
    });
  });

  describe('SQLite locked by another process', () => {
    let svc: TestService;
    before(async function () {
      // this case is about the SQLite file itself
      svc = await startService({ databaseUrl: null });
    });
    after(async () => svc?.destroy());

    it('answers 503 with Retry-After within 2 s while the file is locked, and 202 once it is free', async () => {
      const other = new BetterSqlite3(path.join(svc.dataDir, 'service.sqlite'));
      other.exec('BEGIN EXCLUSIVE');
      try {
        const locked = await post(svc, 'while locked');
        expect(locked.status).to.equal(503);
        expect(locked.body.error.code).to.equal('unavailable');
        expect(locked.retryAfter).to.equal('2');
        expect(locked.ms).to.be.below(2500);
      } finally {
        other.exec('ROLLBACK');
        other.close();
      }
      expect((await post(svc, 'after the lock')).status).to.equal(202);
    });
  });

  describe('retention', () => {
    let svc: TestService;
    before(async () => {
      svc = await startService();
    });
    after(async () => svc?.destroy());

    it('deletes old rows and rows beyond the per-user cap in batches; a resume from before the kept window is told truncated', async () => {
      const service = svc.service.notifications.service;
      const first = await service.notify('broadcast', { title: 'ancient', message: 'm' });
      for (let i = 0; i < 24; i++) await service.notify('broadcast', { title: `b${i}`, message: 'm' });
      // the first one last changed long ago
      await svc.service
        .db('notifications')
        .where({ id: first.id })
        .update({ updated_at: Date.now() - 100 * 86_400_000 });
      const retention = new NotificationRetention(svc.service.db, createLogger('silent'), { retentionMs: 90 * 86_400_000, maxPerUser: 10, batchSize: 4 });
      const deleted = await retention.run();
      expect(deleted).to.equal(15); // the ancient one, then 14 beyond the newest 10 broadcasts
      const left = await svc.service.db('notifications').whereNull('user_id').count({ n: '*' }).first();
      expect(Number((left as { n: number }).n)).to.equal(10);
      const watermark = await retention.watermark();
      expect(watermark).to.be.greaterThan(first.seq!);

      const client = new GatewayClient({
        url: wsUrl(svc),
        WebSocket: WebSocket as unknown as SocketFactory,
        headers: { Authorization: adminAuth() },
        since: 0,
      });
      const truncated: number[] = [];
      client.on('truncated', ({ last_seq }) => truncated.push(last_seq));
      const got: number[] = [];
      client.on('notification', ({ payload }) => got.push(payload.seq!));
      await client.ready();
      expect(truncated).to.have.length(1);
      expect(got).to.have.length(10);
      client.close();
      const page = await fetch(`${svc.url}/api/notifications?since=0`, { headers: admin }).then((r) => r.json());
      expect(page.truncated).to.equal(true);
      const recent = await fetch(`${svc.url}/api/notifications?since=${watermark}`, { headers: admin }).then((r) => r.json());
      expect(recent).not.to.have.property('truncated');
    });
  });
});
