import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import WebSocket from 'ws';
import { GatewayClient, type SocketFactory } from '../../src/client/gateway-client.js';
import { EventBus } from '../../src/bus/bus.js';
import { RedisBridge } from '../../src/bus/redis-bridge.js';
import { adminAuth, basic, freshDatabase, startService, testEnv, type TestDb, type TestService } from '../support/service.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { READY_TIMEOUT_MS, serviceCommand, spawnService, type ServiceProcess } from '../support/process.js';
import { capturingLogger } from '../sockets/helpers.js';
import { eventually } from '../plugins/helpers.js';
import { cli } from '../cli/helpers.js';

const admin = { Authorization: adminAuth() };
const SECRET_KEY = 'test-secret-key-0123456789abcdef0123456789';
/** what the service needs of Redis, and nothing more (docs/deploy.md) */
const BUS_ACL = (user: string, password: string) =>
  `${user} on >${password} resetchannels &service-core:bus -@all +publish +subscribe +unsubscribe +ping +info +select +client|setname`;

/** A ws client on `url` (http) as `who`, recording the titles it is handed. */
function listen(url: string, headers: Record<string, string>) {
  const titles: string[] = [];
  const client = new GatewayClient({
    url: url.replace(/^http/, 'ws') + '/ws',
    WebSocket: WebSocket as unknown as SocketFactory,
    headers,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  client.on('notification', (n) => titles.push((n.payload as { title: string }).title));
  return { client, titles };
}

/** A bridge alone, to see what it logs when Redis refuses it. */
async function loneBridge(url: string) {
  const log = capturingLogger('info');
  const bridge = new RedisBridge({ url, bus: new EventBus(log.logger), log: log.logger, secretKey: SECRET_KEY, instanceId: 'lone' });
  bridge.start();
  await eventually(() => expect(log.text()).to.include('bus bridge cannot reach Redis'), 5000);
  return { bridge, log };
}

/**
 * Two in-process instances on one database exchanging a notification through a Redis that
 * wants credentials; the CLI reaches them too. The password never shows in a log line.
 */
function twoInstancesThrough(title: string, setup: () => Promise<{ redis: TestRedis; url: string; password: string; wrongUrl: string }>) {
  describe(title, function () {
    this.timeout(60_000);
    let redis: TestRedis;
    let url: string;
    let password: string;
    let wrongUrl: string;
    let a: TestService;
    let b: TestService;
    const logs = [capturingLogger('info'), capturingLogger('info')];
    const clients: GatewayClient[] = [];

    before(async () => {
      ({ redis, url, password, wrongUrl } = await setup());
      a = await startService({ env: { SERVICE_REDIS_URL: url }, logger: logs[0]!.logger });
      b = await startService({ dataDir: a.dataDir, databaseUrl: a.databaseUrl, env: { SERVICE_REDIS_URL: url }, logger: logs[1]!.logger });
      for (const s of [a, b]) await eventually(() => expect(s.service.bridge!.isUp).to.equal(true), 10_000);
      await request(a.url)
        .post('/api/users')
        .set(admin)
        .send({ username: 'ada', password: 'ada-password-1', groups: ['INT_USER'] })
        .expect(201);
    });
    after(async () => {
      for (const c of clients.splice(0)) c.close();
      await b?.stop();
      await a?.destroy();
      await redis?.stop();
    });

    it('a notification posted on A reaches a client on B live, and one sent with the CLI too', async () => {
      const onB = listen(b.url, { Authorization: basic('ada', 'ada-password-1') });
      clients.push(onB.client);
      await onB.client.ready();
      await request(a.url).post('/api/notifications').set(admin).send({ title: 'through Redis', message: 'm', user: 'ada' }).expect(202);
      await eventually(() => expect(onB.titles).to.deep.equal(['through Redis']), 2000);
      const run = await cli(testEnv(a.dataDir, a.databaseUrl, { SERVICE_REDIS_URL: url }), [
        'notify',
        '--user',
        'ada',
        '--title',
        'from the CLI',
        '--message',
        'm',
      ]);
      expect(run.code, run.stderr).to.equal(0);
      expect(run.stderr).not.to.include('did not answer');
      expect(run.stderr).not.to.include(password);
      await eventually(() => expect(onB.titles).to.deep.equal(['through Redis', 'from the CLI']), 2000);
    });

    it('the logs name the Redis it reached, never the password', async () => {
      for (const log of logs) {
        const up = log.lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'bus bridge up');
        expect(up.redis).to.include('***@');
        expect(log.text()).not.to.include(password);
      }
    });

    it('with a wrong password the bridge stays down and says why, without either password', async () => {
      const { bridge, log } = await loneBridge(wrongUrl);
      try {
        expect(bridge.isUp).to.equal(false);
        const line = log.lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'bus bridge cannot reach Redis: retrying');
        expect(line.error).to.match(/WRONGPASS/);
        expect(line.redis).to.include('***@');
        expect(log.text()).not.to.include(password);
        expect(log.text()).not.to.include('wrong-password-42');
      } finally {
        await bridge.close();
      }
    });
  });
}

