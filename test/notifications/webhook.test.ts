import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { startService, adminAuth, type TestService } from '../support/service.js';
import { WsClient, api, createUser, type TestUser } from '../gateway/helpers.js';
import { fixture, githubExample, hmacHex } from './scm/fixtures/load.js';

const SECRET = 'webhook-secret-for-tests-0123456789';
const PATH = '/api/notifications/webhook/scm';

type Headers = Record<string, string>;

const json = (payload: unknown) => Buffer.from(JSON.stringify(payload));

const githubHeaders = (event: string, body: Buffer, secret = SECRET, delivery = randomUUID()): Headers => ({
  'Content-Type': 'application/json',
  'X-GitHub-Event': event,
  'X-GitHub-Delivery': delivery,
  'X-Hub-Signature-256': `sha256=${hmacHex(body, secret)}`,
});

const giteaHeaders = (event: string, body: Buffer, secret = SECRET, delivery = randomUUID()): Headers => ({
  'Content-Type': 'application/json',
  'X-Gitea-Event': event,
  'X-Gitea-Delivery': delivery,
  'X-Gitea-Signature': hmacHex(body, secret),
  // Gitea also sends the GitHub names for compatibility
  'X-GitHub-Event': event,
  'X-GitHub-Delivery': delivery,
});

const gitlabHeaders = (event: string, token = SECRET, uuid = randomUUID()): Headers => ({
  'Content-Type': 'application/json',
  'X-Gitlab-Event': event,
  'X-Gitlab-Token': token,
  'X-Gitlab-Event-UUID': uuid,
});

