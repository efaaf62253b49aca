import { expect } from 'chai';
import request from 'supertest';
import { startService, SYSTEM_KEY, adminAuth, basic, type TestService } from '../support/service.js';
import { holdsHostAccess } from '../../src/iam/afresh.js';

/**
 * A plain administrator's writes racing a trusted actor's grants (docs/security.md, "An account
 * first reaching the host starts afresh"): the account's row and the groups involved are locked,
 * and each write judges the boundary again, so whatever order the database runs them in, no
 * request fails (no deadlock, no 5xx) and no account that reaches the host at the end holds a
 * password or a key the plain administrator made.
 */
describe('IAM: grants racing an administrator writing credentials', function () {
  this.timeout(60_000);
  let svc: TestService;
  const sys = { 'X-API-Key': SYSTEM_KEY };
  const plain = basic('plainadmin', 'plainadmin-password');

  before(async () => {
    svc = await startService({ env: { SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    await request(svc.url).put('/api/settings/system-api-key').set('Authorization', adminAuth()).send({ key: SYSTEM_KEY }).expect(204);
    await request(svc.url)
      .post('/api/users')
      .set(sys)
      .send({ username: 'plainadmin', password: 'plainadmin-password', groups: ['INT_ADMIN'] })
      .expect(201);
  });
  after(async () => svc?.destroy());

  it('no request fails, and no account reaching the host keeps a password or key the administrator made', async () => {
    const api = () => request(svc.url);
    const groups = ['ga', 'gb', 'gc'];
    for (const g of groups)
      await api()
        .post('/api/groups')
        .set(sys)
        .send({ name: g, permissions: ['feature:dashboard.view'] })
        .expect(201);
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const body = { username: `racer${i}`, password: `racer-password-${i}x`, groups: ['INT_USER', groups[i % 3]] };
      ids.push((await api().post('/api/users').set('Authorization', plain).send(body).expect(201)).body.id);
    }
    const ops: Array<() => Promise<request.Response>> = [];
    for (let round = 0; round < 4; round++) {
      for (const g of groups) {
        const permissions = round % 2 ? ['feature:dashboard.view'] : ['feature:dashboard.view', 'socket:container:spawn'];
        ops.push(() => api().patch(`/api/groups/${g}`).set(sys).send({ permissions }));
      }
      for (const [i, id] of ids.entries()) {
        ops.push(() =>
          api()
            .patch(`/api/users/${id}`)
            .set('Authorization', plain)
            .send({ groups: ['INT_USER', groups[(i + round) % 3]] }),
        );
        ops.push(() =>
          api()
            .post(`/api/users/${id}/password`)
            .set('Authorization', plain)
            .send({ new_password: `changed-password-${round}-${i}` }),
        );
        ops.push(() =>
          api()
            .post(`/api/users/${id}/api-keys`)
            .set('Authorization', plain)
            .send({ label: `by plainadmin ${round}` }),
        );
        ops.push(() =>
          api()
            .patch(`/api/users/${id}`)
            .set(sys)
            .send({ groups: ['INT_USER', groups[(i + 2 * round) % 3]] }),
        );
      }
    }
    // a fixed interleaving of many writers at once: a different order every round, the same every run
    const order = ops.map((op, i) => ({ op, key: (i * 7919) % ops.length })).sort((a, b) => a.key - b.key);
    const statuses: number[] = [];
    for (let i = 0; i < order.length; i += 12) statuses.push(...(await Promise.all(order.slice(i, i + 12).map(({ op }) => op()))).map((r) => r.status));
    expect(statuses.filter((s) => s >= 500)).to.deep.equal([]);
    expect(statuses.filter((s) => ![200, 201, 204, 403].includes(s))).to.deep.equal([]);

    // then every group reaches the host: each account is one that reaches it, by the races or by this
    for (const g of groups)
      await api()
        .patch(`/api/groups/${g}`)
        .set(sys)
        .send({ permissions: ['feature:dashboard.view', 'socket:container:spawn'] })
        .expect(200);

    const db = svc.service.db;
    await svc.service.iam.audit.flush();
    const issuedByPlain = new Set(
      (await db('audit_events').where({ action: 'key.issued', actor_username: 'plainadmin', outcome: 'success' }).select('target_id')).map((r) => r.target_id),
    );
    expect(issuedByPlain.size).to.be.above(0);
    for (const id of ids) {
      const user = (await svc.service.iam.store.userById(id))!;
      expect(await holdsHostAccess(svc.service.iam.store, user, db), user.username).to.equal(true);
      // a password the administrator set is gone, and so is every key they made
      expect(Boolean(user.hashedPassword) && !user.passwordTrusted, `${user.username}'s password`).to.equal(false);
      const live = await db('api_keys').where({ user_id: id, kind: 'key' }).whereNull('revoked_at').select('id');
      expect(
        live.map((k) => k.id).filter((k) => issuedByPlain.has(k)),
        `${user.username}'s keys`,
      ).to.deep.equal([]);
    }
  });
});
