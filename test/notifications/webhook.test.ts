import { expect } from 'chai';
import { createHash, randomUUID } from 'node:crypto';
import { startService, startPeer, adminAuth, type TestService } from '../support/service.js';
import { WsClient, api, createUser, type TestUser } from '../gateway/helpers.js';
import { fixture, githubExample, hmacHex } from './scm/fixtures/load.js';

const SECRET = 'webhook-secret-for-tests-0123456789';
// GitLab sends its token in clear: in the main suite it has its own, and the shared SECRET stays an HMAC key
const GITLAB_SECRET = 'gitlab-own-secret-for-tests-0123456789';
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

const gitlabHeaders = (event: string, token = GITLAB_SECRET, uuid = randomUUID()): Headers => ({
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
      const none = { secret_configured: false, secret_source: null };
      expect(health.body).to.deep.equal({
        status: 'disabled',
        secret_configured: false,
        accepts: ['gitea', 'github', 'gitlab'],
        last_delivery_at: null,
        forges: { gitea: none, github: none, gitlab: none },
        warnings: [],
      });
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
      // GitLab on the shared secret too: the health warns
      expect(health.body.warnings).to.have.length(1);
      expect(health.body.warnings[0]).to.match(/GitLab shares the shared webhook secret with Gitea and GitHub/);
      expect((await api(svc).put('/api/settings/webhook-secret/gitlab').set('Authorization', adminAuth()).send({ secret: GITLAB_SECRET })).status).to.equal(
        204,
      );
      const after = await api(svc).get(`${PATH}/health`);
      expect(after.body.forges).to.deep.equal({
        gitea: { secret_configured: true, secret_source: 'shared' },
        github: { secret_configured: true, secret_source: 'shared' },
        gitlab: { secret_configured: true, secret_source: 'own' },
      });
      expect(after.body.warnings).to.deep.equal([]);
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
      for (const [conclusion, level] of [
        ['failure', 'error'],
        ['cancelled', 'warning'],
      ]) {
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
      // GitHub's form of the header sent by Gitea: the message says what the form should be
      const signed = giteaHeaders('push', body);
      const prefixed = await deliver({ ...signed, 'X-Gitea-Signature': `sha256=${signed['X-Gitea-Signature']}` }, body);
      expect(prefixed.status).to.equal(401);
      expect(prefixed.body.error.message).to.equal(
        'bad or missing webhook signature: X-Gitea-Signature must be the hex HMAC-SHA256 of the body (64 hex digits, without the sha256= prefix)',
      );
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
      const missing = await deliver(headers, json(fixture('gitlab-push')));
      expect(missing.status).to.equal(401);
      expect(missing.body.error.message).to.equal('bad or missing webhook signature: no X-Gitlab-Token header: give the webhook a secret on the forge');
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
    const pushBody = () =>
      json({ ...githubExample('push', (e) => e.ref === 'refs/heads/master' && !e.deleted), after: randomUUID().replace(/-/g, '').padEnd(40, '0') });

    it('401 for a missing, malformed or wrong signature, and for a body changed after signing', async () => {
      const body = pushBody();
      const noSig = githubHeaders('push', body);
      delete noSig['X-Hub-Signature-256'];
      // each says what is wrong with the header's form, or that the value is not this secret's
      const refused = async (headers: Record<string, string>, message: string) => {
        const res = await deliver(headers, body);
        expect(res.status).to.equal(401);
        expect(res.body.error.message).to.equal(`bad or missing webhook signature: ${message}`);
      };
      await refused(noSig, 'no X-Hub-Signature-256 header: give the webhook a secret on the forge');
      await refused(
        { ...githubHeaders('push', body), 'X-Hub-Signature-256': 'sha256=abc' },
        'X-Hub-Signature-256 must be sha256= and the hex HMAC-SHA256 of the body',
      );
      await refused(githubHeaders('push', body, 'not-the-secret-0123456789'), 'it does not verify under the secret set here for GitHub');
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
      expect(res.body.error.details[0]).to.deep.include({
        field: 'body',
        message: "is form-encoded: set the webhook's content type to application/json on the forge",
      });
      const garbled = Buffer.from('{"zen": ');
      const plain = await deliver(githubHeaders('push', garbled), garbled);
      expect(plain.body.error.details[0]).to.deep.include({ field: 'body', message: 'is not valid JSON' });
      const arr = json([1, 2]);
      expect((await deliver(githubHeaders('push', arr), arr)).status).to.equal(400);
    });

    it('400 naming the field for a handled event without a field it needs', async () => {
      const payload = githubExample('push', (e) => e.ref === 'refs/heads/master' && !e.deleted);
      delete payload.repository;
      const body = json(payload);
      const res = await deliver(githubHeaders('push', body), body);
      expect(res.status).to.equal(400);
      expect(res.body.error.details).to.deep.equal([{ field: 'repository', message: 'is required' }]);
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

    it('a signed GitHub delivery re-sent as Gitea (same body and signature, new id) is a duplicate, notified once', async () => {
      const body = pushBody();
      const before = ws.all('system:notify').length;
      const rowsBefore = Number((await svc.service.db('notifications').count({ c: '*' }).first())!.c);
      const github = githubHeaders('push', body);
      const first = await deliver(github, body);
      expect(first.status, JSON.stringify(first.body)).to.equal(202);
      // Gitea signs the same way: the hex HMAC-SHA256 of the raw body
      const asGitea = giteaHeaders('push', body, SECRET, randomUUID());
      expect(asGitea['X-Gitea-Signature']).to.equal(github['X-Hub-Signature-256']!.slice('sha256='.length));
      const replay = await deliver(asGitea, body);
      expect(replay.status, JSON.stringify(replay.body)).to.equal(200);
      expect(replay.body.status).to.equal('duplicate');
      // and the other way round: a Gitea delivery re-sent as GitHub
      const gitea = json({ ...fixture('gitea-push'), after: randomUUID() });
      const fromGitea = await deliver(giteaHeaders('push', gitea), gitea);
      expect(fromGitea.status).to.equal(202);
      const back = await deliver(githubHeaders('push', gitea, SECRET, randomUUID()), gitea);
      expect(back.status, JSON.stringify(back.body)).to.equal(200);
      expect(back.body.status).to.equal('duplicate');
      await ws.next('system:notify', (f) => f.payload.id === fromGitea.body.notification_id);
      await ws.roundTrip();
      expect(ws.all('system:notify').length - before).to.equal(2);
      expect(Number((await svc.service.db('notifications').count({ c: '*' }).first())!.c) - rowsBefore).to.equal(2);
    });

    it('lets one of simultaneous GitHub and Gitea copies of a signed body through', async () => {
      const body = pushBody();
      const before = Number((await svc.service.db('notifications').count({ c: '*' }).first())!.c);
      const copies = Array.from({ length: 6 }, (_, i) => (i % 2 ? giteaHeaders('push', body) : githubHeaders('push', body)));
      const answers = await Promise.all(copies.map((h) => deliver(h, body)));
      expect(answers.map((a) => a.status).sort()).to.deep.equal([200, 200, 200, 200, 200, 202]);
      expect(Number((await svc.service.db('notifications').count({ c: '*' }).first())!.c) - before).to.equal(1);
    });

    it('GitLab: de-duplicated by its event UUID or idempotency key when sent', async () => {
      const uuid = randomUUID();
      const body = json(fixture('gitlab-push'));
      const headers = { ...gitlabHeaders('Push Hook'), 'X-Gitlab-Event-UUID': uuid };
      expect((await deliver(headers, body)).status).to.equal(202);
      expect((await deliver(headers, body)).body.status).to.equal('duplicate');
      const key = randomUUID();
      expect((await deliver({ ...gitlabHeaders('Push Hook'), 'Idempotency-Key': key }, body)).status).to.equal(202);
      expect((await deliver({ ...gitlabHeaders('Push Hook'), 'Idempotency-Key': key, 'X-Gitlab-Event-UUID': randomUUID() }, body)).body.status).to.equal(
        'duplicate',
      );
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

    it('forgets delivery ids and body digests after 30 days, keeping the newer ones', async () => {
      const db = svc.service.db;
      const old = pushBody();
      const recent = pushBody();
      const first = await deliver(githubHeaders('push', old), old);
      expect(first.status).to.equal(202);
      expect((await deliver(githubHeaders('push', recent), recent)).status).to.equal(202);
      const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');
      const longAgo = Date.now() - 31 * 24 * 3600_000;
      await db('webhook_deliveries')
        .where({ payload_sha256: digest(old) })
        .update({ received_at: longAgo });
      await db('webhook_payload_digests')
        .where({ payload_sha256: digest(old) })
        .update({ received_at: longAgo });
      await svc.service.notifications.webhook.sweep();
      expect(await db('webhook_deliveries').where({ payload_sha256: digest(old) })).to.have.length(0);
      expect(await db('webhook_payload_digests').where({ payload_sha256: digest(old) })).to.have.length(0);
      expect(await db('webhook_deliveries').where({ payload_sha256: digest(recent) })).to.have.length(1);
      expect(await db('webhook_payload_digests').where({ payload_sha256: digest(recent) })).to.have.length(1);
      // within the 30 days the recent body stays a duplicate under any forge's headers
      expect((await deliver(giteaHeaders('push', recent), recent)).body.status).to.equal('duplicate');
    });

    it('reports the last delivery in health and is disabled again once the secret is deleted', async () => {
      const health = await api(svc).get(`${PATH}/health`);
      expect(health.body.last_delivery_at).to.be.a('string');
      expect(Date.now() - Date.parse(health.body.last_delivery_at)).to.be.lessThan(60_000);
      expect((await api(svc).delete('/api/settings/webhook-secret').set('Authorization', adminAuth())).status).to.equal(204);
      const body = pushBody();
      expect((await deliver(githubHeaders('push', body), body)).status).to.equal(503);
      // GitLab keeps its own secret
      const partly = (await api(svc).get(`${PATH}/health`)).body;
      expect(partly.status).to.equal('ok');
      expect(partly.forges.github).to.deep.equal({ secret_configured: false, secret_source: null });
      expect((await deliver(gitlabHeaders('Push Hook'), json(fixture('gitlab-push')))).status).to.equal(202);
      expect((await api(svc).delete('/api/settings/webhook-secret/gitlab').set('Authorization', adminAuth())).status).to.equal(204);
      expect((await deliver(gitlabHeaders('Push Hook'), json(fixture('gitlab-push')))).status).to.equal(503);
      expect((await api(svc).get(`${PATH}/health`)).body.status).to.equal('disabled');
    });
  });

  describe('a secret per forge', () => {
    const GITHUB_SECRET = 'github-own-secret-for-tests-0123456789';
    let forgeSvc: TestService;
    const send = (headers: Headers, body: Buffer) => api(forgeSvc).post(PATH).set(headers).send(body.toString());
    const put = (path: string, secret: string) => api(forgeSvc).put(`/api/settings/webhook-secret${path}`).set('Authorization', adminAuth()).send({ secret });
    const push = () =>
      json({ ...githubExample('push', (e) => e.ref === 'refs/heads/master' && !e.deleted), after: randomUUID().replace(/-/g, '').padEnd(40, '0') });
    const giteaPush = () => json({ ...fixture('gitea-push'), after: randomUUID() });
    const notes = async () => Number((await forgeSvc.service.db('notifications').count({ c: '*' }).first())!.c);

    let bob: TestUser;

    before(async () => {
      forgeSvc = await startService();
      bob = await createUser(forgeSvc, 'bob');
      expect((await put('', SECRET)).status).to.equal(204);
      expect((await put('/github', GITHUB_SECRET)).status).to.equal(204);
      expect((await put('/gitlab', GITLAB_SECRET)).status).to.equal(204);
    });
    after(async () => {
      await forgeSvc?.destroy();
    });

    it('verifies a forge with its own secret only: GitHub signed with the GitLab secret (or the shared one) is 401', async () => {
      const before = await notes();
      const body = push();
      const withGitlab = await send(githubHeaders('push', body, GITLAB_SECRET), body);
      expect(withGitlab.status).to.equal(401);
      expect(withGitlab.body.error.code).to.equal('unauthorized');
      expect((await send(githubHeaders('push', body, SECRET), body)).status).to.equal(401);
      expect(await notes()).to.equal(before);
      expect((await send(githubHeaders('push', body, GITHUB_SECRET), body)).status).to.equal(202);
      // GitLab: its own token only (another secret in use would also be marked as sent in clear: below)
      expect((await send(gitlabHeaders('Push Hook', 'not-the-secret-0123456789'), json(fixture('gitlab-push')))).status).to.equal(401);
      expect((await send(gitlabHeaders('Push Hook', GITLAB_SECRET), json(fixture('gitlab-push')))).status).to.equal(202);
      expect(await notes()).to.equal(before + 2);
    });

    it('falls back to the shared secret for a forge without its own', async () => {
      const body = giteaPush();
      expect((await send(giteaHeaders('push', body, GITLAB_SECRET), body)).status).to.equal(401);
      expect((await send(giteaHeaders('push', body, GITHUB_SECRET), body)).status).to.equal(401);
      const res = await send(giteaHeaders('push', body, SECRET), body);
      expect(res.status, JSON.stringify(res.body)).to.equal(202);
      const health = (await api(forgeSvc).get(`${PATH}/health`)).body;
      expect(health).to.include({ status: 'ok', secret_configured: true });
      expect(health.forges).to.deep.equal({
        gitea: { secret_configured: true, secret_source: 'shared' },
        github: { secret_configured: true, secret_source: 'own' },
        gitlab: { secret_configured: true, secret_source: 'own' },
      });
      expect(health.warnings).to.deep.equal([]);
      expect(JSON.stringify(health)).to.not.contain(SECRET).and.not.contain(GITLAB_SECRET);
    });

    it("never verifies Gitea or GitHub with GitLab's own secret, even when set as theirs", async () => {
      expect((await put('/gitea', GITLAB_SECRET)).status).to.equal(204);
      const body = giteaPush();
      const res = await send(giteaHeaders('push', body, GITLAB_SECRET), body);
      expect(res.status).to.equal(401);
      expect(res.body.error.message).to.match(/also GitLab's secret/);
      // a wrong signature learns only that it does not verify, not that GitLab's secret is involved
      expect((await send(giteaHeaders('push', body, 'not-the-secret-0123456789'), body)).body.error.message).to.equal(
        'bad or missing webhook signature: it does not verify under the secret set here for Gitea',
      );
      const health = (await api(forgeSvc).get(`${PATH}/health`)).body;
      expect(health.forges.gitea).to.deep.equal({ secret_configured: false, secret_source: 'own' });
      expect(health.warnings).to.have.length(1);
      expect(health.warnings[0]).to.match(/^Gitea deliveries are not verified/);
      // cleared: Gitea is back on the shared secret
      expect((await api(forgeSvc).delete('/api/settings/webhook-secret/gitea').set('Authorization', adminAuth())).status).to.equal(204);
      expect((await send(giteaHeaders('push', body, SECRET), body)).status).to.equal(202);
    });

    it('the per-forge settings routes: admin only, the same rule, never the value', async () => {
      expect((await api(forgeSvc).put('/api/settings/webhook-secret/github').set('Authorization', bob.auth).send({ secret: GITHUB_SECRET })).status).to.equal(
        403,
      );
      expect((await api(forgeSvc).delete('/api/settings/webhook-secret/github').set('Authorization', bob.auth)).status).to.equal(403);
      expect((await api(forgeSvc).get('/api/settings/webhook-secret/github')).status).to.equal(401);
      const short = await put('/gitlab', 'short');
      expect(short.status).to.equal(400);
      expect(short.body.error.details[0].field).to.equal('secret');
      const github = await api(forgeSvc).get('/api/settings/webhook-secret/github').set('Authorization', adminAuth());
      expect(github.body).to.deep.equal({ configured: true, locked: false });
      expect((await api(forgeSvc).get('/api/settings/webhook-secret/gitea').set('Authorization', adminAuth())).body).to.deep.equal({
        configured: false,
        locked: false,
      });
      expect((await api(forgeSvc).get('/api/settings/webhook-secret/bitbucket').set('Authorization', adminAuth())).status).to.equal(404);
    });

    it('the integrations page has a panel per forge, from the settings table, and room for the warnings', async () => {
      const page = await api(forgeSvc).get('/admin/integrations').set('Authorization', adminAuth());
      expect(page.status).to.equal(200);
      for (const forge of ['gitea', 'github', 'gitlab']) expect(page.text).to.include(`data-webhook-secret-${forge}`);
      expect(page.text).to.include('data-webhook-warnings').and.include('minlength="16" maxlength="256"');
      const user = await api(forgeSvc).get('/admin/integrations').set('Authorization', bob.auth);
      expect(user.status).to.equal(403);
      expect(user.text).to.not.include('data-webhook-secret-github');
    });
  });

  describe('the shared secret and GitLab', () => {
    const ROTATED = 'rotated-shared-secret-for-tests-0123456789';
    const GITHUB_SECRET = 'github-own-secret-for-tests-0123456789';
    let sharedSvc: TestService;
    const send = (headers: Headers, body: Buffer) => api(sharedSvc).post(PATH).set(headers).send(body.toString());
    const put = (path: string, secret: string) => api(sharedSvc).put(`/api/settings/webhook-secret${path}`).set('Authorization', adminAuth()).send({ secret });
    const push = () =>
      json({ ...githubExample('push', (e) => e.ref === 'refs/heads/master' && !e.deleted), after: randomUUID().replace(/-/g, '').padEnd(40, '0') });
    const giteaPush = () => json({ ...fixture('gitea-push'), after: randomUUID() });
    const health = async () => (await api(sharedSvc).get(`${PATH}/health`)).body;

    before(async () => {
      sharedSvc = await startService();
      expect((await put('', SECRET)).status).to.equal(204);
    });
    after(async () => {
      await sharedSvc?.destroy();
    });

    it('verifies every forge as before until GitLab sends it, then no longer GitHub or Gitea', async () => {
      let body = push();
      expect((await send(githubHeaders('push', body), body)).status).to.equal(202);
      let gitea = giteaPush();
      expect((await send(giteaHeaders('push', gitea), gitea)).status).to.equal(202);
      expect((await health()).warnings).to.have.length(1);
      expect((await health()).warnings[0]).to.match(/^GitLab shares the shared webhook secret with Gitea and GitHub/);
      // a wrong GitLab token proves nothing
      expect((await send(gitlabHeaders('Push Hook', 'wrong-token-0123456789'), json(fixture('gitlab-push')))).status).to.equal(401);
      body = push();
      expect((await send(githubHeaders('push', body), body)).status).to.equal(202);

      expect((await send(gitlabHeaders('Push Hook', SECRET), json(fixture('gitlab-push')))).status).to.equal(202);
      // what the secret verifies changed: an event, by the delivery, naming the setting (never its value)
      const events = (await api(sharedSvc).get('/api/audit').query({ action: 'settings.changed' }).set('Authorization', adminAuth()).expect(200)).body.events;
      const marked = events.filter((e: any) => e.details.change === 'sent_in_clear');
      expect(marked).to.have.length(1);
      expect(marked[0]).to.deep.include({ outcome: 'success', target: { type: 'settings', id: 'scm_webhook_secret', name: 'scm_webhook_secret' } });
      expect(marked[0].actor).to.include({ user_id: null, username: 'webhook:gitlab', method: 'webhook' });
      expect(JSON.stringify(marked)).not.to.include(SECRET);
      const before = Number((await sharedSvc.service.db('notifications').count({ c: '*' }).first())!.c);
      body = push();
      const refused = await send(githubHeaders('push', body), body);
      expect(refused.status).to.equal(401);
      expect(refused.body.error.message)
        .to.match(/GitLab has sent it in clear/)
        .and.match(/scm_webhook_secret_github/);
      gitea = giteaPush();
      expect((await send(giteaHeaders('push', gitea), gitea)).status).to.equal(401);
      expect(Number((await sharedSvc.service.db('notifications').count({ c: '*' }).first())!.c)).to.equal(before);
      // GitLab itself goes on
      expect((await send(gitlabHeaders('Push Hook', SECRET), json(fixture('gitlab-push')))).status).to.equal(202);
      const h = await health();
      expect(h.status).to.equal('ok');
      expect(h.forges).to.deep.equal({
        gitea: { secret_configured: false, secret_source: 'shared' },
        github: { secret_configured: false, secret_source: 'shared' },
        gitlab: { secret_configured: true, secret_source: 'shared' },
      });
      expect(h.warnings.map((w: string) => w.split(' ')[0])).to.deep.equal(['Gitea', 'GitHub']);
    });

    it('is remembered in the database: another instance refuses it too', async () => {
      const peer = await startPeer(sharedSvc);
      try {
        const body = push();
        expect((await api(peer).post(PATH).set(githubHeaders('push', body)).send(body.toString())).status).to.equal(401);
      } finally {
        await peer.stop();
      }
    });

    it('a forge given its own secret works again; a rotated shared secret is new until GitLab sends it', async () => {
      expect((await put('/github', GITHUB_SECRET)).status).to.equal(204);
      const body = push();
      expect((await send(githubHeaders('push', body, GITHUB_SECRET), body)).status).to.equal(202);
      expect((await put('', ROTATED)).status).to.equal(204);
      let gitea = giteaPush();
      expect((await send(giteaHeaders('push', gitea, ROTATED), gitea)).status).to.equal(202);
      // the old value stays refused
      gitea = giteaPush();
      expect((await send(giteaHeaders('push', gitea, SECRET), gitea)).status).to.equal(401);
      expect((await send(gitlabHeaders('Push Hook', ROTATED), json(fixture('gitlab-push')))).status).to.equal(202);
      gitea = giteaPush();
      expect((await send(giteaHeaders('push', gitea, ROTATED), gitea)).status).to.equal(401);
    });

    it("GitHub's own secret arriving as a GitLab token is refused there and stops verifying GitHub", async () => {
      const res = await send(gitlabHeaders('Push Hook', GITHUB_SECRET), json(fixture('gitlab-push')));
      expect(res.status).to.equal(401);
      const body = push();
      const refused = await send(githubHeaders('push', body, GITHUB_SECRET), body);
      expect(refused.status).to.equal(401);
      expect(refused.body.error.message).to.match(/GitLab has sent it in clear/);
      expect((await health()).forges.github).to.deep.equal({ secret_configured: false, secret_source: 'own' });
    });
  });

  describe('secrets per forge from the environment', () => {
    const GITHUB_SECRET = 'github-env-secret-for-tests-0123456789';
    let envSvc: TestService;
    before(async () => {
      envSvc = await startService({ env: { SERVICE_SCM_WEBHOOK_SECRET_GITHUB: GITHUB_SECRET, SERVICE_SCM_WEBHOOK_SECRET_GITLAB: GITLAB_SECRET } });
    });
    after(async () => {
      await envSvc?.destroy();
    });

    it('uses them; the settings API cannot change them (409) but can set the other forges', async () => {
      const ping = json(githubExample('ping'));
      expect(
        (
          await api(envSvc)
            .post(PATH)
            .set(githubHeaders('ping', ping, GITHUB_SECRET))
            .send(ping.toString())
        ).status,
      ).to.equal(200);
      const other = json({ ...githubExample('ping'), zen: randomUUID() });
      expect(
        (
          await api(envSvc)
            .post(PATH)
            .set(githubHeaders('ping', other, GITLAB_SECRET))
            .send(other.toString())
        ).status,
      ).to.equal(401);
      for (const forge of ['github', 'gitlab']) {
        const path = `/api/settings/webhook-secret/${forge}`;
        const put = await api(envSvc).put(path).set('Authorization', adminAuth()).send({ secret: 'another-secret-0123456789' });
        expect(put.status, forge).to.equal(409);
        expect(put.body.error.message).to.contain(`SERVICE_SCM_WEBHOOK_SECRET_${forge.toUpperCase()}`);
        expect((await api(envSvc).delete(path).set('Authorization', adminAuth())).status).to.equal(409);
        expect((await api(envSvc).get(path).set('Authorization', adminAuth())).body).to.deep.equal({ configured: true, locked: true });
      }
      // Gitea has none (and there is no shared secret): 503 until it is given one
      const gitea = json({ ...fixture('gitea-push'), after: randomUUID() });
      const off = await api(envSvc).post(PATH).set(giteaHeaders('push', gitea)).send(gitea.toString());
      expect(off.status).to.equal(503);
      expect((await api(envSvc).get('/api/settings/webhook-secret/gitea').set('Authorization', adminAuth())).body).to.deep.equal({
        configured: false,
        locked: false,
      });
      expect((await api(envSvc).put('/api/settings/webhook-secret/gitea').set('Authorization', adminAuth()).send({ secret: SECRET })).status).to.equal(204);
      expect((await api(envSvc).post(PATH).set(giteaHeaders('push', gitea)).send(gitea.toString())).status).to.equal(202);
      expect((await api(envSvc).get(`${PATH}/health`)).body.forges).to.deep.equal({
        gitea: { secret_configured: true, secret_source: 'own' },
        github: { secret_configured: true, secret_source: 'own' },
        gitlab: { secret_configured: true, secret_source: 'own' },
      });
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

describe('SCM webhook intake under a flood of wrong signatures', function () {
  this.timeout(30_000);
  let svc: TestService;
  const from = (ip: string, headers: Headers, body: Buffer) =>
    api(svc)
      .post(PATH)
      .set({ ...headers, 'X-Forwarded-For': ip })
      .send(body.toString());

  before(async () => {
    svc = await startService({ env: { SERVICE_SCM_WEBHOOK_SECRET: SECRET, SERVICE_TRUST_PROXY: 'true' } });
  });
  after(async () => svc?.destroy());

  it('limits an address by its rejected deliveries (429, Retry-After), never a delivery that verifies, and counts every rejection in a few coalesced events', async () => {
    const body = json(githubExample('ping'));
    const statuses: number[] = [];
    let retryAfter: string | undefined;
    for (let i = 0; i < 25; i++) {
      const res = await from('198.51.100.7', githubHeaders('ping', body, 'not-the-secret-0123456789'), body);
      statuses.push(res.status);
      if (res.status === 429) retryAfter = res.headers['retry-after'];
    }
    expect(statuses.slice(0, 19)).to.deep.equal(Array(19).fill(401));
    expect(statuses.slice(19)).to.deep.equal(Array(6).fill(429));
    expect(Number(retryAfter)).to.be.greaterThan(0);
    // a forge signing right from another address is not held back
    expect((await from('198.51.100.8', githubHeaders('ping', body), body)).status).to.equal(200);
    // a delivery that verifies is taken even from the limited address (a forge's egress is shared)
    expect((await from('198.51.100.7', githubHeaders('ping', body), body)).status).to.equal(200);
    await svc.service.iam.audit.flush();
    const rows = await svc.service.db('audit_events').where({ action: 'webhook.rejected', actor_ip: '198.51.100.7' });
    // details: text on SQLite, JSON on PostgreSQL
    const detailsOf = (r: { details: unknown }) => (typeof r.details === 'string' ? JSON.parse(r.details) : r.details) as { count?: number };
    const counted = rows.reduce((n, r) => n + Number(detailsOf(r).count ?? 1), 0);
    expect(counted).to.equal(25);
    expect(rows.length).to.be.at.most(4);
  });
});