describe('SCM webhook intake', function () {
  this.timeout(30_000);
  let svc: TestService;
  let alice: TestUser;
  let ws: WsClient;

  // a string: supertest would JSON-encode a Buffer (as {type: "Buffer", data}) and break the signature
  const deliver = (headers: Headers, body: Buffer | string) => api(svc).post(PATH).set(headers).send(body.toString());
  const notifyFrames = (id: string) => ws.all('system:notify', (f) => f.payload.id === id);

  before(async () => {
    svc = await startService();
    alice = await createUser(svc, 'alice');
    ws = await WsClient.basic(svc, alice.username, alice.password);
  });

  after(async () => {
    await ws?.close();
    await svc?.destroy();
  });

  describe('without a secret', () => {
    it('reports disabled and answers 503', async () => {
      const health = await api(svc).get(`${PATH}/health`);
      expect(health.status).to.equal(200);
      expect(health.body).to.deep.equal({ status: 'disabled', secret_configured: false, accepts: ['gitea', 'github', 'gitlab'], last_delivery_at: null });
      const body = json(githubExample('ping'));
      const res = await deliver(githubHeaders('ping', body), body);
      expect(res.status).to.equal(503);
      expect(res.body.error.code).to.equal('unavailable');
    });

    it('takes the secret through the settings API (admin only)', async () => {
      expect((await api(svc).put('/api/settings/webhook-secret').set('Authorization', alice.auth).send({ secret: SECRET })).status).to.equal(403);
      expect((await api(svc).put('/api/settings/webhook-secret').send({ secret: SECRET })).status).to.equal(401);
      const short = await api(svc).put('/api/settings/webhook-secret').set('Authorization', adminAuth()).send({ secret: 'short' });
      expect(short.status).to.equal(400);
      expect(short.body.error.details[0].field).to.equal('secret');
      const set = await api(svc).put('/api/settings/webhook-secret').set('Authorization', adminAuth()).send({ secret: SECRET });
      expect(set.status).to.equal(204);
      const status = await api(svc).get('/api/settings/webhook-secret').set('Authorization', adminAuth());
      expect(status.body).to.deep.equal({ configured: true, locked: false });
      expect(JSON.stringify(status.body)).to.not.contain(SECRET);
      const health = await api(svc).get(`${PATH}/health`);
      expect(health.body).to.include({ status: 'ok', secret_configured: true });
    });
  });

  describe('GitHub (real payloads from @octokit/webhooks-examples)', () => {
    const cases: [string, (e: any) => boolean, string][] = [
      ['push', (e) => e.ref === 'refs/heads/master' && !e.deleted && e.commits.length > 0, 'info'],
      ['pull_request', (e) => e.action === 'opened', 'info'],
      ['workflow_run', (e) => e.action === 'completed' && e.workflow_run.conclusion === 'success', 'success'],
      ['release', (e) => e.action === 'published', 'success'],
      ['issues', (e) => e.action === 'opened', 'info'],
    ];
    for (const [event, match] of cases) {
      it(`accepts ${event} and broadcasts one notification with a link`, async () => {
        const body = json(githubExample(event, match));
        const res = await deliver(githubHeaders(event, body), body);
        expect(res.status, JSON.stringify(res.body)).to.equal(202);
        expect(res.body.status).to.equal('accepted');
        const id = res.body.notification_id;
        const frame = await ws.next('system:notify', (f) => f.payload.id === id);
        expect(frame.payload.source).to.equal('scm:github');
        expect(frame.payload.link).to.match(/^https:\/\//);
        expect(frame.payload.title).to.be.a('string').and.not.equal('');
        expect(frame.payload.broadcast).to.equal(true);
        const hist = await api(svc).get('/api/notifications?limit=200').set('Authorization', alice.auth);
        expect(hist.body.notifications.filter((n: any) => n.id === id)).to.have.length(1);
      });
    }

    it('maps a failed workflow run to error and does not toast a running one', async () => {
      for (const [conclusion, level] of [['failure', 'error'], ['cancelled', 'warning']]) {
        const run = githubExample('workflow_run', (e) => e.workflow_run.status === 'completed' && e.workflow_run.conclusion === 'success');
        run.workflow_run.conclusion = conclusion;
        const body = json(run);
        const res = await deliver(githubHeaders('workflow_run', body), body);
        expect(res.status).to.equal(202);
        const frame = await ws.next('system:notify', (f) => f.payload.id === res.body.notification_id);
        expect(frame.payload).to.include({ level, toast: true });
      }
      const running = json(githubExample('workflow_run', (e) => e.workflow_run.status === 'queued'));
      const r2 = await deliver(githubHeaders('workflow_run', running), running);
      expect(r2.status).to.equal(202);
      expect((await ws.next('system:notify', (f) => f.payload.id === r2.body.notification_id)).payload.toast).to.equal(false);
    });

    it('answers ping with 200 ok and notifies nothing', async () => {
      const before = ws.all('system:notify').length;
      const body = json(githubExample('ping'));
      const res = await deliver(githubHeaders('ping', body), body);
      expect(res.status).to.equal(200);
      expect(res.body).to.deep.equal({ status: 'ok' });
      await ws.roundTrip();
      expect(ws.all('system:notify').length).to.equal(before);
    });

    it('answers events it does not notify with 202 ignored', async () => {
      const body = json(githubExample('star'));
      const res = await deliver(githubHeaders('star', body), body);
      expect(res.status).to.equal(202);
      expect(res.body.status).to.equal('ignored');
      const closedIssue = json(githubExample('issues', (e) => e.action === 'labeled'));
      const r2 = await deliver(githubHeaders('issues', closedIssue), closedIssue);
      expect(r2.status).to.equal(202);
      expect(r2.body.status).to.equal('ignored');
    });
  });

  describe('Gitea', () => {
    for (const event of ['push', 'pull_request', 'status', 'release', 'issues']) {
      it(`accepts ${event}`, async () => {
        const body = json(fixture(`gitea-${event}`));
        const res = await deliver(giteaHeaders(event, body), body);
        expect(res.status, JSON.stringify(res.body)).to.equal(202);
        expect(res.body.status).to.equal('accepted');
        const frame = await ws.next('system:notify', (f) => f.payload.id === res.body.notification_id);
        expect(frame.payload.source).to.equal('scm:gitea');
        expect(frame.payload.link).to.match(/^https?:\/\//);
      });
    }

    it('refuses a Gitea signature made with another secret', async () => {
      const body = json(fixture('gitea-push'));
      expect((await deliver(giteaHeaders('push', body, 'another-secret-0123456789'), body)).status).to.equal(401);
    });
  });

  describe('GitLab', () => {
    const events: [string, string][] = [
      ['Push Hook', 'gitlab-push'],
      ['Merge Request Hook', 'gitlab-merge_request'],
      ['Pipeline Hook', 'gitlab-pipeline'],
      ['Job Hook', 'gitlab-job'],
      ['Release Hook', 'gitlab-release'],
      ['Tag Push Hook', 'gitlab-tag_push'],
    ];
    for (const [event, name] of events) {
      it(`accepts ${event}`, async () => {
        const res = await deliver(gitlabHeaders(event), json(fixture(name)));
        expect(res.status, JSON.stringify(res.body)).to.equal(202);
        expect(res.body.status).to.equal('accepted');
        const frame = await ws.next('system:notify', (f) => f.payload.id === res.body.notification_id);
        expect(frame.payload.source).to.equal('scm:gitlab');
        expect(frame.payload.link).to.match(/^https?:\/\//);
      });
    }

    it('maps a successful pipeline to success', async () => {
      const res = await deliver(gitlabHeaders('Pipeline Hook'), json(fixture('gitlab-pipeline')));
      expect((await ws.next('system:notify', (f) => f.payload.id === res.body.notification_id)).payload.level).to.equal('success');
    });

    it('refuses a wrong or missing token', async () => {
      expect((await deliver(gitlabHeaders('Push Hook', 'wrong-token-0123456789'), json(fixture('gitlab-push')))).status).to.equal(401);
      const headers = gitlabHeaders('Push Hook');
      delete headers['X-Gitlab-Token'];
      expect((await deliver(headers, json(fixture('gitlab-push')))).status).to.equal(401);
    });

    it('de-duplicates by Idempotency-Key', async () => {
      const key = randomUUID();
      const h = { ...gitlabHeaders('Push Hook'), 'Idempotency-Key': key };
      const first = await deliver(h, json(fixture('gitlab-push')));
      expect(first.status).to.equal(202);
      const again = await deliver({ ...h, 'X-Gitlab-Event-UUID': randomUUID() }, json(fixture('gitlab-push')));
      expect(again.status).to.equal(200);
      expect(again.body.status).to.equal('duplicate');
    });
  });

  describe('error paths', () => {
    // a fresh push each time, as GitHub sends them (a byte-identical body is a replay)
    const pushBody = () => json({ ...githubExample('push', (e) => e.ref === 'refs/heads/master' && !e.deleted), after: randomUUID().replace(/-/g, '').padEnd(40, '0') });

    it('401 for a missing, malformed or wrong signature, and for a body changed after signing', async () => {
      const body = pushBody();
      const noSig = githubHeaders('push', body);
      delete noSig['X-Hub-Signature-256'];
      expect((await deliver(noSig, body)).status).to.equal(401);
      expect((await deliver({ ...githubHeaders('push', body), 'X-Hub-Signature-256': 'sha256=abc' }, body)).status).to.equal(401);
      expect((await deliver(githubHeaders('push', body, 'not-the-secret-0123456789'), body)).status).to.equal(401);
      const tampered = Buffer.from(body.toString().replace('"master"', '"main"'));
      const res = await deliver(githubHeaders('push', body), tampered);
      expect(res.status).to.equal(401);
      expect(res.body.error.code).to.equal('unauthorized');
    });

    it('413 for a body over 1 MiB', async () => {
      const big = json({ zen: 'x'.repeat(1024 * 1024 + 10) });
      const res = await deliver(githubHeaders('ping', big), big);
      expect(res.status).to.equal(413);
      expect(res.body.error.code).to.equal('payload_too_large');
    });

    it('400 for a signed body that is not JSON, or not an object', async () => {
      const notJson = Buffer.from('payload=%7B%7D');
      const res = await deliver({ ...githubHeaders('push', notJson), 'Content-Type': 'application/x-www-form-urlencoded' }, notJson);
      expect(res.status).to.equal(400);
      expect(res.body.error.details[0].field).to.equal('body');
      const arr = json([1, 2]);
      expect((await deliver(githubHeaders('push', arr), arr)).status).to.equal(400);
    });

    it('400 naming the field for a handled event without a field it needs', async () => {
      const payload = githubExample('push', (e) => e.ref === 'refs/heads/master' && !e.deleted);
      delete payload.repository;
      const body = json(payload);
      const res = await deliver(githubHeaders('push', body), body);
      expect(res.status).to.equal(400);
      expect(res.body.error.details[0].field).to.match(/^repository/);
    });

    it('400 without any event header', async () => {
      const body = pushBody();
      const res = await deliver({ 'Content-Type': 'application/json', 'X-Hub-Signature-256': `sha256=${hmacHex(body, SECRET)}` }, body);
      expect(res.status).to.equal(400);
    });

    it('answers a delivery id seen before with 200 duplicate and notifies once', async () => {
      const body = pushBody();
      const delivery = randomUUID();
      const first = await deliver(githubHeaders('push', body, SECRET, delivery), body);
      expect(first.status).to.equal(202);
      const second = await deliver(githubHeaders('push', body, SECRET, delivery), body);
      expect(second.status).to.equal(200);
      expect(second.body.status).to.equal('duplicate');
      await ws.next('system:notify', (f) => f.payload.id === first.body.notification_id);
      await ws.roundTrip();
      expect(notifyFrames(first.body.notification_id)).to.have.length(1);
      const rows = await svc.service.db('webhook_deliveries').where({ provider: 'github', delivery_id: delivery });
      expect(rows).to.have.length(1);
      expect(rows[0].notification_id).to.equal(first.body.notification_id);
      // the same id from another provider is another delivery
      const gitea = json({ ...fixture('gitea-push'), after: randomUUID() });
      expect((await deliver(giteaHeaders('push', gitea, SECRET, delivery), gitea)).status).to.equal(202);
    });

    it('a signed body replayed under a new delivery id, or none, is not notified again (GitHub, Gitea)', async () => {
      const body = pushBody();
      const first = await deliver(githubHeaders('push', body), body);
      expect(first.status).to.equal(202);
      const replay = await deliver(githubHeaders('push', body, SECRET, randomUUID()), body);
      expect(replay.status).to.equal(200);
      expect(replay.body.status).to.equal('duplicate');
      const noId = githubHeaders('push', body);
      delete noId['X-GitHub-Delivery'];
      const missing = await deliver(noId, body);
      expect(missing.status).to.equal(400);
      expect(missing.body.error.details).to.deep.equal([{ field: 'X-GitHub-Delivery', message: 'is required: the delivery id de-duplicates re-sent events' }]);
      const gitea = json({ ...fixture('gitea-push'), after: randomUUID() });
      const giteaNoId = giteaHeaders('push', gitea);
      delete giteaNoId['X-Gitea-Delivery'];
      expect((await deliver(giteaNoId, gitea)).body.error.details[0].field).to.equal('X-Gitea-Delivery');
      expect((await deliver(giteaHeaders('push', gitea), gitea)).status).to.equal(202);
      expect((await deliver(giteaHeaders('push', gitea, SECRET, randomUUID()), gitea)).body.status).to.equal('duplicate');
      await ws.roundTrip();
      expect(notifyFrames(first.body.notification_id)).to.have.length(1);
    });

    it('GitLab: de-duplicated by its event UUID or idempotency key when sent', async () => {
      const uuid = randomUUID();
      const body = json(fixture('gitlab-push'));
      const headers = { ...gitlabHeaders('Push Hook'), 'X-Gitlab-Event-UUID': uuid };
      expect((await deliver(headers, body)).status).to.equal(202);
      expect((await deliver(headers, body)).body.status).to.equal('duplicate');
      const key = randomUUID();
      expect((await deliver({ ...gitlabHeaders('Push Hook'), 'Idempotency-Key': key }, body)).status).to.equal(202);
      expect((await deliver({ ...gitlabHeaders('Push Hook'), 'Idempotency-Key': key, 'X-Gitlab-Event-UUID': randomUUID() }, body)).body.status).to.equal('duplicate');
    });

    it('lets exactly one of several simultaneous copies of a delivery through', async () => {
      const body = pushBody();
      const delivery = randomUUID();
      const before = (await svc.service.db('notifications').count({ c: '*' }).first())!.c;
      const answers = await Promise.all(Array.from({ length: 6 }, () => deliver(githubHeaders('push', body, SECRET, delivery), body)));
      const statuses = answers.map((a) => a.status).sort();
      expect(statuses).to.deep.equal([200, 200, 200, 200, 200, 202]);
      const after = (await svc.service.db('notifications').count({ c: '*' }).first())!.c;
      expect(Number(after) - Number(before)).to.equal(1);
    });

    it('reports the last delivery in health and is disabled again once the secret is deleted', async () => {
      const health = await api(svc).get(`${PATH}/health`);
      expect(health.body.last_delivery_at).to.be.a('string');
      expect(Date.now() - Date.parse(health.body.last_delivery_at)).to.be.lessThan(60_000);
      expect((await api(svc).delete('/api/settings/webhook-secret').set('Authorization', adminAuth())).status).to.equal(204);
      const body = pushBody();
      expect((await deliver(githubHeaders('push', body), body)).status).to.equal(503);
      expect((await api(svc).get(`${PATH}/health`)).body.status).to.equal('disabled');
    });
  });

  describe('secret from SERVICE_SCM_WEBHOOK_SECRET', () => {
    let envSvc: TestService;
    before(async () => {
      envSvc = await startService({ env: { SERVICE_SCM_WEBHOOK_SECRET: SECRET } });
    });
    after(async () => {
      await envSvc?.destroy();
    });

    it('uses it, and the settings API cannot change it (409)', async () => {
      const body = json(githubExample('ping'));
      const res = await api(envSvc).post(PATH).set(githubHeaders('ping', body)).send(body.toString());
      expect(res.status).to.equal(200);
      const put = await api(envSvc).put('/api/settings/webhook-secret').set('Authorization', adminAuth()).send({ secret: 'another-secret-0123456789' });
      expect(put.status).to.equal(409);
      expect((await api(envSvc).delete('/api/settings/webhook-secret').set('Authorization', adminAuth())).status).to.equal(409);
      expect((await api(envSvc).get(`${PATH}/health`)).body).to.include({ status: 'ok', secret_configured: true });
    });
  });
});
