import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import request from 'supertest';
import { startService, startPeer, adminAuth, basic, testEnv, SYSTEM_KEY, type TestService } from '../support/service.js';
import { capturingLogger, eventually } from '../sockets/helpers.js';
import { cli } from '../cli/helpers.js';
import { WsClient, sleep } from '../gateway/helpers.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { AuditTrail } from '../../src/iam/audit.js';
import { AUDIT_ACTIONS } from '../../src/iam/audit-types.js';
import { previousStepCode, totpCode } from '../auth/helpers.js';

interface Event {
  seq: number;
  at: string;
  action: string;
  outcome: string;
  actor: { user_id: string | null; username: string; method: string | null; ip: string | null };
  target: { type: string; id: string | null; name: string | null };
  details: Record<string, any>;
}

/**
 * The audit trail (docs/security.md, "Audit trail"): every privileged action and sign-in is one
 * event in a hash chain that `audit verify` checks, searchable over HTTP, streamed over ws,
 * exported by the CLI, and free of secrets.
 */
describe('audit trail', function () {
  this.timeout(60_000);
  let svc: TestService;
  const logs = capturingLogger('info');
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };
  const SECRETS = {
    password: 'a-password-nobody-may-see-1',
    systemKey: 'system-key-that-must-never-be-logged-0123456789',
    webhook: 'webhook-secret-never-logged-42',
    bind: 'bind-password-never-logged-42',
  };

  before(async () => {
    svc = await startService({ logger: logs.logger, env: { SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    await api().put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: SYSTEM_KEY }).expect(204);
  });
  after(async () => svc?.destroy());

  /** The events after `seq`, oldest first (the recorder's batches flushed first). */
  async function since(seq: number): Promise<Event[]> {
    await svc.service.iam.audit.flush();
    const page = await api().get('/api/audit').query({ limit: 500 }).set(sys).expect(200);
    return (page.body.events as Event[]).filter((e) => e.seq > seq).reverse();
  }
  async function head(): Promise<number> {
    await svc.service.iam.audit.flush();
    return ((await api().get('/api/audit').query({ limit: 1 }).set(sys).expect(200)).body.events[0]?.seq as number) ?? 0;
  }
  /** Exactly one event of `action` among `events`, and it. */
  function one(events: Event[], action: string, match: (e: Event) => boolean = () => true): Event {
    const found = events.filter((e) => e.action === action && match(e));
    expect(found, `${action} in ${JSON.stringify(events.map((e) => e.action))}`).to.have.length(1);
    return found[0]!;
  }

  it('records each administrative action over HTTP once, with the actor as resolved, the target and the outcome', async () => {
    const start = await head();
    const created = (
      await api()
        .post('/api/users')
        .set('Authorization', adminAuth())
        .set('X-Forwarded-For', '203.0.113.9')
        .send({ username: 'ann', password: SECRETS.password, groups: ['INT_USER'] })
        .expect(201)
    ).body;
    await api()
      .patch(`/api/users/${created.id}`)
      .set('Authorization', adminAuth())
      .send({ groups: ['INT_VIEWER'], display_name: 'Ann' })
      .expect(200);
    await api()
      .post(`/api/users/${created.id}/password`)
      .set('Authorization', adminAuth())
      .send({ new_password: `${SECRETS.password}-2` })
      .expect(204);
    await api()
      .post('/api/groups')
      .set('Authorization', adminAuth())
      .send({ name: 'auditors', permissions: ['feature:admin.audit'] })
      .expect(201);
    await api().patch('/api/groups/auditors').set('Authorization', adminAuth()).send({ description: 'read the trail' }).expect(200);
    const key = (
      await api()
        .post('/api/me/api-keys')
        .set('Authorization', basic('ann', `${SECRETS.password}-2`))
        .send({ label: 'ci' })
        .expect(201)
    ).body;
    await api().delete(`/api/users/${created.id}/api-keys/${key.id}`).set('Authorization', adminAuth()).expect(204);
    await api().put('/api/settings/webhook-secret').set('Authorization', adminAuth()).send({ secret: SECRETS.webhook }).expect(204);
    await api().patch('/api/settings/auth').set('Authorization', adminAuth()).send({ oidc_label: 'Company SSO' }).expect(200);
    await api().put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: SECRETS.systemKey }).expect(204);
    await api().put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: SYSTEM_KEY }).expect(204);
    await api().delete('/api/groups/auditors').set('Authorization', adminAuth()).expect(204);
    await api().delete(`/api/users/${created.id}`).set('Authorization', adminAuth()).expect(204);
    const events = await since(start);

    const userCreated = one(events, 'user.created');
    expect(userCreated).to.deep.include({ outcome: 'success', target: { type: 'user', id: created.id, name: 'ann' } });
    expect(userCreated.actor).to.include({ username: 'admin', method: 'basic' });
    expect(userCreated.actor.ip).to.be.a('string');
    expect(userCreated.details).to.deep.include({ groups: ['INT_USER'], password: true });
    expect(one(events, 'user.updated').details).to.deep.include({
      groups: ['INT_VIEWER'],
      previous_groups: ['INT_USER'],
      groups_added: ['INT_VIEWER'],
      groups_removed: ['INT_USER'],
    });
    expect(one(events, 'user.password_changed').details).to.deep.equal({ own: false });
    expect(one(events, 'group.created').target).to.deep.equal({ type: 'group', id: 'auditors', name: 'auditors' });
    expect(one(events, 'group.updated').details.fields).to.deep.equal(['description']);
    expect(one(events, 'key.issued').actor.username).to.equal('ann');
    expect(one(events, 'key.revoked').target).to.deep.include({ id: key.id, name: key.label });
    expect(one(events, 'settings.changed', (e) => e.target.id === 'auth').details).to.deep.equal({ fields: ['oidc_label'] });
    expect(one(events, 'settings.changed', (e) => e.target.id === 'scm_webhook_secret').details).to.deep.include({ change: 'set' });
    expect(events.filter((e) => e.action === 'system_key.changed')).to.have.length(2);
    one(events, 'group.deleted');
    one(events, 'user.deleted');
  });

  it('records sign-ins, failures, lockouts, refusals and sign-outs', async () => {
    const start = await head();
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'bea', password: SECRETS.password, groups: ['INT_VIEWER'] })
      .expect(201);
    const ok = await api().post('/api/auth/login').send({ username: 'bea', password: SECRETS.password }).expect(200);
    for (let i = 0; i < 5; i++)
      await api()
        .post('/api/auth/login')
        .send({ username: 'bea', password: `wrong-${i}` })
        .expect(401);
    await api().post('/api/auth/login').send({ username: 'bea', password: SECRETS.password }).expect(429);
    await api().get('/api/users').set('Authorization', `Bearer ${ok.body.token}`).expect(403);
    await api().post('/api/auth/logout').set('Authorization', `Bearer ${ok.body.token}`).expect(204);
    const events = await since(start);
    const login = one(events, 'auth.login');
    expect(login).to.deep.include({ outcome: 'success', target: { type: 'user', id: ok.body.user.id, name: 'bea' } });
    expect(login.details).to.include({ provider: 'local', second_factor: false });
    // the first wrong password at once, the four after it within the window as one event with their count
    const failures = events.filter((e) => e.action === 'auth.login_failed');
    expect(failures.map((e) => e.details.count)).to.deep.equal([undefined, 4]);
    expect(failures[0]).to.deep.include({ outcome: 'failure' });
    expect(failures[0]!.details).to.include({ reason: 'invalid_credentials', via: 'login' });
    expect(failures[1]!.details).to.include({ reason: 'invalid_credentials', via: 'login' });
    expect(one(events, 'auth.locked').outcome).to.equal('denied');
    const denied = one(events, 'request.denied');
    expect(denied).to.deep.include({ outcome: 'denied', target: { type: 'route', id: 'GET /api/users', name: null } });
    expect(denied.details).to.deep.equal({ permission: 'feature:admin.users' });
    expect(one(events, 'auth.logout').actor.username).to.equal('bea');
  });

  it('records refusals by the host boundary, a socket operation over ws, and a refused webhook', async () => {
    const start = await head();
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'plain', password: SECRETS.password, groups: ['INT_ADMIN'] })
      .expect(201);
    await api()
      .post('/api/groups')
      .set('Authorization', basic('plain', SECRETS.password))
      .send({ name: 'evil', permissions: ['socket:*'] })
      .expect(403);
    fs.mkdirSync(path.join(svc.dataDir, 'managed', 'work'), { recursive: true });
    const ws = await WsClient.connect(svc, { headers: { 'X-API-Key': SYSTEM_KEY } });
    try {
      ws.send({
        event: 'socket:request',
        payload: { request_id: 'r1', operation: 'mounts:repair', args: { target_dir: path.join(svc.dataDir, 'managed', 'work'), mode: '0750' } },
      });
      expect((await ws.next('socket:response', (f) => f.payload.request_id === 'r1')).payload.ok).to.equal(true);
    } finally {
      await ws.close();
    }
    await api()
      .post('/api/notifications/webhook/scm')
      .set('X-GitHub-Event', 'ping')
      .set('X-GitHub-Delivery', 'd-1')
      .set('X-Hub-Signature-256', `sha256=${'0'.repeat(64)}`)
      .set('Content-Type', 'application/json')
      .send('{}')
      .expect(401);
    const events = await since(start);
    const refused = one(events, 'group.created');
    expect(refused).to.deep.include({ outcome: 'denied', target: { type: 'group', id: 'evil', name: 'evil' } });
    expect(refused.details.reason).to.match(/only a superadmin/);
    const op = one(events, 'socket.operation');
    expect(op).to.deep.include({ outcome: 'success', target: { type: 'socket', id: 'mounts:repair', name: null } });
    expect(op.actor).to.include({ username: 'system', method: 'system_key' });
    expect(op.details.args).to.include({ mode: '0750' });
    expect(one(events, 'webhook.rejected')).to.deep.include({ outcome: 'denied', target: { type: 'webhook', id: 'github', name: 'GitHub' } });
  });

  it('records what the CLI does, as the cli actor', async () => {
    const start = await head();
    const env = testEnv(svc.dataDir, svc.databaseUrl);
    expect((await cli(env, ['user', 'create', 'cara', '--group', 'INT_VIEWER'])).code).to.equal(0);
    expect((await cli(env, ['key', 'issue', '--user', 'cara'])).code).to.equal(0);
    expect((await cli(env, ['settings', 'set', 'oidc_label', 'From the console'])).code).to.equal(0);
    const events = await since(start);
    for (const action of ['user.created', 'key.issued', 'settings.changed'])
      expect(one(events, action).actor).to.include({ username: 'cli', method: 'cli', user_id: null });
  });

  it("records every refusal a plain administrator meets, whichever layer refuses: the system key, host-related login settings, the bot's password and factors", async () => {
    const start = await head();
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'plainer', password: SECRETS.password, groups: ['INT_ADMIN'] })
      .expect(201);
    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'dockers', permissions: ['socket:container:*'] })
      .expect(201);
    const bot = ((await api().get('/api/users').set(sys).expect(200)).body.users as Array<{ id: string; username: string }>).find((u) => u.username === 'bot')!;
    const plain = { Authorization: basic('plainer', SECRETS.password) };
    const tries = [
      await api().put('/api/settings/system-api-key').set(plain).send({ key: 'a-system-key-the-plain-admin-wants-0123' }),
      await api()
        .patch('/api/settings/auth')
        .set(plain)
        .send({ sso_default_groups: ['dockers'] }),
      await api().post(`/api/users/${bot.id}/password`).set(plain).send({ new_password: 'taken-over-bot-password-1' }),
      await api().delete(`/api/users/${bot.id}/mfa`).set(plain),
    ];
    expect(
      tries.map((r) => r.status),
      JSON.stringify(tries.map((r) => r.body)),
    ).to.deep.equal([403, 403, 403, 403]);
    const denied = (await since(start)).filter((e) => e.outcome === 'denied' && e.actor.username === 'plainer');
    // one event for each, naming what was refused (the writer's action, or the route when the route refused)
    expect(denied, JSON.stringify(denied)).to.have.length(4);
    expect(denied.map((e) => e.details.reason)).to.deep.equal(tries.map((r) => r.body.error.message));
    // each as the action its writer refused
    expect(denied.map((e) => [e.action, e.target.type])).to.deep.equal([
      ['system_key.changed', 'settings'],
      ['settings.changed', 'settings'],
      ['user.password_changed', 'user'],
      ['auth.mfa_reset', 'user'],
    ]);
    for (const e of denied) expect(e.actor.ip).to.be.a('string');
  });

  it('a ws frame refused to its caller is a denied event; a rule a frame handler meets is answered with its code, not internal', async () => {
    const start = await head();
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'wsviewer', password: SECRETS.password, groups: ['INT_VIEWER'] })
      .expect(201);
    const viewer = await WsClient.connect(svc, { headers: { Authorization: basic('wsviewer', SECRETS.password) } });
    const admin = await WsClient.connect(svc, { headers: { 'X-API-Key': SYSTEM_KEY } });
    try {
      viewer.send({ event: 'system:notify', payload: { title: 't', message: 'm' }, ref: 'no' });
      expect((await viewer.next('gateway:error', (f) => f.payload.ref === 'no')).payload.code).to.equal('forbidden');
      admin.send({ event: 'user:notify', payload: { user: 'nobody-at-all', title: 't', message: 'm' }, ref: 'nobody' });
      const answer = (await admin.next('gateway:error', (f) => f.payload.ref === 'nobody')).payload;
      expect(answer.code, JSON.stringify(answer)).not.to.equal('internal');
      expect(answer.message).to.match(/nobody-at-all/);
    } finally {
      await viewer.close();
      await admin.close();
    }
    const denied = one(await since(start), 'request.denied', (e) => e.actor.username === 'wsviewer');
    expect(denied).to.deep.include({ outcome: 'denied', target: { type: 'frame', id: 'system:notify', name: null } });
    expect(denied.actor.method).to.equal('basic');
    expect(denied.actor.ip).to.be.a('string');
  });

  it('a lockout answered to a caller who also sent a credential is one event, and removing nothing records nothing', async () => {
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'lockee', password: SECRETS.password, groups: ['INT_VIEWER'] })
      .expect(201);
    const token = (await api().post('/api/auth/login').send({ username: 'lockee', password: SECRETS.password }).expect(200)).body.token as string;
    const start = await head();
    for (let i = 0; i < 6; i++)
      await api()
        .post('/api/auth/login')
        .set('Authorization', `Bearer ${token}`)
        .send({ username: 'lockee', password: `wrong-${i}` });
    const events = await since(start);
    expect(events.filter((e) => e.action === 'request.denied')).to.deep.equal([]);
    expect(one(events, 'auth.locked').outcome).to.equal('denied');
    // a passkey id that is not the caller's: 404, and no factor was removed, so no event
    await api().delete('/api/me/mfa/webauthn/00000000-0000-4000-8000-0000000000ff').set('Authorization', `Bearer ${token}`).expect(404);
    expect((await since(start)).filter((e) => e.action === 'auth.mfa_removed')).to.deep.equal([]);
  });

  it('streams events to holders of feature:admin.audit over ws, to nobody else', async () => {
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'watcher', password: SECRETS.password, groups: ['INT_ADMIN'] })
      .expect(201);
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'viewer', password: SECRETS.password, groups: ['INT_VIEWER'] })
      .expect(201);
    const watcher = await WsClient.connect(svc, { headers: { Authorization: basic('watcher', SECRETS.password) } });
    const viewer = await WsClient.connect(svc, { headers: { Authorization: basic('viewer', SECRETS.password) } });
    try {
      const started = Date.now();
      await api().post('/api/groups').set(sys).send({ name: 'live-one' }).expect(201);
      const frame = await watcher.next('audit:event', (f) => f.payload.action === 'group.created' && f.payload.target.name === 'live-one', 1000);
      expect(Date.now() - started).to.be.below(1000);
      expect(frame.payload.hash).to.match(/^[0-9a-f]{64}$/);
      await sleep(200);
      expect(viewer.all('audit:event')).to.deep.equal([]);
    } finally {
      await Promise.all([watcher.close(), viewer.close()]);
    }
  });

  it('filters and pages GET /api/audit; needs feature:admin.audit', async () => {
    await api().get('/api/audit').set('Authorization', basic('viewer', SECRETS.password)).expect(403);
    const users = (await api().get('/api/audit').query({ action: 'user.' }).set(sys).expect(200)).body.events as Event[];
    expect(users.length).to.be.greaterThan(2);
    expect(users.every((e) => e.action.startsWith('user.'))).to.equal(true);
    const page = (await api().get('/api/audit').query({ limit: 2 }).set(sys).expect(200)).body;
    expect(page.events).to.have.length(2);
    const next = (await api().get('/api/audit').query({ limit: 2, before: page.next_before }).set(sys).expect(200)).body.events as Event[];
    expect(next[0]!.seq).to.equal(page.events[1].seq - 1);
    expect(
      (await api().get('/api/audit').query({ outcome: 'denied', actor: 'plain' }).set(sys).expect(200)).body.events.every(
        (e: Event) => e.outcome === 'denied' && e.actor.username === 'plain',
      ),
    ).to.equal(true);
    const bad = await api().get('/api/audit').query({ outcome: 'maybe' }).set(sys).expect(400);
    expect(bad.body.error.details[0].field).to.equal('outcome');
    // since: a duration back from now, as the CLI's --since takes it, or a date
    const newest = page.events[0] as Event;
    const recent = (await api().get('/api/audit').query({ since: '1h', limit: 500 }).set(sys).expect(200)).body.events as Event[];
    expect(recent.map((e) => e.seq)).to.include(newest.seq);
    const at = new Date(Date.parse(newest.at) + 1).toISOString();
    expect((await api().get('/api/audit').query({ since: at }).set(sys).expect(200)).body.events.map((e: Event) => e.seq)).not.to.include(newest.seq);
    // a bare number is seconds, as everywhere in the configuration; a duration past any date is refused, not a 500
    expect((await api().get('/api/audit').query({ since: '3600' }).set(sys).expect(200)).body.events.map((e: Event) => e.seq)).to.include(newest.seq);
    expect((await api().get('/api/audit').query({ since: '100000000d' }).set(sys).expect(200)).body.events.map((e: Event) => e.seq)).to.include(newest.seq);
    await api().get('/api/audit').query({ since: '99999999999999999999d' }).set(sys).expect(400);
    const badSince = await api().get('/api/audit').query({ since: 'last week' }).set(sys).expect(400);
    expect(badSince.body.error.details[0]).to.deep.include({
      field: 'since',
      message: 'must be a duration back from now such as 7d or 12h, or an ISO 8601 date',
    });
  });

  /** How many attempts a list of events stands for: each one, or the count it carries. */
  const counted = (events: Event[]) => events.reduce((n, e) => n + (typeof e.details.count === 'number' ? e.details.count : 1), 0);

  it('a refusal repeated within the window is one event with its count, not a flood, and none goes uncounted', async () => {
    const start = await head();
    for (let i = 0; i < 20; i++) await api().get('/api/groups').set('Authorization', basic('viewer', SECRETS.password)).expect(403);
    const denied = (await since(start)).filter((e) => e.action === 'request.denied' && e.actor.username === 'viewer');
    expect(denied.map((e) => e.details.count)).to.deep.equal([undefined, 19]);
    expect(denied.map((e) => e.target.id)).to.deep.equal(['GET /api/groups', 'GET /api/groups']);
    // the route as declared: other ids, another case, are the same refusal
    const again = await head();
    for (const path of [
      '/api/users/00000000-0000-4000-8000-000000000001',
      '/API/users/00000000-0000-4000-8000-000000000002',
      '/api/users/00000000-0000-4000-8000-000000000003',
    ]) {
      await api().get(path).set('Authorization', basic('viewer', SECRETS.password)).expect(403);
    }
    const byRoute = (await since(again)).filter((e) => e.action === 'request.denied' && e.actor.username === 'viewer');
    expect(byRoute.map((e) => e.target.id)).to.deep.equal(['GET /api/users/:id', 'GET /api/users/:id']);
    expect(counted(byRoute)).to.equal(3);
    // 30 wrong logins at one name: five failures, then lockouts; four events stand for all thirty
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'dora', password: SECRETS.password, groups: ['INT_VIEWER'] })
      .expect(201);
    const locked = await head();
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++)
      statuses.push(
        (
          await api()
            .post('/api/auth/login')
            .send({ username: 'dora', password: `again-${i}` })
        ).status,
      );
    expect(statuses.filter((s) => s === 401)).to.have.length(5);
    expect(statuses.filter((s) => s === 429)).to.have.length(25);
    const trail = (await since(locked)).filter((e) => e.target.name === 'dora');
    const failed = trail.filter((e) => e.action === 'auth.login_failed');
    const lockouts = trail.filter((e) => e.action === 'auth.locked');
    expect([counted(failed), counted(lockouts)]).to.deep.equal([5, 25]);
    expect(trail).to.have.length(4);
  });

  it('writes the count of a window when it closes, without being asked to flush', async () => {
    const trail = new AuditTrail({ db: svc.service.db, bus: svc.service.bus, log: svc.service.log, coalesceMs: 300 });
    const start = await head();
    const refusal = {
      action: 'request.denied' as const,
      actor: { user_id: null, username: 'window-probe', method: 'api_key', ip: '203.0.113.9' },
      target: { type: 'route', id: 'GET /api/x' },
      outcome: 'denied' as const,
    };
    for (let i = 0; i < 7; i++) trail.record(refusal);
    // nobody flushes: the window's timer writes the count row (on a loaded machine, later than 300 ms)
    const probes = async () => {
      const page = await api().get('/api/audit').query({ actor: 'window-probe' }).set(sys).expect(200);
      return (page.body.events as Event[]).filter((e) => e.seq > start).reverse();
    };
    await eventually(async () => (await probes()).length >= 2);
    await sleep(300); // and nothing more comes after it
    expect((await probes()).map((e) => e.details.count)).to.deep.equal([undefined, 6]);
  });

  it('never records a secret, in the table or in the log', async () => {
    await api()
      .patch('/api/settings/auth')
      .set('Authorization', adminAuth())
      .send({ ldap_url: 'ldap://127.0.0.1:1', ldap_bind_dn: 'cn=reader', ldap_bind_password: SECRETS.bind, ldap_base_dn: 'dc=example' })
      .expect(200);
    await svc.service.iam.audit.flush();
    const table = JSON.stringify(await svc.service.db('audit_events').select('*'));
    const logged = logs.text();
    for (const [what, value] of Object.entries(SECRETS)) {
      expect(table, `${what} in the audit table`).not.to.include(value);
      expect(logged, `${what} in the log`).not.to.include(value);
    }
    expect(table).to.include('ldap_bind_password'); // the name of what changed is there
  });

  it('keeps what it cannot store faithfully bounded: cut emoji, deep or huge details, the raw args of a refused request', async () => {
    const start = await head();
    const deep: Record<string, unknown> = {};
    let at = deep;
    for (let i = 0; i < 20; i++) at = (at.next = {}) as Record<string, unknown>;
    svc.service.iam.audit.record({
      action: 'settings.changed',
      actor: { user_id: null, username: 'cut\uD83D', method: null, ip: null },
      target: { type: 'settings', id: 'x\uDC00y', name: null },
      outcome: 'success',
      details: { deep, big: 'z'.repeat(20_000) },
    });
    // a refused socket request: whatever the caller put in its args is not recorded, only their names
    const ws = await WsClient.connect(svc, { headers: { Authorization: basic('viewer', SECRETS.password) } });
    try {
      ws.send({
        event: 'socket:request',
        payload: { request_id: 'r2', operation: 'mounts:repair', args: { target_dir: 'free-text-never-recorded', mode: '0750' } },
      });
      expect((await ws.next('socket:response', (f) => f.payload.request_id === 'r2')).payload.ok).to.equal(false);
    } finally {
      await ws.close();
    }
    const events = await since(start);
    const odd = one(events, 'settings.changed', (e) => e.target.id === 'x\uFFFDy');
    expect(odd.actor.username).to.equal('cut\uFFFD');
    expect(JSON.stringify(odd.details).length).to.be.at.most(8192);
    const refused = one(events, 'socket.operation', (e) => e.outcome === 'denied');
    expect(refused.details.args).to.deep.equal({ fields: ['target_dir', 'mode'] });
    expect(JSON.stringify(events)).not.to.include('free-text-never-recorded');
    expect((await svc.service.iam.audit.verify()).ok).to.equal(true);
  });

  it('verifies; an edit, a deletion, a reordering or a cut-off head is found and named', async () => {
    const env = testEnv(svc.dataDir, svc.databaseUrl);
    const ok = await cli(env, ['--json', 'audit', 'verify']);
    expect(ok.code, ok.stderr).to.equal(0);
    expect(ok.json().ok).to.equal(true);
    const db = svc.service.db;
    const rows = await db('audit_events').orderBy('seq').select('seq', 'details', 'at');
    const mid = rows[Math.floor(rows.length / 2)]!;
    const restore = async (fn: () => Promise<unknown>, undo: () => Promise<unknown>, expected: RegExp) => {
      await fn();
      const run = await cli(env, ['audit', 'verify']);
      expect(run.code, run.stdout).to.equal(1);
      expect(run.stderr).to.match(expected);
      await undo();
      expect((await cli(env, ['audit', 'verify'])).code).to.equal(0);
    };
    // an edited event
    await restore(
      () => db('audit_events').where({ seq: mid.seq }).update({ details: '{"forged":true}' }),
      () => db('audit_events').where({ seq: mid.seq }).update({ details: mid.details }),
      new RegExp(`event ${mid.seq} does not match`),
    );
    // a deleted event
    const deleted = await db('audit_events').where({ seq: mid.seq }).first();
    await restore(
      () => db('audit_events').where({ seq: mid.seq }).delete(),
      () => db('audit_events').insert(deleted),
      new RegExp(`event ${mid.seq} is missing`),
    );
    // two events swapped in order
    const a = await db('audit_events').where({ seq: mid.seq }).first();
    const b = await db('audit_events')
      .where({ seq: Number(mid.seq) + 1 })
      .first();
    await restore(
      async () => {
        await db('audit_events').where({ seq: a.seq }).delete();
        await db('audit_events').where({ seq: b.seq }).delete();
        await db('audit_events').insert([
          { ...b, seq: a.seq },
          { ...a, seq: b.seq },
        ]);
      },
      async () => {
        await db('audit_events').whereIn('seq', [a.seq, b.seq]).delete();
        await db('audit_events').insert([a, b]);
      },
      new RegExp(`event ${mid.seq} does not match`),
    );
    // the newest events cut off
    const last = await db('audit_events').orderBy('seq', 'desc').first();
    await restore(
      () => db('audit_events').where({ seq: last.seq }).delete(),
      () => db('audit_events').insert(last),
      new RegExp(`events ${last.seq}\\.\\.${last.seq} are missing`),
    );
  });

  it('prunes past the retention where the chain then starts, and what is left still verifies; export is JSON lines', async () => {
    const db = svc.service.db;
    const rows = await db('audit_events').orderBy('seq').select('seq');
    const cut = Number(rows[5]!.seq);
    await db('audit_events')
      .where('seq', '<=', cut)
      .update({ at: Date.now() - 500 * 86_400_000 });
    const pruned = await svc.service.iam.audit.prune(400 * 86_400_000);
    expect(pruned).to.equal(cut - Number(rows[0]!.seq) + 1);
    const verified = await svc.service.iam.audit.verify();
    expect(verified).to.deep.include({ ok: true, first_seq: cut + 1 });
    const exported = await cli(testEnv(svc.dataDir, svc.databaseUrl), ['audit', 'export']);
    expect(exported.code, exported.stderr).to.equal(0);
    const lines = exported.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Event);
    expect(lines[0]!.seq).to.equal(cut + 1);
    expect(lines.every((e, i) => i === 0 || e.seq === lines[i - 1]!.seq + 1)).to.equal(true);
  });

  it('a user change says what it did: disabled or enabled, groups, permissions and roles added and removed; the CLI list sums it up', async () => {
    const start = await head();
    const id = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'dorothea', password: SECRETS.password, groups: ['INT_USER'] })
        .expect(201)
    ).body.id as string;
    await api().patch(`/api/users/${id}`).set(sys).send({ disabled: true }).expect(200);
    await api().patch(`/api/users/${id}`).set(sys).send({ disabled: false }).expect(200);
    await api()
      .patch(`/api/users/${id}`)
      .set(sys)
      .send({ groups: ['INT_VIEWER'], extra_permissions: ['feature:admin.audit'], display_name: 'Dora' })
      .expect(200);
    await api().patch(`/api/users/${id}`).set(sys).send({ extra_permissions: [] }).expect(200);
    await api()
      .patch(`/api/users/${id}`)
      .set(sys)
      .send({ roles: ['superadmin'] })
      .expect(200);
    await api().patch(`/api/users/${id}`).set(sys).send({ roles: [] }).expect(200);
    const updates = (await since(start)).filter((e) => e.action === 'user.updated' && e.target.id === id).map((e) => e.details);
    expect(updates).to.deep.equal([
      { fields: ['disabled'], disabled: true },
      { fields: ['disabled'], disabled: false },
      {
        fields: ['groups', 'displayName', 'extraPermissions'],
        groups: ['INT_VIEWER'],
        previous_groups: ['INT_USER'],
        groups_added: ['INT_VIEWER'],
        groups_removed: ['INT_USER'],
        extra_permissions: ['feature:admin.audit'],
        previous_extra_permissions: [],
        extra_permissions_added: ['feature:admin.audit'],
        extra_permissions_removed: [],
      },
      {
        fields: ['extraPermissions'],
        extra_permissions: [],
        previous_extra_permissions: ['feature:admin.audit'],
        extra_permissions_added: [],
        extra_permissions_removed: ['feature:admin.audit'],
      },
      { fields: ['roles'], roles: ['superadmin'], previous_roles: [], roles_added: ['superadmin'], roles_removed: [] },
      { fields: ['roles'], roles: [], previous_roles: ['superadmin'], roles_added: [], roles_removed: ['superadmin'] },
    ]);
    const env = testEnv(svc.dataDir, svc.databaseUrl);
    const listed = await cli(env, ['audit', 'list', '--action', 'user.updated', '--limit', '6']);
    expect(listed.code, listed.stderr).to.equal(0);
    const [header, ...rows] = listed.stdout.trimEnd().split('\n');
    expect(header).to.match(/OUTCOME\s+SUMMARY$/);
    // newest first
    expect(rows.map((r) => r.split(/\s{2,}/).at(-1))).to.deep.equal([
      'roles -superadmin',
      'roles +superadmin',
      'permissions -feature:admin.audit',
      'groups +INT_VIEWER -INT_USER, permissions +feature:admin.audit, display_name',
      'enabled',
      'disabled',
    ]);
  });

  it('settings events name the settings in the list: the page API gives the names, the CLI shows them', async () => {
    const start = await head();
    await api().patch('/api/settings/auth').set(sys).send({ oidc_label: 'Named SSO', ldap_timeout_ms: 4000 }).expect(200);
    await api().put('/api/settings/webhook-secret').set(sys).send({ secret: SECRETS.webhook }).expect(204);
    await api().put('/api/settings/system-api-key').set(sys).send({ key: SYSTEM_KEY }).expect(204);
    const events = await since(start);
    expect(one(events, 'settings.changed', (e) => e.target.id === 'auth').details.fields).to.have.members(['oidc_label', 'ldap_timeout_ms']);
    const env = testEnv(svc.dataDir, svc.databaseUrl);
    const listed = await cli(env, ['audit', 'list', '--action', 'settings.', '--since', '1h', '--limit', '3']);
    expect(listed.code, listed.stderr).to.equal(0);
    const summaries = listed.stdout
      .trimEnd()
      .split('\n')
      .slice(1)
      .map((r) => r.split(/\s{2,}/).at(-1));
    expect(summaries[0]).to.equal('scm_webhook_secret set');
    expect(summaries[1]!.split(', ')).to.have.members(['oidc_label', 'ldap_timeout_ms']);
    const keyed = await cli(env, ['audit', 'list', '--action', 'system_key.changed', '--limit', '1']);
    expect(keyed.stdout.trimEnd().split('\n')[1]).to.match(/system_api_key set$/);
    for (const e of events) expect(JSON.stringify(e)).not.to.include(SECRETS.webhook);
    expect(listed.stdout).not.to.include(SECRETS.webhook);
  });

  it('a sign-in through the second step names the factor; a recovery code spent there is the account, by the second step, from its address', async () => {
    const start = await head();
    const password = SECRETS.password;
    const id = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'fay', password, groups: ['INT_USER'] })
        .expect(201)
    ).body.id as string;
    const token = (await api().post('/api/auth/login').send({ username: 'fay', password }).expect(200)).body.token as string;
    const started = await api().post('/api/me/mfa/totp').set('Authorization', `Bearer ${token}`).expect(200);
    const secret = started.body.secret as string;
    const confirmed = await api()
      .post('/api/me/mfa/totp/confirm')
      .set('Authorization', `Bearer ${token}`)
      .send({ code: await previousStepCode(secret) })
      .expect(200);
    const recovery = confirmed.body.recovery_codes as string[];
    const firstStep = async () => (await api().post('/api/auth/login').send({ username: 'fay', password }).expect(200)).body.mfa_token as string;
    await api()
      .post('/api/auth/login/mfa')
      .send({ mfa_token: await firstStep(), code: totpCode(secret) })
      .expect(200);
    const signedIn = (
      await api()
        .post('/api/auth/login/mfa')
        .send({ mfa_token: await firstStep(), code: recovery[0] })
        .expect(200)
    ).body.token as string;
    // signed in, a recovery code spent on a step-up is the session's, from its address
    await api().post('/api/auth/step-up').set('Authorization', `Bearer ${signedIn}`).send({ code: recovery[1] }).expect(204);
    const events = await since(start);
    const logins = events.filter((e) => e.action === 'auth.login' && e.target.id === id);
    expect(logins.map((e) => [e.actor.method, e.details.second_factor, e.details.factor])).to.deep.equal([
      ['login', false, undefined],
      ['second_step', true, 'totp'],
      ['second_step', true, 'recovery_code'],
    ]);
    const used = events.filter((e) => e.action === 'auth.recovery_code_used' && e.target.id === id);
    expect(used).to.have.length(2);
    const [second, stepUp] = used as [Event, Event];
    expect(second.actor).to.deep.include({ user_id: id, username: 'fay', method: 'second_step' });
    expect(second.actor.ip).to.be.a('string').that.is.not.empty;
    expect(second.actor.ip).to.equal(logins[2]!.actor.ip);
    expect(second.details).to.deep.equal({ left: 9 });
    expect(stepUp.actor).to.deep.include({ user_id: id, username: 'fay', method: 'session_token', ip: second.actor.ip });
    expect(stepUp.details).to.deep.equal({ left: 8 });
  });

  it('`audit list --action` takes only actions the trail records, or a prefix some action starts with: else exit 2 listing them', async () => {
    const env = testEnv(svc.dataDir, svc.databaseUrl);
    const unknown = await cli(env, ['audit', 'list', '--action', 'bogus']);
    expect(unknown.code).to.equal(2);
    expect(unknown.stdout).to.equal('');
    expect(unknown.stderr.trimEnd().split('\n')).to.have.length(1);
    for (const action of AUDIT_ACTIONS) expect(unknown.stderr).to.include(action);
    const typo = await cli(env, ['audit', 'list', '--action', 'user.update']);
    expect(typo.code).to.equal(2);
    expect(typo.stderr).to.match(/unknown action user\.update\b.*user\.updated/);
    const prefix = await cli(env, ['audit', 'list', '--action', 'usr.']);
    expect(prefix.code).to.equal(2);
    expect(prefix.stderr.trimEnd().split('\n')).to.have.length(1);
    expect(prefix.stderr).to.match(/no action starts with usr\./);
    for (const p of ['auth.', 'user.', 'group.', 'settings.', 'audit.']) expect(prefix.stderr).to.include(p);
    // a known action and a known prefix are read
    expect((await cli(env, ['--json', 'audit', 'list', '--action', 'auth.', '--limit', '1'])).code).to.equal(0);
    expect((await cli(env, ['--json', 'audit', 'list', '--action', 'user.updated', '--limit', '1'])).code).to.equal(0);
    // the API's filter is the same rule: 400 naming the field and the actions
    const refused = await api().get('/api/audit').query({ action: 'user.update' }).set(sys).expect(400);
    expect(refused.body.error.details).to.have.length(1);
    expect(refused.body.error.details[0].field).to.equal('action');
    expect(refused.body.error.details[0].message).to.match(/^unknown action user\.update; actions: .*user\.updated/);
    await api().get('/api/audit').query({ action: 'user.' }).set(sys).expect(200);
  });
});

