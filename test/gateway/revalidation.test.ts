import { expect } from 'chai';
import { startService, adminAuth, basic, SYSTEM_KEY, type TestService } from '../support/service.js';
import { WsClient, api, createUser, sleep, type TestUser } from './helpers.js';

/**
 * A live connection lasts no longer than what proved it: whatever the credential (system key,
 * per-user key, session token, cookie session, Basic, or a ticket minted from any of them), the
 * connection is closed with 1008 within a second of its end.
 */
describe('ws gateway: live connections end with their credential', function () {
  this.timeout(30_000);
  let svc: TestService;
  const open: WsClient[] = [];
  const ADMIN_SETTINGS = { Authorization: adminAuth() };

  before(async () => {
    // the periodic sweep is far away: only the change itself may close the connections in time
    svc = await startService({ env: { SERVICE_SYSTEM_API_KEY: '', SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    svc.service.gateway.gateway.options.revalidateMs = 600_000;
    await api(svc).put('/api/settings/system-api-key').set(ADMIN_SETTINGS).send({ key: SYSTEM_KEY }).expect(204);
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((c) => c.close()));
  });
  after(async () => svc?.destroy());

  const connect = async (opts: Parameters<typeof WsClient.connect>[1]) => {
    const c = await WsClient.connect(svc, opts);
    open.push(c);
    return c;
  };
  const ticketFor = async (headers: Record<string, string>) => (await api(svc).post('/api/ws/ticket').set(headers).expect(200)).body.ticket as string;

  /** Closed with 1008 within a second of `end()`. */
  async function endsWithin1s(clients: WsClient[], end: () => Promise<unknown>): Promise<void> {
    const started = Date.now();
    await end();
    const closes = await Promise.all(clients.map((c) => Promise.race([c.closed, sleep(1000).then(() => null)])));
    closes.forEach((close, i) => {
      expect(close, `connection ${i} still open ${Date.now() - started} ms after the credential ended`).not.to.equal(null);
      expect(close!.code).to.equal(1008);
    });
  }

  it('the system key: changed or cleared, its connections and its tickets end', async () => {
    const direct = await connect({ headers: { 'X-API-Key': SYSTEM_KEY } });
    const viaTicket = await connect({ query: `ticket=${await ticketFor({ 'X-API-Key': SYSTEM_KEY })}` });
    expect(direct.frames[0].payload.username).to.equal('system');
    await endsWithin1s([direct, viaTicket], () =>
      api(svc)
        .put('/api/settings/system-api-key')
        .set(ADMIN_SETTINGS)
        .send({ key: `${SYSTEM_KEY}-rotated` })
        .expect(204),
    );

    const rotated = await connect({ headers: { 'X-API-Key': `${SYSTEM_KEY}-rotated` } });
    const unused = await ticketFor({ 'X-API-Key': `${SYSTEM_KEY}-rotated` });
    await endsWithin1s([rotated], () => api(svc).delete('/api/settings/system-api-key').set(ADMIN_SETTINGS).expect(204));
    // a ticket minted before the key was cleared no longer opens anything, nor does the key
    expect(
      await WsClient.connect(svc, { query: `ticket=${unused}` }).then(
        () => 'open',
        (e: Error) => e.message,
      ),
    ).to.match(/401/);
    expect(
      await WsClient.connect(svc, { headers: { 'X-API-Key': `${SYSTEM_KEY}-rotated` } }).then(
        () => 'open',
        (e: Error) => e.message,
      ),
    ).to.match(/401/);
  });

  it("a key or session revoked: its connections and tickets end, the user's others stay", async () => {
    const carol = await createUser(svc, 'carol');
    const key = (await api(svc).post('/api/me/api-keys').set('Authorization', carol.auth).send({ label: 'k' }).expect(201)).body;
    const login = (await api(svc).post('/api/auth/login').send({ username: carol.username, password: carol.password }).expect(200)).body;
    const byKey = await connect({ headers: { 'X-API-Key': key.token } });
    const byKeyTicket = await connect({ query: `ticket=${await ticketFor({ 'X-API-Key': key.token })}` });
    const bySession = await connect({ headers: { Authorization: `Bearer ${login.token}` } });
    await endsWithin1s([byKey, byKeyTicket], () => api(svc).delete(`/api/me/api-keys/${key.id}`).set('Authorization', carol.auth).expect(204));
    await bySession.roundTrip(); // still open
    await endsWithin1s([bySession], () => api(svc).post('/api/auth/logout').set('Authorization', `Bearer ${login.token}`).expect(204));
  });

  it('Basic, and a ticket minted from Basic: a password change ends them', async () => {
    const dave = await createUser(svc, 'dave');
    const byBasic = await connect({ headers: { Authorization: dave.auth } });
    const byTicket = await connect({ query: `ticket=${await ticketFor({ Authorization: dave.auth })}` });
    const spare = await ticketFor({ Authorization: dave.auth });
    await endsWithin1s([byBasic, byTicket], () =>
      api(svc)
        .post(`/api/users/${dave.id}/password`)
        .set('Authorization', dave.auth)
        .send({ current_password: dave.password, new_password: 'a-new-dave-password' })
        .expect(204),
    );
    expect(
      await WsClient.connect(svc, { query: `ticket=${spare}` }).then(
        () => 'open',
        (e: Error) => e.message,
      ),
    ).to.match(/401/);
    // the new password works at once
    const again = await connect({ headers: { Authorization: basic('dave', 'a-new-dave-password') } });
    expect(again.frames[0].payload.username).to.equal('dave');
  });

  for (const change of ['disabled', 'deleted'] as const) {
    it(`every credential kind of a user ${change} by an administrator ends`, async () => {
      const u: TestUser = await createUser(svc, `eve-${change}`);
      const key = (await api(svc).post('/api/me/api-keys').set('Authorization', u.auth).send({ label: 'k' }).expect(201)).body;
      const loginRes = await api(svc).post('/api/auth/login').send({ username: u.username, password: u.password }).expect(200);
      const login = loginRes.body;
      // the UI's cookie session, as the browser sends it
      const cookie = (loginRes.headers['set-cookie'] as unknown as string[]).map((c) => c.split(';')[0]).join('; ');
      const clients = [
        await connect({ headers: { Authorization: u.auth } }),
        await connect({ headers: { 'X-API-Key': key.token } }),
        await connect({ headers: { Authorization: `Bearer ${login.token}` } }),
        await connect({ headers: { Cookie: cookie }, origin: 'http://localhost:8080' }),
        await connect({ query: `ticket=${await ticketFor({ Authorization: u.auth })}` }),
        await connect({ query: `ticket=${await ticketFor({ 'X-API-Key': key.token })}` }),
      ];
      await endsWithin1s(clients, () =>
        change === 'disabled'
          ? api(svc).patch(`/api/users/${u.id}`).set('Authorization', adminAuth()).send({ disabled: true }).expect(200)
          : api(svc).delete(`/api/users/${u.id}`).set('Authorization', adminAuth()).expect(204),
      );
    });
  }

  it("a password change ends the user's other sessions, keeps the one that made it; an admin reset ends them all", async () => {
    const frank = await createUser(svc, 'frank');
    const login = () =>
      api(svc)
        .post('/api/auth/login')
        .send({ username: 'frank', password: frank.password })
        .expect(200)
        .then((r) => r.body.token as string);
    const [mine, other] = [await login(), await login()];
    const otherWs = await connect({ headers: { Authorization: `Bearer ${other}` } });
    const mineWs = await connect({ headers: { Authorization: `Bearer ${mine}` } });
    await endsWithin1s([otherWs], () =>
      api(svc)
        .post(`/api/users/${frank.id}/password`)
        .set('Authorization', `Bearer ${mine}`)
        .send({ current_password: frank.password, new_password: 'franks-second-password' })
        .expect(204),
    );
    await api(svc).get('/api/me').set('Authorization', `Bearer ${other}`).expect(401);
    await api(svc).get('/api/me').set('Authorization', `Bearer ${mine}`).expect(200);
    await mineWs.roundTrip();

    await endsWithin1s([mineWs], () =>
      api(svc).post(`/api/users/${frank.id}/password`).set('Authorization', adminAuth()).send({ new_password: 'reset-by-the-admin' }).expect(204),
    );
    await api(svc).get('/api/me').set('Authorization', `Bearer ${mine}`).expect(401);
  });

  it('a session that expires ends its connection then', async () => {
    const gina = await createUser(svc, 'gina');
    const { token, key } = await svc.service.auth.apiKeys.create(gina.id, 'session', { label: 'short', expiresAt: Date.now() + 600 });
    const c = await connect({ headers: { Authorization: `Bearer ${token}` } });
    expect(key.expiresAt).to.be.a('number');
    const close = await Promise.race([c.closed, sleep(2500).then(() => null)]);
    expect(close?.code).to.equal(1008);
  });

  it('a connection opened with Basic ends when its group comes to require a second factor (at once here; other instances by their 30 s sweep)', async () => {
    const u = await createUser(svc, 'walled');
    const c = await connect({ headers: { Authorization: basic(u.username, u.password) } });
    try {
      await endsWithin1s([c], () =>
        api(svc)
          .patch('/api/settings/auth')
          .set(ADMIN_SETTINGS)
          .send({ mfa_required_groups: ['INT_USER'] })
          .expect(200),
      );
      // a new connection meets the wall at the upgrade
      const refused = await WsClient.connect(svc, { headers: { Authorization: basic(u.username, u.password) } }).then(
        () => null,
        (err: Error) => err.message,
      );
      expect(refused).to.match(/403/);
    } finally {
      await api(svc).patch('/api/settings/auth').set(ADMIN_SETTINGS).send({ mfa_required_groups: null }).expect(200);
    }
  });
});
