import { expect } from 'chai';
import { startService, type TestService } from '../support/service.js';
import type { OneTimeStore } from '../../src/auth/one-time.js';

describe('one-time values (database, hashed, sealed, single use)', function () {
  let svc: TestService;
  let store: OneTimeStore;

  before(async function () {
    svc = await startService();
    store = svc.service.auth.oneTime;
  });

  after(async function () {
    await svc?.destroy();
  });

  it('redeems a value once, and only for its purpose', async function () {
    const value = await store.put('exchange_code', { user_id: 'u1', token: 'svs_secret-token-value' }, 60_000);
    expect(value).to.match(/^svc_[A-Za-z0-9_-]{43}$/);
    expect(await store.take('ws_ticket', value)).to.equal(null);
    expect(await store.take('exchange_code', value)).to.deep.equal({ user_id: 'u1', token: 'svs_secret-token-value' });
    expect(await store.take('exchange_code', value)).to.equal(null);
  });

  it('keeps neither the value nor its data readable in the table', async function () {
    const value = await store.put('exchange_code', { token: 'svs_do-not-store-me-in-clear' }, 60_000);
    const rows = await svc.service.db('one_time_values').select();
    const text = JSON.stringify(rows);
    expect(text).not.to.include(value);
    expect(text).not.to.include('svs_do-not-store-me-in-clear');
    await store.take('exchange_code', value);
  });

  it('refuses an expired value and a malformed one', async function () {
    const value = await store.put('ws_ticket', { n: 1 }, 1);
    await new Promise((r) => setTimeout(r, 5));
    expect(await store.take('ws_ticket', value)).to.equal(null);
    expect(await store.take('ws_ticket', 'short')).to.equal(null);
    expect(await store.take('ws_ticket', undefined)).to.equal(null);
    expect(await store.sweep()).to.be.a('number');
  });

  it('lets exactly one of many concurrent redeemers win', async function () {
    const value = await store.put('ws_ticket', { n: 2 }, 60_000);
    const results = await Promise.all(Array.from({ length: 8 }, () => store.take('ws_ticket', value)));
    expect(results.filter((r) => r !== null)).to.have.length(1);
  });
});
