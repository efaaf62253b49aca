import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import crypto from 'node:crypto';
import { getEventListeners } from 'node:events';
import knex from 'knex';
import request from 'supertest';
import { loadConfig } from '../../src/config.js';
import { Service } from '../../src/service.js';
import { createLogger } from '../../src/log.js';
import { freshDatabase, testEnv, PG_URL, adminAuth } from '../support/service.js';
import { trackDatabase } from '../support/leftovers.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('boot sequence', () => {
  it('emits db:connected -> iam:ready -> system:boot_complete in order', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-boot-'));
    const db = await freshDatabase();
    const service = new Service(loadConfig(testEnv(dataDir, db.url)), { logger: createLogger('silent') });
    const order: string[] = [];
    service.bus.on('db:connected', () => void order.push('db:connected'));
    service.bus.on('iam:ready', () => void order.push('iam:ready'));
    service.bus.on('system:boot_complete', () => void order.push('system:boot_complete'));
    try {
      await service.start();
      await service.booted();
      expect(order).to.deep.equal(['db:connected', 'iam:ready', 'system:boot_complete']);
      // seeded before iam:ready: the admin can authenticate
      await request(service.url).get('/api/me').set('Authorization', adminAuth()).expect(200);
    } finally {
      await service.stop();
      await db.drop();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('answers /readyz 503 and /api 503 booting while the database is unreachable, then completes boot when it comes', async function () {
    this.timeout(30000);
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-boot-'));
    let databaseUrl: string;
    let makeReachable: () => Promise<void>;
    let cleanup: () => Promise<void>;
    if (PG_URL) {
      // a database that does not exist yet
      const name = `svc_t_late_${crypto.randomBytes(4).toString('hex')}`;
      const u = new URL(PG_URL);
      u.pathname = `/${name}`;
      databaseUrl = u.toString();
      const admin = knex({ client: 'pg', connection: PG_URL, pool: { min: 0, max: 1 } });
      makeReachable = async () => {
        await admin.raw(`CREATE DATABASE "${name}"`);
        trackDatabase(PG_URL, name);
      };
      cleanup = async () => {
        await admin.raw(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
        await admin.destroy();
      };
    } else {
      // the SQLite file's folder cannot be made while a plain file stands in its way
      const blocker = path.join(dataDir, 'db');
      fs.writeFileSync(blocker, 'not a folder');
      databaseUrl = `sqlite://${path.join(blocker, 'service.sqlite')}`;
      makeReachable = async () => fs.rmSync(blocker);
      cleanup = async () => {};
    }
    const lines: string[] = [];
    const log = createLogger('warn', { write: (s: string) => void lines.push(s) } as any);
    const service = new Service(loadConfig(testEnv(dataDir, databaseUrl)), { logger: log, dbRetryMs: 100 });
    try {
      await service.start();
      await sleep(300);
      const r1 = await request(service.url).get('/readyz').expect(503);
      expect(r1.headers['retry-after']).to.exist;
      const api = await request(service.url).get('/api/me').expect(503);
      expect(api.body.error.code).to.equal('booting');
      expect(api.headers['retry-after']).to.exist;
      await request(service.url).get('/healthz').expect(200);
      const retries = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'database unreachable, retrying');
      expect(retries.length).to.be.greaterThan(0);
      expect(retries[0].reason).to.be.a('string');
      expect(lines.join('\n')).not.to.contain('test-secret-key');
      await makeReachable();
      await service.booted();
      await request(service.url).get('/readyz').expect(200);
      await request(service.url).get('/api/me').set('Authorization', adminAuth()).expect(200);
    } finally {
      await service.stop();
      await cleanup();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('waits between database retries without adding a listener each time, and a stop ends the wait', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-boot-'));
    // a SQLite file whose folder a plain file stands in the way of: never reachable
    fs.writeFileSync(path.join(dataDir, 'db'), 'not a folder');
    const databaseUrl = `sqlite://${path.join(dataDir, 'db', 'service.sqlite')}`;
    const lines: string[] = [];
    const log = createLogger('warn', { write: (s: string) => void lines.push(s) } as any);
    const service = new Service(loadConfig(testEnv(dataDir, databaseUrl)), { logger: log, dbRetryMs: 1 });
    const retries = () => lines.filter((l) => l.includes('database unreachable, retrying')).length;
    try {
      await service.start();
      while (retries() < 6) await sleep(20);
      const signal = (service as unknown as { connectAbort: AbortController }).connectAbort.signal;
      // at most the wait in progress listens for the stop
      expect(getEventListeners(signal, 'abort').length).to.be.at.most(1);
    } finally {
      const started = performance.now();
      await service.stop();
      // the wait in progress (up to 64 ms by now) does not hold the stop to its end
      expect(performance.now() - started).to.be.below(2000);
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
