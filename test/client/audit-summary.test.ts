import { expect } from 'chai';
import request from 'supertest';
import { startService, adminAuth, basic, SYSTEM_KEY, type TestService } from '../support/service.js';
import { auditSummary, type SummarisedEvent } from '../../src/client/audit-summary.js';

/**
 * The summary column of the audit page and of `service-core audit list`: one line saying what an
 * event did, read from the events a real service records (src/client/audit-summary.ts).
 */
describe('audit summary: what each event did, in a line', function () {
  this.timeout(60_000);
  let svc: TestService;
  const api = () => request(svc.url);
  const sys = { 'X-API-Key': SYSTEM_KEY };

  before(async () => {
    svc = await startService({ env: { SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    await api().put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: SYSTEM_KEY }).expect(204);
  });
  after(async () => svc?.destroy());

  /** The summaries of the events after `seq` with this action (any without), oldest first. */
  async function summaries(seq: number, action?: string): Promise<string[]> {
    await svc.service.iam.audit.flush();
    const page = await api()
      .get('/api/audit')
      .query({ limit: 500, ...(action ? { action } : {}) })
      .set(sys)
      .expect(200);
    return (page.body.events as Array<SummarisedEvent & { seq: number }>)
      .filter((e) => e.seq > seq)
      .reverse()
      .map(auditSummary);
  }

  it('names groups, permissions, keys, owners, and why a sign-in failed or an escalation was refused; never a secret', async () => {
    await svc.service.iam.audit.flush();
    const start = ((await api().get('/api/audit').query({ limit: 1 }).set(sys).expect(200)).body.events[0]?.seq as number) ?? 0;

    await api()
      .post('/api/groups')
      .set(sys)
      .send({ name: 'ops', permissions: ['feature:notifications.send', 'api:read', 'api:write', 'feature:admin.audit'] })
      .expect(201);
    await api()
      .patch('/api/groups/ops')
      .set(sys)
      .send({ name: 'operators', description: 'on call', permissions: ['feature:notifications.send', 'api:read', 'feature:dashboard.view'] })
      .expect(200);
    const user = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'summary-sam', password: 'summary-sam-password', groups: ['operators', 'INT_VIEWER'] })
        .expect(201)
    ).body;
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'summary-sso', groups: ['INT_VIEWER'] })
      .expect(201);
    const sam = basic('summary-sam', 'summary-sam-password');
    const key = (
      await api()
        .post('/api/me/api-keys')
        .set('Authorization', sam)
        .send({ label: 'deploy', scopes: ['api:read'], expires_at: '2099-01-02T00:00:00Z' })
        .expect(201)
    ).body;
    await api().post('/api/me/api-keys').set('Authorization', sam).send({ label: 'everything' }).expect(201);
    await api().delete(`/api/users/${user.id}/api-keys/${key.id}`).set(sys).expect(204);
    await api().post('/api/auth/login').send({ username: 'summary-sam', password: 'not-the-password' }).expect(401);
    await api().get('/api/users').set('Authorization', sam).expect(403);
    // a plain administrator's escalations, refused: what was tried, and why not
    const plain = (
      await api()
        .post('/api/users')
        .set(sys)
        .send({ username: 'summary-pat', password: 'summary-pat-password', groups: ['INT_ADMIN'] })
        .expect(201)
    ).body;
    const pat = basic('summary-pat', 'summary-pat-password');
    await api()
      .patch(`/api/users/${plain.id}`)
      .set('Authorization', pat)
      .send({ roles: ['superadmin'] })
      .expect(403);
    await api().put('/api/settings/system-api-key').set('Authorization', pat).send({ key: 'a-system-key-pat-must-not-set-0123456789' }).expect(403);

    expect(await summaries(start, 'group.created')).to.deep.equal(['permissions feature:notifications.send, api:read, api:write and 1 more']);
    expect(await summaries(start, 'group.updated')).to.deep.equal([
      'renamed from ops, permissions +feature:dashboard.view -api:write -feature:admin.audit, description',
    ]);
    // a plugin's role granted to a group by the role ledger: what it added, and whose role
    const ledgerStart = ((await api().get('/api/audit').query({ limit: 1 }).set(sys).expect(200)).body.events[0]?.seq as number) ?? 0;
    expect(await svc.service.iam.ledger.grantOnce('summary-plugin', 'reader', 'operators', 'api:write')).to.equal(true);
    expect(await summaries(ledgerStart, 'group.updated')).to.deep.equal(['permissions +api:write, role reader of the plugin summary-plugin']);
    expect(await summaries(start, 'user.created')).to.deep.equal([
      'groups operators, INT_VIEWER',
      'groups INT_VIEWER, single sign-on only',
      'groups INT_ADMIN',
    ]);
    expect(await summaries(start, 'key.issued')).to.deep.equal([
      'for summary-sam, scopes api:read, until 2099-01-02',
      'for summary-sam, all of the owner’s access',
    ]);
    expect(await summaries(start, 'key.revoked')).to.deep.equal(['of summary-sam']);
    const [failed] = await summaries(start, 'auth.login_failed');
    expect(failed).to.match(/^local, [a-z_]+$/);
    const [denied] = await summaries(start, 'request.denied');
    expect(denied).to.equal('missing feature:admin.users');
    const [escalation] = await summaries(start, 'user.updated');
    expect(escalation).to.match(/^only a superadmin may set roles/);
    const [systemKey] = await summaries(start, 'system_key.changed');
    expect(systemKey).to.match(/^system_api_key, .+/);
    const all = await summaries(start);
    expect(all.join('\n')).not.to.include('summary-sam-password').and.not.include('not-the-password').and.not.include('a-system-key-pat-must-not-set');
  });
});
