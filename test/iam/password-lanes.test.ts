import { expect } from 'chai';
import { dummyAt, Passwords } from '../../src/iam/passwords.js';
import { DomainError } from '../../src/errors.js';

/** The password pool's two lanes: the priority lane is served first, and each lane has its own bound. */
describe('password pool lanes', function () {
  this.timeout(20_000);

  it('a prioritized check runs before the checks already waiting; a full common lane refuses only its own', async () => {
    const passwords = new Passwords({ threads: 1, maxQueue: 2, cost: 8 });
    try {
      const hash = await passwords.hash('a password');
      const order: string[] = [];
      const check = (name: string, priority = false) => {
        const run = () => passwords.verify('a password', hash);
        return (priority ? passwords.prioritized(run) : run()).then((ok) => {
          expect(ok).to.equal(true);
          order.push(name);
        });
      };
      const running = check('running');
      const waiting = [check('common 1'), check('common 2')];
      // the common lane is full: one more is refused at once (503), with Retry-After
      const refused = await passwords.verify('a password', hash).then(
        () => null,
        (err: unknown) => err,
      );
      expect(refused).to.be.instanceOf(DomainError);
      expect(refused).to.include({ code: 'unavailable', retryAfterSeconds: 1 });
      // the priority lane is not: its checks go ahead of the waiting ones
      const priority = [check('priority 1', true), check('priority 2', true)];
      const full = await passwords
        .prioritized(() => passwords.verify('a password', hash))
        .then(
          () => null,
          (err: unknown) => err,
        );
      expect(full, 'the priority lane has its bound too').to.include({ code: 'unavailable' });
      await Promise.all([running, ...waiting, ...priority]);
      expect(order).to.deep.equal(['running', 'priority 1', 'priority 2', 'common 1', 'common 2']);
    } finally {
      await passwords.close();
    }
  });
});

describe('the dummy hash an unknown user is checked against', () => {
  it('has the configured cost, so the check of an unknown user takes as long as a real one; it matches no password', async () => {
    const bcrypt = (await import('bcryptjs')).default;
    for (const cost of [4, 10, 12]) {
      const dummy = dummyAt(cost);
      expect(bcrypt.getRounds(dummy), `cost ${cost}`).to.equal(cost);
      expect(dummy).to.have.length(60);
    }
    // bcrypt runs its rounds on it: it skips them only for a hash not 60 characters long, and throws on a malformed salt
    expect(bcrypt.compareSync('', dummyAt(4))).to.equal(false);
    const passwords = new Passwords({ threads: 0, cost: 4 });
    expect(await passwords.verify('any password', null)).to.equal(false);
  });
});