describe('Redis that wants credentials', () => {
  twoInstancesThrough('requirepass: redis://:<password>@host', async () => {
    const password = 'pass-for-default-31415';
    const redis = await startRedis({ password });
    return { redis, password, url: redis.urlFor('', password), wrongUrl: redis.urlFor('', 'wrong-password-42') };
  });

  twoInstancesThrough('an ACL user with only the commands the bus needs: redis://<user>:<password>@host/<db>', async () => {
    const password = 'pass-for-bususer-27182';
    const redis = await startRedis({ users: [BUS_ACL('bususer', password), 'default off'] });
    return { redis, password, url: `${redis.urlFor('bususer', password)}/0`, wrongUrl: redis.urlFor('bususer', 'wrong-password-42') };
  });
});

/**
 * TLS (rediss://) with an ACL user, to a server whose certificate a CA of the test's own signed:
 * the processes trust that CA through NODE_EXTRA_CA_CERTS, as docs/deploy.md says. Separate
 * processes, since Node reads that variable at start only.
 */
describe('Redis over TLS: rediss://', function () {
  this.timeout(120_000);
  const password = 'pass-over-tls-16180';
  let redis: TestRedis;
  let db: TestDb;
  let dataDir: string;
  let url: string;
  let base: TestService;
  const procs: ServiceProcess[] = [];
  let client: GatewayClient | undefined;

  before(async function () {
    // two of them processes: each start may take long on a loaded machine
    this.timeout(2 * READY_TIMEOUT_MS + 60_000);
    redis = await startRedis({ tls: true, users: [BUS_ACL('bususer', password), 'default off'] });
    url = redis.urlFor('bususer', password);
    // the database, migrated and seeded by an instance without Redis
    db = await freshDatabase();
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-tls-'));
    base = await startService({ dataDir, databaseUrl: db.url });
    await request(base.url)
      .post('/api/users')
      .set(admin)
      .send({ username: 'ada', password: 'ada-password-1', groups: ['INT_USER'] })
      .expect(201);
    const env = { SERVICE_REDIS_URL: url, NODE_EXTRA_CA_CERTS: redis.caFile! };
    procs.push(await spawnService({ dataDir, databaseUrl: db.url, env }));
    procs.push(await spawnService({ dataDir, databaseUrl: db.url, env }));
  });
  after(async () => {
    client?.close();
    for (const p of procs) await p.kill('SIGTERM');
    await base?.stop();
    await db?.drop();
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
    await redis?.stop();
  });

  it('two instances exchange a notification over TLS, and the CLI reaches them', async () => {
    const [p1, p2] = procs as [ServiceProcess, ServiceProcess];
    for (const p of procs) await eventually(() => expect(p.output()).to.include('bus bridge up'), 10_000);
    const onP2 = listen(p2.url, { Authorization: basic('ada', 'ada-password-1') });
    client = onP2.client;
    await onP2.client.ready();
    await request(p1.url).post('/api/notifications').set(admin).send({ title: 'over TLS', message: 'm', user: 'ada' }).expect(202);
    await eventually(() => expect(onP2.titles).to.deep.equal(['over TLS']), 2000);

    const env = { ...process.env, ...testEnv(dataDir, db.url, { SERVICE_REDIS_URL: url, NODE_EXTRA_CA_CERTS: redis.caFile! }) };
    const out = await new Promise<{ code: number; stderr: string }>((resolve) => {
      const [node, ...cli] = serviceCommand('cli');
      execFile(
        node!,
        [...cli, 'notify', '--user', 'ada', '--title', 'CLI over TLS', '--message', 'm'],
        { cwd: path.resolve(import.meta.dirname, '../..'), env },
        (err, _stdout, stderr) => resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr }),
      );
    });
    expect(out.code, out.stderr).to.equal(0);
    expect(out.stderr).not.to.include('did not answer');
    await eventually(() => expect(onP2.titles).to.deep.equal(['over TLS', 'CLI over TLS']), 2000);

    for (const p of procs) {
      const up = p
        .output()
        .split('\n')
        .filter((l) => l.includes('bus bridge up'))
        .map((l) => JSON.parse(l))[0];
      expect(up.redis).to.equal(`rediss://bususer:***@localhost:${redis.port}`);
      expect(p.output()).not.to.include(password);
    }
  });

  it('without the CA the certificate is refused: the bridge stays down and says why', async () => {
    const { bridge, log } = await loneBridge(url);
    try {
      expect(bridge.isUp).to.equal(false);
      const line = log.lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'bus bridge cannot reach Redis: retrying');
      expect(line.error).to.match(/certificate/);
      expect(log.text()).not.to.include(password);
    } finally {
      await bridge.close();
    }
  });
});
