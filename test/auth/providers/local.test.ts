import { expect } from 'chai';
import type { Knex } from 'knex';
import { migratedSqlite } from '../../support/service.js';
import { IamStore } from '../../../src/iam/store.js';
import { Passwords } from '../../../src/iam/passwords.js';
import { LocalProvider } from '../../../src/auth/providers/local.js';

/** The local provider's password check against a real database, and what may change while the hash runs. */
describe('LocalProvider', () => {
  let db: Knex;
  let drop: () => Promise<void>;
  let store: IamStore;
  const passwords = new Passwords({ threads: 0, cost: 4 });

  before(async () => {
    ({ db, drop } = await migratedSqlite());
    store = new IamStore(db);
    await store.createUser({ username: 'carol', hashedPassword: await passwords.hash('carol-password-1') });
  });
  after(async () => {
    await drop?.();
  });

  it('signs in with the right password, not with a wrong one', async () => {
    const local = new LocalProvider(store, passwords);
    expect((await local.verifyUser('carol', 'carol-password-1'))?.username).to.equal('carol');
    expect(await local.verifyUser('carol', 'carol-password-2')).to.equal(null);
  });

  it('a password cleared while its hash was checked proves nothing (an account starting afresh meanwhile)', async () => {
    // the hash is slow: a grant that clears the password lands while it runs
    const racing = Object.create(passwords) as Passwords;
    racing.verify = async (password: string, hash: string | null) => {
      const ok = await passwords.verify(password, hash);
      await store.updateUser((await store.userByUsername('carol'))!.id, { hashedPassword: null });
      return ok;
    };
    expect(await new LocalProvider(store, racing).verifyUser('carol', 'carol-password-1')).to.equal(null);
  });
});
