import { expect } from 'chai';
import { createLogger } from '../../../src/log.js';
import { LdapProvider } from '../../../src/auth/providers/ldap.js';
import { LoginRefused } from '../../../src/auth/providers/refusal.js';
import { LDAP_PEOPLE, startSlapd, type Slapd } from '../../support/slapd.js';
import { relayTo, type Relay } from '../../support/tcp-relay.js';

/**
 * The pause after the directory failed, and the single probe after it: a TCP relay in front of a
 * real slapd either passes connections on or holds them without a word (a hung directory).
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('LdapProvider: the pause after the directory failed, then one probe (real slapd behind a relay)', function () {
  this.timeout(30_000);
  let slapd: Slapd;
  let relay: Relay;
  const log = createLogger('silent');

  before(async () => {
    slapd = await startSlapd();
    relay = await relayTo(slapd.port);
  });
  after(async () => {
    await relay?.close();
    await slapd?.stop();
  });

  const provider = () =>
    new LdapProvider(
      { url: relay.url, bindDN: slapd.bindDN, bindPassword: slapd.bindPassword, baseDN: slapd.baseDN, connectTimeoutMs: 400, timeoutMs: 400, backoffMs: 800 },
      log,
    );
  const attempt = (p: LdapProvider) =>
    p.authenticate('alice', LDAP_PEOPLE.alice.password).then(
      (profile) => ({ profile, refused: null as string | null }),
      (err: unknown) => ({ profile: null, refused: err instanceof LoginRefused ? err.reason : String(err) }),
    );

  it('after the pause one login probes a directory still hung; the others in flight get its answer at once, not a timeout each', async () => {
    const p = provider();
    relay.mode = 'silent';
    expect((await attempt(p)).refused).to.equal('directory_unavailable');
    // pausing: refused at once, nothing asked
    let accepted = relay.accepted;
    let started = Date.now();
    expect((await attempt(p)).refused).to.equal('directory_unavailable');
    expect(Date.now() - started).to.be.below(100);
    expect(relay.accepted).to.equal(accepted);

    await sleep(900);
    accepted = relay.accepted;
    started = Date.now();
    const first = attempt(p);
    await sleep(20);
    const others = await Promise.all([attempt(p), attempt(p), attempt(p), attempt(p)]);
    const othersDone = Date.now() - started;
    expect((await first).refused).to.equal('directory_unavailable');
    expect(others.map((o) => o.refused)).to.deep.equal(Array(4).fill('directory_unavailable'));
    expect(relay.accepted - accepted, 'one connection: the probe').to.equal(1);
    // the others waited for the probe's timeout (about 400 ms), then were refused together
    expect(othersDone).to.be.within(300, 1500);
    // and the pause started again
    started = Date.now();
    expect((await attempt(p)).refused).to.equal('directory_unavailable');
    expect(Date.now() - started).to.be.below(100);
  });

  it('after the pause one login probes a directory back again; the others in flight go on once it answered', async () => {
    const p = provider();
    relay.mode = 'silent';
    expect((await attempt(p)).refused).to.equal('directory_unavailable');
    await sleep(900);
    relay.mode = 'forward';
    const accepted = relay.accepted;
    const first = attempt(p);
    await sleep(5);
    const all = await Promise.all([first, attempt(p), attempt(p), attempt(p)]);
    expect(all.map((a) => a.profile?.username)).to.deep.equal(['alice', 'alice', 'alice', 'alice']);
    // each login's own connections (service and user bind): nobody was turned away
    expect(relay.accepted - accepted).to.equal(8);
  });

  it('SERVICE_LDAP_RETRY_AFTER 0: no pause, every login asks the directory', async () => {
    const p = new LdapProvider(
      { url: relay.url, bindDN: slapd.bindDN, bindPassword: slapd.bindPassword, baseDN: slapd.baseDN, connectTimeoutMs: 300, timeoutMs: 300, backoffMs: 0 },
      log,
    );
    relay.mode = 'silent';
    const accepted = relay.accepted;
    await attempt(p);
    await attempt(p);
    expect(relay.accepted - accepted).to.equal(2);
    relay.mode = 'forward';
    expect((await attempt(p)).profile?.username).to.equal('alice');
  });
});