describe('audit trail: two instances writing at once', function () {
  this.timeout(60_000);
  let a: TestService;
  let b: TestService;
  before(async () => {
    a = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY } });
    b = await startPeer(a, { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY });
  });
  after(async () => {
    await b?.stop();
    await a?.destroy();
  });

  it('gives one chain without gaps or forks', async () => {
    const writes = Array.from({ length: 30 }, (_, i) =>
      request((i % 2 ? a : b).url)
        .post('/api/groups')
        .set('X-API-Key', SYSTEM_KEY)
        .send({ name: `g-${i}` }),
    );
    const logins = Array.from({ length: 10 }, (_, i) =>
      request((i % 2 ? b : a).url)
        .post('/api/auth/login')
        .send({ username: `nobody-${i}`, password: `guess-${i}` }),
    );
    const answers = await Promise.all([...writes, ...logins]);
    expect(answers.slice(0, 30).map((r) => r.status)).to.deep.equal(Array(30).fill(201));
    await Promise.all([a.service.iam.audit.flush(), b.service.iam.audit.flush()]);
    const verified = await a.service.iam.audit.verify();
    expect(verified.ok, JSON.stringify(verified)).to.equal(true);
    const seqs = (await a.service.db('audit_events').orderBy('seq').select('seq')).map((r: { seq: number | string }) => Number(r.seq));
    expect(seqs).to.deep.equal(Array.from({ length: seqs.length }, (_, i) => seqs[0]! + i));
    // (the default groups the first boot seeded are events too, by the service)
    const actions = (await a.service.db('audit_events').whereNot({ actor_username: 'service' }).select('action')).map((r: { action: string }) => r.action);
    expect(
      actions.filter((x: string) => x === 'group.created'),
      JSON.stringify(answers.slice(30).map((r) => r.status)),
    ).to.have.length(30);
    expect(
      actions.filter((x: string) => x === 'auth.login_failed'),
      JSON.stringify(answers.slice(30).map((r) => r.status)),
    ).to.have.length(10);
  });
});

