import { expect } from 'chai';
import net from 'node:net';
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../../src/log.js';
import { adBindFailure, LdapProvider, type LdapProviderOptions } from '../../../src/auth/providers/ldap.js';
import { LoginRefused } from '../../../src/auth/providers/refusal.js';
import { decodeObjectSid, encodeObjectSid, sidWithRid } from '../../../src/auth/providers/sid.js';
import { buildProviders } from '../../../src/auth/chain.js';
import type { ExternalProfile } from '../../../src/auth/providers/types.js';
import { loadConfig } from '../../../src/config.js';
import { startSambaDc, type AdUser, type SambaDc } from '../../support/samba.js';

/**
 * The LDAP provider against a real Active Directory (a Samba AD DC): nested groups and the
 * primary group, the ways people type their name, why a bind was refused, accounts checked
 * again, timeouts, and TLS with a private CA.
 */

function capturingLogger(): { log: Logger; lines: () => Array<Record<string, unknown>>; text: () => string } {
  let buffer = '';
  const sink = new Writable({
    write(chunk, _enc, done) {
      buffer += chunk.toString();
      done();
    },
  });
  return {
    log: createLogger('debug', sink),
    text: () => buffer,
    lines: () =>
      buffer
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  const outcome = await promise.then(
    () => null,
    (err: unknown) => err,
  );
  expect(outcome, 'expected the promise to reject').to.be.instanceOf(Error);
  return outcome as Error;
}

/**
 * The promise rejects with "the directory is unavailable" (what the person is told) and the log's
 * last ldap_unavailable line says precisely why: that reason.
 */
async function unavailableReason(promise: Promise<unknown>, logs: { lines: () => Array<Record<string, unknown>> }): Promise<string> {
  const err = await rejection(promise);
  expect(err).to.be.instanceOf(LoginRefused);
  expect((err as LoginRefused).reason).to.equal('directory_unavailable');
  const line = logs
    .lines()
    .filter((l) => l.event === 'ldap_unavailable')
    .pop();
  expect(line, 'an ldap_unavailable line').to.not.equal(undefined);
  return String(line!.reason);
}

/** The filter an AD administrator writes: people only, by sAMAccountName or UPN. */
const AD_FILTER = '(&(objectCategory=person)(objectClass=user)(|(sAMAccountName={username})(userPrincipalName={username})))';

describe('LdapProvider against a real Active Directory (Samba AD DC)', function () {
  this.timeout(60_000);
  let dc: SambaDc;
  const logs = capturingLogger();
  let alice: AdUser;
  let groups: { platform: string; ops: string; sre: string; domainUsers: string };

  const provider = (overrides: Partial<LdapProviderOptions> = {}) =>
    new LdapProvider(
      {
        url: dc.url,
        bindDN: dc.bindDN,
        bindPassword: dc.bindPassword,
        baseDN: dc.baseDN,
        userFilter: AD_FILTER,
        usernameAttr: 'sAMAccountName',
        groupMapping: {
          [groups.platform]: ['platform'],
          [groups.ops]: ['ops'],
          [groups.domainUsers]: ['staff'],
        },
        connectTimeoutMs: 3000,
        timeoutMs: 5000,
        ...overrides,
      },
      logs.log,
    );

  before(async function () {
    this.timeout(180_000);
    dc = await startSambaDc();
    await dc.addOu('OU=People');
    await dc.addOu('OU=Groups');
    alice = await dc.addUser('alice', 'Alice-Pass-1!', { given: 'Alice', surname: 'Liddell', mail: 'alice@corp.example', ou: 'OU=People' });
    groups = {
      platform: await dc.addGroup('Platform', 'OU=Groups'),
      ops: await dc.addGroup('Ops', 'OU=Groups'),
      sre: await dc.addGroup('SRE', 'OU=Groups'),
      domainUsers: await dc.groupDN('Domain Users'),
    };
    // Platform holds Ops, Ops holds alice: only the in-chain rule sees alice in Platform
    await dc.addMembers('Platform', ['Ops']);
    await dc.addMembers('Ops', ['alice']);
  });

  after(async () => {
    await dc?.stop();
  });

  describe('groups', () => {
    it('maps a group that holds the user through another group, and the primary group (Domain Users)', async () => {
      const profile = await provider().authenticate('alice', alice.password);
      expect(profile).to.not.equal(null);
      expect(profile!.provider_user_id).to.equal(alice.sid);
      expect(profile!.username).to.equal('alice');
      expect(profile!.display_name).to.equal('Alice Liddell');
      expect(profile!.email).to.equal('alice@corp.example');
      expect(profile!.groups).to.have.members(['platform', 'ops', 'staff']);
      expect(profile!.groups).to.have.length(3);
    });

    it('without nesting: direct memberships and the primary group only', async () => {
      const profile = await provider({ nestedGroups: false }).authenticate('alice', alice.password);
      expect(profile!.groups).to.have.members(['ops', 'staff']);
      expect(profile!.groups).to.have.length(2);
    });

    it('follows a chain three groups deep, and a group left is no longer mapped', async () => {
      const deep = await dc.addUser('deep', 'Deep-Pass-1!', { ou: 'OU=People' });
      await dc.addMembers('SRE', ['deep']);
      await dc.addMembers('Ops', ['SRE']);
      try {
        const p = provider();
        expect((await p.authenticate('deep', deep.password))!.groups).to.have.members(['platform', 'ops', 'staff']);
        await dc.removeMembers('Ops', ['SRE']);
        expect((await p.authenticate('deep', deep.password))!.groups).to.deep.equal(['staff']);
      } finally {
        await dc.removeMembers('Ops', ['SRE']).catch(() => undefined);
      }
    });

    it('sees a primary group other than Domain Users', async () => {
      const prim = await dc.addUser('prim', 'Prim-Pass-1!', { ou: 'OU=People' });
      await dc.addMembers('SRE', ['prim']);
      // primaryGroupID may only name a group the account is a member of
      const sreRid = (await dc.sidOf('SRE')).split('-').pop()!;
      await dc.modify(prim.dn, 'primaryGroupID', [sreRid]);
      const profile = await provider({ groupMapping: { [groups.sre]: ['sre'], [groups.domainUsers]: ['staff'] } }).authenticate('prim', prim.password);
      // SRE is now the primary group (not in memberOf); Domain Users became a plain membership
      expect(profile!.groups).to.have.members(['sre', 'staff']);
    });
  });

  describe('the name as people type it', () => {
    it('alice, CORP\\alice, corp\\alice and alice@corp.example are one account with one local name', async () => {
      const p = provider();
      for (const typed of ['alice', 'CORP\\alice', 'corp\\alice', 'alice@corp.example', 'ALICE@CORP.EXAMPLE']) {
        const profile = await p.authenticate(typed, alice.password);
        expect(profile, typed).to.not.equal(null);
        expect(profile!.provider_user_id, typed).to.equal(alice.sid);
        expect(profile!.username, typed).to.equal('alice');
      }
    });

    it("another domain's prefix finds nobody", async () => {
      expect(await provider().authenticate('OTHER\\alice', alice.password)).to.equal(null);
      expect(await provider().authenticate('\\alice', alice.password)).to.equal(null);
    });

    it('the local name falls back to sAMAccountName when the entry lacks the configured attribute', async () => {
      // the default attribute is uid, which AD accounts made without RFC 2307 data do not have
      const profile = await provider({ usernameAttr: undefined }).authenticate('alice@corp.example', alice.password);
      expect(profile!.username).to.equal('alice');
    });
  });

  describe('why a bind was refused', () => {
    let accounts: Record<'disabled' | 'expired' | 'mustChange' | 'aged' | 'locked', AdUser>;

    before(async function () {
      this.timeout(120_000);
      accounts = {
        disabled: await dc.addUser('dora', 'Dora-Pass-1!', { ou: 'OU=People' }),
        expired: await dc.addUser('ed', 'Ed-Pass-1!', { ou: 'OU=People' }),
        mustChange: await dc.addUser('fay', 'Fay-Pass-1!', { ou: 'OU=People', mustChange: true }),
        aged: await dc.addUser('gus', 'Gus-Pass-1!', { ou: 'OU=People' }),
        locked: await dc.addUser('hal', 'Hal-Pass-1!', { ou: 'OU=People' }),
      };
      await dc.disable('dora');
      await dc.setExpiry('ed', 0);
      await dc.agePassword('gus', 100); // past the domain's 42-day maximum age
      await dc.lockOut('hal');
    });

    const refusalOf = async (typed: string, password: string) => {
      const err = await rejection(provider().authenticate(typed, password));
      expect(err, err.message).to.be.instanceOf(LoginRefused);
      return (err as LoginRefused).reason;
    };

    it('with the right password: disabled, expired, must change, password expired', async () => {
      expect(await refusalOf('dora', accounts.disabled.password)).to.equal('account_disabled');
      expect(await refusalOf('ed', accounts.expired.password)).to.equal('account_expired');
      expect(await refusalOf('fay', accounts.mustChange.password)).to.equal('password_must_change');
      expect(await refusalOf('gus', accounts.aged.password)).to.equal('password_expired');
      const refused = logs.lines().filter((l) => l.event === 'ldap_bind_refused');
      expect(refused.map((l) => [l.username, l.reason, l.ad_code])).to.deep.include.members([
        ['dora', 'account_disabled', '533'],
        ['ed', 'account_expired', '701'],
        ['fay', 'password_must_change', '773'],
        ['gus', 'password_expired', '532'],
      ]);
    });

    it("with a wrong password: the same null as an unknown user, whatever the account's state (a locked one: a refusal that tells nothing)", async () => {
      const p = provider();
      for (const name of ['dora', 'ed', 'fay', 'gus', 'alice', 'nobody-here']) {
        expect(await p.authenticate(name, 'Not-The-Password-1!'), name).to.equal(null);
      }
      const locked = await rejection(p.authenticate('hal', 'Not-The-Password-1!'));
      expect(locked).to.be.instanceOf(LoginRefused);
      expect((locked as LoginRefused).told, 'the person is told nothing').to.equal(false);
    });

    it('a locked account is the same quiet refusal with the right password or a wrong one (AD says "locked" to any password), logged and recorded as account_locked', async () => {
      for (const password of [accounts.locked.password, 'Not-The-Password-1!']) {
        const err = await rejection(provider().authenticate('hal', password));
        expect(err).to.be.instanceOf(LoginRefused);
        expect({ reason: (err as LoginRefused).reason, told: (err as LoginRefused).told }).to.deep.equal({ reason: 'account_locked', told: false });
      }
      const line = logs.lines().find((l) => l.event === 'ldap_bind_refused' && l.username === 'hal');
      expect(line).to.include({ ad_code: '775' });
      expect(String(line!.msg)).to.match(/locked/);
    });

    it("reads the code out of AD's diagnostic message", () => {
      expect(adBindFailure('80090308: LdapErr: DSID-0C09044E, comment: AcceptSecurityContext error, data 533, v4563')).to.deep.equal({
        code: '533',
        refusal: 'account_disabled',
        meaning: 'account disabled',
      });
      expect(adBindFailure('80090308: LdapErr: DSID-0C0903A9, comment: AcceptSecurityContext error, data 52e, v1db1 Code: 0x31')!.refusal).to.equal(null);
      expect(adBindFailure('Invalid credentials')).to.equal(null);
    });
  });

  describe('accounts checked again', () => {
    it('tells active, disabled, expired and gone apart; a locked account or an expired password is still active', async () => {
      const [ivy, jon, kim, lee] = [
        await dc.addUser('ivy', 'Ivy-Pass-1!', { ou: 'OU=People' }),
        await dc.addUser('jon', 'Jon-Pass-1!', { ou: 'OU=People' }),
        await dc.addUser('kim', 'Kim-Pass-1!', { ou: 'OU=People' }),
        await dc.addUser('lee', 'Lee-Pass-1!', { ou: 'OU=People' }),
      ];
      const moe = await dc.addUser('moe', 'Moe-Pass-1!', { ou: 'OU=People' });
      const nia = await dc.addUser('nia', 'Nia-Pass-1!', { ou: 'OU=People' });
      await dc.disable('jon');
      await dc.setExpiry('kim', 0);
      await dc.deleteUser('lee');
      await dc.lockOut('moe');
      await dc.agePassword('nia', 100);
      const unknown = sidWithRid(encodeObjectSid(alice.sid), 99_999);
      const states = await provider().checkAccounts([alice.sid, ivy.sid, jon.sid, kim.sid, lee.sid, moe.sid, nia.sid, decodeObjectSid(unknown)]);
      expect(Object.fromEntries(states)).to.deep.equal({
        [alice.sid]: 'active',
        [ivy.sid]: 'active',
        [jon.sid]: 'disabled',
        [kim.sid]: 'expired',
        [lee.sid]: 'gone',
        [moe.sid]: 'active',
        [nia.sid]: 'active',
        [decodeObjectSid(unknown)]: 'gone',
      });
    });

    it('an account the user filter no longer matches is gone (a filter on a group, the user taken out of it)', async () => {
      const p = provider({ userFilter: `(&(objectClass=user)(memberOf=${groups.ops})(sAMAccountName={username}))` });
      expect(Object.fromEntries(await p.checkAccounts([alice.sid]))).to.deep.equal({ [alice.sid]: 'active' });
      const outsider = await dc.addUser('oli', 'Oli-Pass-1!', { ou: 'OU=People' });
      expect(Object.fromEntries(await p.checkAccounts([outsider.sid]))).to.deep.equal({ [outsider.sid]: 'gone' });
    });

    it('checks DN identities too (a directory without objectSid): moved out of the base DN is gone', async () => {
      const p = provider();
      expect(Object.fromEntries(await p.checkAccounts([alice.dn, `CN=Nobody,OU=People,${dc.baseDN}`, `CN=alice,DC=elsewhere,DC=test`]))).to.deep.equal({
        [alice.dn]: 'active',
        [`CN=Nobody,OU=People,${dc.baseDN}`]: 'gone',
        ['CN=alice,DC=elsewhere,DC=test']: 'gone',
      });
    });

    it('throws, concluding nothing, when the directory refuses the service account', async () => {
      await rejection(provider({ bindPassword: 'not-the-service-password' }).checkAccounts([alice.sid]));
    });

    it('reads an active account as a sign-in would (name, e-mail, display name, nested and primary groups), by objectSid or DN; an ended one without', async () => {
      const pia = await dc.addUser('pia', 'Pia-Pass-1!', { ou: 'OU=People', given: 'Pia', surname: 'Read', mail: 'pia@corp.example' });
      const rex = await dc.addUser('rex', 'Rex-Pass-1!', { ou: 'OU=People' });
      await dc.addMembers('Ops', ['pia']);
      await dc.disable('rex');
      const sorted = (p: ExternalProfile | null | undefined) => p && { ...p, groups: [...(p.groups ?? [])].sort() };
      const signIn = await provider().authenticate('pia', pia.password);
      const accounts = await provider().readAccounts([pia.sid, pia.dn, rex.sid]);
      expect(accounts.get(pia.sid)!.state).to.equal('active');
      expect(sorted(accounts.get(pia.sid)!.profile)).to.deep.equal(sorted(signIn));
      expect(sorted(accounts.get(pia.dn)!.profile)).to.deep.equal({ ...sorted(signIn), provider_user_id: pia.dn });
      expect(signIn!.groups).to.have.members(['platform', 'ops', 'staff']);
      expect(accounts.get(rex.sid)).to.deep.equal({ state: 'disabled', profile: null });

      // renamed and taken out of Ops: read as it is now
      await dc.removeMembers('Ops', ['pia']);
      await dc.modify(pia.dn, 'sAMAccountName', ['pia.read']);
      await dc.modify(pia.dn, 'mail', ['pia.read@corp.example']);
      const now = (await provider().readAccounts([pia.sid])).get(pia.sid)!;
      expect(now.profile).to.include({ username: 'pia.read', email: 'pia.read@corp.example', display_name: 'Pia Read' });
      expect(now.profile!.groups).to.have.members(['staff']);
    });
  });

  describe('TLS with a private CA', () => {
    it("LDAPS and StartTLS work with the CA that signed the DC's certificate, the host name checked", async () => {
      for (const opts of [{ url: dc.ldapsUrl }, { url: dc.url, startTls: true }]) {
        const profile = await provider({ ...opts, caCert: dc.caPem }).authenticate('alice', alice.password);
        expect(profile?.provider_user_id, JSON.stringify(opts)).to.equal(alice.sid);
      }
    });

    it('refuses another CA, the system CAs alone, and a host name the certificate does not name: "unavailable" to the person, the precise reason in the log', async () => {
      const untrusted = /TLS failed: the certificate is signed by a CA that is not trusted \(set SERVICE_LDAP_CA_CERT\) \[UNABLE_TO_VERIFY_LEAF_SIGNATURE\]/;
      const misnamed = /TLS failed: the certificate does not name this host .*\[ERR_TLS_CERT_ALTNAME_INVALID\]/;
      const cases: Array<[Partial<LdapProviderOptions>, RegExp]> = [
        [{ url: dc.ldapsUrl, caCert: dc.otherCaPem }, untrusted],
        [{ url: dc.ldapsUrl }, untrusted],
        [{ url: `ldaps://${dc.otherAddress}`, caCert: dc.caPem }, misnamed],
        [{ url: dc.url, startTls: true, caCert: dc.otherCaPem }, untrusted],
        [{ url: dc.url, startTls: true }, untrusted],
        [{ url: `ldap://${dc.otherAddress}`, startTls: true, caCert: dc.caPem }, misnamed],
      ];
      for (const [opts, reason] of cases) {
        expect(await unavailableReason(provider(opts).authenticate('alice', alice.password), logs), JSON.stringify(opts)).to.match(reason);
      }
    });

    it('with verification off, any certificate is taken (and the setting says so)', async () => {
      const profile = await provider({ url: dc.ldapsUrl, caCert: dc.otherCaPem, tlsVerify: false }).authenticate('alice', alice.password);
      expect(profile?.provider_user_id).to.equal(alice.sid);
    });
  });

  it('names itself once in each log line (the provider key is not repeated)', async () => {
    // built the way the chain builds it, from the settings
    const sink = capturingLogger();
    const config = loadConfig(
      {
        SERVICE_DATA_DIR: '/tmp/unused',
        SERVICE_SECRET_KEY: 'x'.repeat(40),
        SERVICE_AUTH_PROVIDERS: 'ldap',
        SERVICE_LDAP_URL: dc.url,
        SERVICE_LDAP_BASE_DN: dc.baseDN,
        SERVICE_LDAP_BIND_DN: dc.bindDN,
        SERVICE_LDAP_BIND_PASSWORD: dc.bindPassword,
        SERVICE_LDAP_USER_FILTER: AD_FILTER,
      },
      { writeFiles: false },
    );
    const { providers, errors } = buildProviders(config, undefined as never, sink.log);
    expect(errors).to.deep.equal([]);
    const ldap = providers[0] as LdapProvider;
    expect(await ldap.authenticate('alice', 'Not-The-Password-1!')).to.equal(null);
    expect(await ldap.authenticate('nobody-at-all', 'Not-The-Password-1!')).to.equal(null);
    const raw = sink
      .text()
      .split('\n')
      .filter((l) => l.includes('"ldap'));
    expect(raw.length).to.be.greaterThan(1);
    for (const line of raw) expect(line.match(/"provider":/g), line).to.have.length(1);
  });
});

describe('LdapProvider timeouts and backoff', function () {
  const logs = capturingLogger();
  const { log } = logs;
  let silent: net.Server;
  const sockets = new Set<net.Socket>();
  let url: string;

  before(async () => {
    // accepts and never answers
    silent = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    url = `ldap://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  });

  it('times out, then refuses at once for the backoff, then tries the directory again', async () => {
    const p = new LdapProvider(
      { url, baseDN: 'DC=corp,DC=example', bindDN: 'CN=svc', bindPassword: 'x', connectTimeoutMs: 300, timeoutMs: 300, backoffMs: 1000 },
      log,
    );
    let started = Date.now();
    expect(await unavailableReason(p.authenticate('alice', 'pw'), logs)).to.match(/no answer in time/i);
    expect(Date.now() - started).to.be.within(250, 1500);
    const accepted = sockets.size;

    started = Date.now();
    const skipped = await rejection(p.authenticate('alice', 'pw'));
    expect((skipped as LoginRefused).reason).to.equal('directory_unavailable');
    expect((await rejection(p.checkAccounts(['S-1-5-21-1-2-3-1001']))).message).to.match(/skipped/);
    expect(Date.now() - started).to.be.below(50);
    expect(sockets.size, 'no connection while backing off').to.equal(accepted);
    await rejection(p.checkAccounts(['S-1-5-21-1-2-3-1001']));
    expect(sockets.size).to.equal(accepted);

    await new Promise((r) => setTimeout(r, 1100));
    started = Date.now();
    expect(await unavailableReason(p.authenticate('alice', 'pw'), logs)).to.match(/no answer in time/i);
    expect(Date.now() - started).to.be.at.least(250);
    expect(sockets.size).to.be.greaterThan(accepted);
  });

  it('a StartTLS that is never answered times out too', async () => {
    const p = new LdapProvider({ url, baseDN: 'DC=corp,DC=example', startTls: true, connectTimeoutMs: 300, timeoutMs: 300, backoffMs: 0 }, log);
    const started = Date.now();
    expect(await unavailableReason(p.authenticate('alice', 'pw'), logs)).to.match(/no answer in time .*timed out/i);
    expect(Date.now() - started).to.be.below(1500);
  });
});
