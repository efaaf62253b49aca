import { expect } from 'chai';
import { startService, type TestService } from '../support/service.js';
import { sweepExpired } from '../../src/auth/housekeeping.js';

describe('housekeeping', () => {
  let svc: TestService;
  before(async () => {
    svc = await startService();
  });
  after(async () => svc.destroy());

  it('removes expired sessions, one-time values, old failures and old session tokens, and nothing live', async () => {
    const db = svc.service.db;
    const now = Date.now();
    const admin = await svc.service.iam.store.userByUsername('admin');
    await db('web_sessions').insert([
      { id: 'expired', data: '{}', expires_at: now - 1 },
      { id: 'live', data: '{}', expires_at: now + 60_000 },
    ]);
    await db('one_time_values').insert([
      { hash: 'a'.repeat(64), purpose: 'ws_ticket', data: '{}', expires_at: now - 1 },
      { hash: 'b'.repeat(64), purpose: 'ws_ticket', data: '{}', expires_at: now + 30_000 },
    ]);
    await db('login_failures').insert([
      { username: 'x', ip: '127.0.0.1', at: now - 2 * 86_400_000 },
      { username: 'x', ip: '127.0.0.1', at: now - 1000 },
    ]);
    const keys = svc.service.auth.apiKeys;
    const old = await keys.create(admin!.id, 'session', { expiresAt: now - 8 * 86_400_000 });
    const recent = await keys.create(admin!.id, 'session', { expiresAt: now - 1000 });
    const apiKey = await keys.create(admin!.id, 'key', { expiresAt: now - 8 * 86_400_000 });
    await sweepExpired(db, now);
    expect((await db('web_sessions').select('id')).map((r) => r.id)).to.deep.equal(['live']);
    expect((await db('one_time_values').select('hash')).map((r) => r.hash)).to.deep.equal(['b'.repeat(64)]);
    expect(await db('login_failures').where({ username: 'x' }).count({ n: '*' }).first()).to.satisfy((r: any) => Number(r.n) === 1);
    const ids = (await db('api_keys').select('id')).map((r) => r.id);
    expect(ids).not.to.include(old.key.id);
    expect(ids).to.include(recent.key.id);
    // API keys stay listed for their owner's audit, expired or not
    expect(ids).to.include(apiKey.key.id);
  });
});
