import { expect } from 'chai';
import request from 'supertest';
import { startService, adminAuth, basic, SYSTEM_KEY, type TestService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';

/**
 * Who may hand out the host: permissions that reach it through a socket provider, and the
 * protected bot and superadmin accounts, change only by a superadmin or the system key.
 */
describe('IAM policy: host permissions and protected accounts', () => {
  let svc: TestService;
  const logs = capturingLogger('info');
  const superadmin = () => adminAuth(); // SERVICE_ADMIN_FORCE_SUPERADMIN below
  const plain = basic('plainadmin', 'plainadmin-password');
  let plainId: string;
  let botId: string;

  before(async () => {
    svc = await startService({ logger: logs.logger, env: { SERVICE_ADMIN_FORCE_SUPERADMIN: 'true', SERVICE_SYSTEM_API_KEY: SYSTEM_KEY } });
    plainId = (
      await request(svc.url)
        .post('/api/users')
        .set('Authorization', superadmin())
        .send({ username: 'plainadmin', password: 'plainadmin-password', groups: ['INT_ADMIN'] })
        .expect(201)
    ).body.id;
    const users = (await request(svc.url).get('/api/users').set('Authorization', superadmin()).expect(200)).body.users;
    botId = users.find((u: { username: string }) => u.username === 'bot').id;
    await request(svc.url)
      .post('/api/groups')
      .set('X-API-Key', SYSTEM_KEY)
      .send({ name: 'runners', permissions: ['socket:container:spawn'] })
      .expect(201);
  });
  after(async () => svc.destroy());

  const access = async (auth: string) => (await request(svc.url).get('/api/me/access').set('Authorization', auth).expect(200)).body.permissions as string[];

  it('a plain administrator cannot grant a host permission, to anyone or through any door', async () => {
    const before = logs.lines.length;
    const attempts: Array<[string, string, Record<string, unknown>]> = [
      ['patch', `/api/users/${plainId}`, { extra_permissions: ['socket:container:spawn'] }],
      ['patch', `/api/users/${plainId}`, { extra_permissions: ['socket:*'] }],
      ['patch', `/api/users/${plainId}`, { groups: ['INT_ADMIN', 'runners'] }], // joins a group that holds one
      ['post', '/api/users', { username: 'accomplice', password: 'accomplice-password', extra_permissions: ['socket:mounts:repair'] }],
      ['post', '/api/users', { username: 'accomplice', password: 'accomplice-password', groups: ['runners'] }],
      ['post', '/api/groups', { name: 'escalate', permissions: ['socket:container:mount_rw'] }],
      ['patch', '/api/groups/INT_ADMIN', { permissions: ['feature:*', 'api:read', 'api:write', 'socket:container:spawn'] }],
      // the host services' permissions, reads included
      ...['socket:dns:read', 'socket:dns:write', 'socket:dhcp:read', 'socket:dhcp:write', 'socket:init:read', 'socket:init:control'].map(
        (p): [string, string, Record<string, unknown>] => ['patch', `/api/users/${plainId}`, { extra_permissions: [p] }],
      ),
      ['post', '/api/groups', { name: 'network', permissions: ['socket:dns:write', 'socket:dhcp:write'] }],
    ];
    for (const [method, url, body] of attempts) {
      const res = await (request(svc.url) as any)[method](url).set('Authorization', plain).send(body);
      expect(res.status, `${method} ${url} ${JSON.stringify(body)}`).to.equal(403);
      expect(res.body.error.message).to.match(/only a superadmin may grant permissions that reach the host/);
      // and where to read who may: the walk-through of docs/sockets.md
      expect(res.body.error.details).to.deep.equal({ reason: 'host_boundary', docs: 'docs/sockets.md#who-may-grant-what' });
    }
    expect((await access(plain)).filter((p) => p.startsWith('socket:'))).to.deep.equal([]);
    await request(svc.url).get('/api/groups/escalate').set('Authorization', plain).expect(404);
    const all = (await request(svc.url).get('/api/users').set('Authorization', plain).expect(200)).body.users;
    expect(all.map((u: { username: string }) => u.username)).not.to.include('accomplice');
    expect(logs.lines.slice(before).join('')).not.to.include('host_permissions');
  });

  it('a plain administrator still manages everything else, and may take host permissions away', async () => {
    const u = (
      await request(svc.url)
        .post('/api/users')
        .set('X-API-Key', SYSTEM_KEY)
        .send({ username: 'runner-op', password: 'runner-op-password', groups: ['INT_VIEWER', 'runners'] })
        .expect(201)
    ).body;
    // while the account reaches the host, only taking access away is open to a plain administrator
    await request(svc.url)
      .patch(`/api/users/${u.id}`)
      .set('Authorization', plain)
      .send({ display_name: 'Runner operator', extra_permissions: ['feature:notifications.send'] })
      .expect(403);
    await request(svc.url)
      .patch(`/api/users/${u.id}`)
      .set('Authorization', plain)
      .send({ groups: ['INT_VIEWER'] })
      .expect(200);
    expect(await access(basic('runner-op', 'runner-op-password'))).not.to.include('socket:container:spawn');
    // then it is an ordinary account again
    await request(svc.url)
      .patch(`/api/users/${u.id}`)
      .set('Authorization', plain)
      .send({ display_name: 'Runner operator', extra_permissions: ['feature:notifications.send'] })
      .expect(200);
  });

  it('a superadmin or the system key grants them, and each grant is an audit line', async () => {
    const before = logs.lines.length;
    await request(svc.url)
      .patch(`/api/users/${plainId}`)
      .set('Authorization', superadmin())
      .send({ extra_permissions: ['socket:container:cleanup'] })
      .expect(200);
    await request(svc.url)
      .post('/api/groups')
      .set('X-API-Key', SYSTEM_KEY)
      .send({ name: 'repairers', permissions: ['socket:mounts:repair'] })
      .expect(201);
    expect(await access(plain)).to.include('socket:container:cleanup');
    // each grant is an audit event (a JSON log line with "audit": true) naming what it handed out
    const audit = logs.lines
      .slice(before)
      .map((l) => JSON.parse(l))
      .filter((l) => l.audit === true && l.details?.host_permissions);
    expect(audit).to.have.length(2);
    expect(audit[0]).to.deep.include({ action: 'user.updated', outcome: 'success', target: { type: 'user', id: plainId, name: 'plainadmin' } });
    expect(audit[0].actor.username).to.equal('admin');
    expect(audit[0].details.host_permissions).to.deep.equal(['socket:container:cleanup']);
    expect(audit[1]).to.deep.include({ action: 'group.created', target: { type: 'group', id: 'repairers', name: 'repairers' } });
    expect(audit[1].actor.username).to.equal('system');
  });

  it('the bot account is protected like a superadmin: a plain administrator cannot take it over', async () => {
    const attempts: Array<[string, string, Record<string, unknown>]> = [
      ['post', `/api/users/${botId}/password`, { new_password: 'taken-over-bot' }],
      ['patch', `/api/users/${botId}`, { password: 'taken-over-bot' }],
      ['patch', `/api/users/${botId}`, { groups: ['INT_USER', 'INT_ADMIN'] }],
      ['patch', `/api/users/${botId}`, { disabled: true }],
      ['delete', `/api/users/${botId}`, {}],
    ];
    for (const [method, url, body] of attempts) {
      const res = await (request(svc.url) as any)[method](url).set('Authorization', plain).send(body);
      expect(res.status, `${method} ${url}`).to.equal(403);
      expect(res.body.error.message).to.match(/only a superadmin may change the bot account/);
    }
    await request(svc.url).get('/api/me').set('Authorization', basic('bot', 'bot-test-password')).expect(200);
    await request(svc.url).get('/api/me').set('Authorization', basic('bot', 'taken-over-bot')).expect(401);
    const bot = (await request(svc.url).get(`/api/users/${botId}`).set('Authorization', plain).expect(200)).body;
    expect(bot.groups).to.deep.equal(['INT_USER']);
    expect(bot.disabled).to.equal(false);
    // the bot itself and a superadmin may
    await request(svc.url).patch(`/api/users/${botId}`).set('Authorization', superadmin()).send({ display_name: 'Build bot' }).expect(200);
  });
});