describe('audit trail: the live tail across instances (Redis)', function () {
  this.timeout(60_000);
  let redis: TestRedis;
  let a: TestService;
  let b: TestService;
  before(async () => {
    redis = await startRedis();
    a = await startService({ env: { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY, SERVICE_REDIS_URL: redis.url } });
    b = await startPeer(a, { SERVICE_SYSTEM_API_KEY: SYSTEM_KEY, SERVICE_REDIS_URL: redis.url });
  });
  after(async () => {
    await b?.stop();
    await a?.destroy();
    await redis?.stop();
  });

  it('an event appended on one instance reaches the live tail on the other, read from the database', async () => {
    const ws = await WsClient.connect(b, { headers: { 'X-API-Key': SYSTEM_KEY } });
    try {
      await b.service.bus.waitFor('bus:bridge_state', { match: (s) => s.up, timeoutMs: 5000 }).catch(() => undefined);
      const started = Date.now();
      await request(a.url).post('/api/groups').set('X-API-Key', SYSTEM_KEY).send({ name: 'made-on-a' }).expect(201);
      const frame = await ws.next('audit:event', (f) => f.payload.target?.name === 'made-on-a', 3000);
      expect(Date.now() - started).to.be.below(2000);
      const stored = (await request(b.url).get('/api/audit').query({ limit: 1, action: 'group.created' }).set('X-API-Key', SYSTEM_KEY).expect(200)).body
        .events[0];
      expect(frame.payload).to.deep.equal(stored);
    } finally {
      await ws.close();
    }
  });
});
