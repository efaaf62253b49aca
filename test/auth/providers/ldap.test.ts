import { expect } from 'chai';
import net from 'node:net';
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../../src/log.js';
import { LdapProvider, escapeFilterValue, normalizeDN, type LdapProviderOptions } from '../../../src/auth/providers/ldap.js';
import { Attribute, Change, Client } from 'ldapts';
import { LoginRefused } from '../../../src/auth/providers/refusal.js';
import { LDAP_GROUPS, LDAP_PEOPLE, startSlapd, type Slapd } from '../../support/slapd.js';
import { unusedPort } from '../helpers.js';

/** A real pino logger whose JSON lines are kept for assertions. */
function capturingLogger(): { log: Logger; lines: () => Array<Record<string, unknown>>; text: () => string } {
  let buffer = '';
  const sink = new Writable({
    write(chunk, _enc, done) {
      buffer += chunk.toString();
      done();
    },
  });
  const log = createLogger('debug', sink);
  return {
    log,
    text: () => buffer,
    lines: () =>
      buffer
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

async function expectRejection(promise: Promise<unknown>): Promise<Error> {
  const outcome = await promise.then(
    () => null,
    (err: unknown) => err,
  );
  expect(outcome, 'expected the promise to reject').to.be.instanceOf(Error);
  return outcome as Error;
}

const GROUP_MAPPING = {
  [LDAP_GROUPS.admins]: ['INT_ADMIN'],
  [LDAP_GROUPS.developers]: ['INT_USER', 'developers'],
};

describe('LdapProvider against a real OpenLDAP slapd', function () {
  let slapd: Slapd;
  const logs = capturingLogger();

  const provider = (overrides: Partial<LdapProviderOptions> = {}) =>
    new LdapProvider(
      {
        url: slapd.url,
        bindDN: slapd.bindDN,
        bindPassword: slapd.bindPassword,
        baseDN: slapd.baseDN,
        groupMapping: GROUP_MAPPING,
        connectTimeoutMs: 1000,
        timeoutMs: 2000,
        ...overrides,
      },
      logs.log,
    );

  const lastUnavailable = () =>
    logs
      .lines()
      .filter((l) => l.event === 'ldap_unavailable')
      .pop() as { kind: string; reason: string };

  before(async () => {
    slapd = await startSlapd();
  });

  after(async () => {
    await slapd?.stop();
  });

  it('describes itself as the ldap credentials provider', () => {
    const p = provider({ label: 'Corporate directory' });
    expect(p.id).to.equal('ldap');
    expect(p.kind).to.equal('credentials');
    expect(p.label).to.equal('Corporate directory');
    expect(provider().label).to.equal('LDAP');
  });

  it('logs in a directory user: DN as id, mail vouched for, groups from groupOfNames mapped', async () => {
    const { alice } = LDAP_PEOPLE;
    const profile = await provider().authenticate('alice', alice.password);
    expect(profile).to.not.equal(null);
    expect(profile!.provider).to.equal('ldap');
    expect(profile!.provider_user_id).to.equal(alice.dn);
    expect(profile!.username).to.equal('alice');
    expect(profile!.email).to.equal('alice@example.org');
    expect(profile!.email_verified).to.equal(true);
    expect(profile!.display_name).to.equal('Alice L.');
    expect(profile!.groups).to.have.members(['INT_ADMIN', 'INT_USER', 'developers']);
    expect(profile!.groups).to.have.length(3);
  });

  it('falls back to cn for the display name and ignores unmapped groups', async () => {
    const profile = await provider().authenticate('bob', LDAP_PEOPLE.bob.password);
    expect(profile!.display_name).to.equal('Bob Builder');
    // bob is in developers (mapped) and staff (not mapped)
    expect(profile!.groups).to.have.members(['INT_USER', 'developers']);
    expect(profile!.groups).to.have.length(2);
  });

  it('returns an empty group list for a user whose groups are all unmapped', async () => {
    const profile = await provider().authenticate('carol', LDAP_PEOPLE.carol.password);
    expect(profile!.email).to.equal(LDAP_PEOPLE.carol.mail);
    expect(profile!.groups).to.deep.equal([]);
  });

  it('leaves groups undefined when no mapping is configured (provider does not manage groups)', async () => {
    const profile = await provider({ groupMapping: {} }).authenticate('alice', LDAP_PEOPLE.alice.password);
    expect(profile).to.not.equal(null);
    expect(profile!.groups).to.equal(undefined);
  });

  it('matches mapping DNs case-insensitively and ignoring whitespace', async () => {
    const profile = await provider({
      groupMapping: { ' CN=Developers , OU=Groups,DC=EXAMPLE, dc=org ': ['devs'] },
    }).authenticate('bob', LDAP_PEOPLE.bob.password);
    expect(profile!.groups).to.deep.equal(['devs']);
  });

  it('uses the binary objectSid as id and memberOf for groups when the entry has them (AD style)', async () => {
    const { dave } = LDAP_PEOPLE;
    const profile = await provider().authenticate('dave', dave.password);
    expect(profile).to.not.equal(null);
    expect(profile!.provider_user_id).to.equal(dave.objectSid);
    expect(profile!.provider_user_id).to.equal('S-1-5-21-1004336348-1177238915-682003330-1104');
    expect(profile!.username).to.equal('dave');
    // memberOf holds "CN=Admins, OU=Groups, DC=Example, DC=Org" and an unmapped Domain Users group
    expect(profile!.groups).to.deep.equal(['INT_ADMIN']);
    // no mail attribute: nothing to vouch for
    expect(profile!.email).to.equal(null);
    expect(profile!.email_verified).to.equal(false);
    expect(profile!.display_name).to.equal('Dave Domain');
  });

  it('reads accounts again as a sign-in would (DN and objectSid identities, groupOfNames and memberOf); a group left is no longer mapped, an entry not found is gone', async () => {
    const { alice, bob, dave } = LDAP_PEOPLE;
    const signIn = await provider().authenticate('alice', alice.password);
    const nobody = `uid=nobody,ou=people,${slapd.baseDN}`;
    const first = await provider().readAccounts([alice.dn, dave.objectSid!, nobody, 'uid=alice,dc=elsewhere,dc=test']);
    expect(first.get(alice.dn)!.state).to.equal('active');
    expect({ ...first.get(alice.dn)!.profile, groups: [...first.get(alice.dn)!.profile!.groups!].sort() }).to.deep.equal({
      ...signIn,
      groups: [...signIn!.groups!].sort(),
    });
    expect(first.get(dave.objectSid!)!.profile).to.include({ provider_user_id: dave.objectSid, username: 'dave', email: null, display_name: 'Dave Domain' });
    expect(first.get(dave.objectSid!)!.profile!.groups).to.deep.equal(['INT_ADMIN']);
    expect(first.get(nobody)).to.deep.equal({ state: 'gone', profile: null });
    expect(first.get('uid=alice,dc=elsewhere,dc=test')).to.deep.equal({ state: 'gone', profile: null });
    // without profiles (checkAccounts): states only
    expect(Object.fromEntries(await provider().checkAccounts([alice.dn, nobody]))).to.deep.equal({ [alice.dn]: 'active', [nobody]: 'gone' });

    const admin = new Client({ url: slapd.url });
    await admin.bind(slapd.rootDN, slapd.rootPassword);
    const developers = (op: 'add' | 'delete') =>
      admin.modify(LDAP_GROUPS.developers, new Change({ operation: op, modification: new Attribute({ type: 'member', values: [bob.dn] }) }));
    try {
      await developers('delete');
      const after = (await provider().readAccounts([bob.dn])).get(bob.dn)!;
      expect(after.profile!.groups).to.deep.equal([]);
    } finally {
      await developers('add');
      await admin.unbind();
    }
  });

  it('honours a custom group attribute (here one the entries lack, so groupOfNames is used)', async () => {
    const profile = await provider({ groupAttr: 'isMemberOf' }).authenticate('alice', LDAP_PEOPLE.alice.password);
    expect(profile!.groups).to.have.members(['INT_ADMIN', 'INT_USER', 'developers']);
  });

  it('returns null for a wrong password', async () => {
    expect(await provider().authenticate('alice', 'not-her-password')).to.equal(null);
    expect(await provider().authenticate('alice', LDAP_PEOPLE.bob.password)).to.equal(null);
  });

  it('returns null for an unknown user', async () => {
    expect(await provider().authenticate('mallory', 'whatever-1')).to.equal(null);
  });

  it('returns null for an empty password without contacting the server', async () => {
    expect(await provider().authenticate('alice', '')).to.equal(null);
    // Pointed at a closed port: any bind attempt would throw, so null proves none was made.
    const offline = provider({ url: `ldap://127.0.0.1:${await unusedPort()}` });
    expect(await offline.authenticate('alice', '')).to.equal(null);
    expect(await offline.authenticate('', 'x')).to.equal(null);
  });

  it('escapes filter metacharacters: injection attempts find nobody, a literal * still works', async () => {
    const p = provider();
    const { alice, qbert } = LDAP_PEOPLE;
    for (const attempt of ['*', '*)(uid=*', 'alice)(uid=*', 'alice)(|(uid=*', '*)(|(objectClass=*', 'al*', '\\2a', 'alice\0']) {
      expect(await p.authenticate(attempt, alice.password), attempt).to.equal(null);
    }
    // uid "q*bert" exists: the escaped value matches it literally, and "q*" is no wildcard
    const profile = await p.authenticate('q*bert', qbert.password);
    expect(profile!.username).to.equal('q*bert');
    expect(profile!.provider_user_id).to.equal(qbert.dn);
    expect(await p.authenticate('q*', qbert.password)).to.equal(null);
  });

  it('supports a custom user filter and refuses a login the filter matches more than once', async () => {
    const p = provider({ userFilter: '(&(objectClass=inetOrgPerson)(mail={username}))' });
    const profile = await p.authenticate('alice@example.org', LDAP_PEOPLE.alice.password);
    expect(profile!.username).to.equal('alice'); // uid, not the input
    expect(profile!.provider_user_id).to.equal(LDAP_PEOPLE.alice.dn);

    expect(await p.authenticate('twins@example.org', LDAP_PEOPLE.twin1.password)).to.equal(null);
    const warning = logs.lines().find((l) => l.level === 'warn' && String(l.msg).includes('more than one'));
    expect(warning, 'a warning about the ambiguous filter').to.not.equal(undefined);
    expect(warning!.username).to.equal('twins@example.org');
  });

  it('a rejected service bind is "the directory is unavailable" to the person, the precise reason in the log, without the bind password', async () => {
    const wrongSecret = 'definitely-wrong-bind-secret';
    const err = await expectRejection(provider({ bindPassword: wrongSecret }).authenticate('alice', LDAP_PEOPLE.alice.password));
    expect(err).to.be.instanceOf(LoginRefused);
    expect((err as LoginRefused).reason).to.equal('directory_unavailable');
    const line = lastUnavailable();
    expect(line.kind).to.equal('service_bind');
    expect(line.reason).to.match(/service bind as .* was refused: wrong bind DN or password/i);
    expect(logs.text()).to.not.include(wrongSecret);
  });

  it('throws when anonymous search is not allowed and no service account is configured', async () => {
    await expectRejection(provider({ bindDN: null, bindPassword: null }).authenticate('alice', LDAP_PEOPLE.alice.password));
  });

  it('throws on a base DN the server does not hold', async () => {
    await expectRejection(provider({ baseDN: 'dc=nowhere,dc=test' }).authenticate('alice', LDAP_PEOPLE.alice.password));
  });

  it('throws quickly when nothing listens on the port', async () => {
    const p = provider({ url: `ldap://127.0.0.1:${await unusedPort()}`, connectTimeoutMs: 500, timeoutMs: 500 });
    const started = Date.now();
    await expectRejection(p.authenticate('alice', LDAP_PEOPLE.alice.password));
    expect(Date.now() - started).to.be.below(2000);
  });

  it('throws within the operation timeout when the server accepts but never answers', async () => {
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = silent.address() as net.AddressInfo;
      const p = provider({ url: `ldap://127.0.0.1:${port}`, connectTimeoutMs: 500, timeoutMs: 500 });
      const started = Date.now();
      const err = await expectRejection(p.authenticate('alice', LDAP_PEOPLE.alice.password));
      expect((err as LoginRefused).reason).to.equal('directory_unavailable');
      expect(lastUnavailable()).to.include({ kind: 'timeout' });
      expect(lastUnavailable().reason).to.match(/no answer in time/i);
      expect(Date.now() - started).to.be.below(2000);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('a server that refuses StartTLS is a TLS failure: the next server of the list is tried', async () => {
    const refusing = await expectRejection(provider({ startTls: true }).authenticate('alice', LDAP_PEOPLE.alice.password));
    expect((refusing as LoginRefused).reason).to.equal('directory_unavailable');
    expect(lastUnavailable().kind).to.equal('tls');
    expect(lastUnavailable().reason).to.match(/StartTLS failed: the server refused StartTLS/);
  });

  it('a list of servers: one that refuses connections is skipped for the next, which is then tried first', async () => {
    const dead = `ldap://127.0.0.1:${await unusedPort()}`;
    const p = provider({ url: `${dead} ${slapd.url}` });
    expect(p.connector.order()).to.deep.equal([dead, slapd.url]);
    expect((await p.authenticate('alice', LDAP_PEOPLE.alice.password))?.username).to.equal('alice');
    expect(p.connector.lastFailures).to.deep.equal([{ url: dead, kind: 'refused', reason: 'connection refused (nothing listens on that port)' }]);
    expect(p.connector.order()).to.deep.equal([slapd.url, dead]);
    expect(await p.authenticate('alice', 'wrong-password')).to.equal(null);
    expect(p.connector.lastFailures).to.deep.equal([]);
    // remembered for rememberMs only
    const brief = provider({ url: `${dead} ${slapd.url}`, rememberMs: 0 });
    await brief.authenticate('alice', LDAP_PEOPLE.alice.password);
    expect(brief.connector.order()).to.deep.equal([dead, slapd.url]);
  });

  it('a server that accepts and hangs up without answering is skipped for the next, as one that is away', async () => {
    const hangUp = net.createServer((s) => {
      s.on('error', () => {});
      s.once('data', () => s.end());
    });
    await new Promise<void>((resolve) => hangUp.listen(0, '127.0.0.1', resolve));
    try {
      const closing = `ldap://127.0.0.1:${(hangUp.address() as net.AddressInfo).port}`;
      const p = provider({ url: `${closing} ${slapd.url}` });
      expect((await p.authenticate('alice', LDAP_PEOPLE.alice.password))?.username).to.equal('alice');
      expect(p.connector.lastFailures).to.have.length(1);
      expect(p.connector.lastFailures[0]).to.include({ url: closing, kind: 'unreachable' });
      expect(p.connector.lastFailures[0].reason).to.match(/^the server closed the connection without answering/);
    } finally {
      await new Promise<void>((resolve) => hangUp.close(() => resolve()));
    }
  });

  it('a list with a bad entry is refused naming each one', () => {
    expect(() => provider({ url: `${slapd.url} http://x ldap:// ${slapd.url}` })).to.throw(
      /"url" must be ldap:\/\/ or ldaps:\/\/ URLs separated by spaces, not "http:\/\/x", "ldap:\/\/"/,
    );
    expect(() => provider({ url: `${slapd.url} ${slapd.url}` })).to.throw(/names a URL twice/);
  });

  it('never writes a password or the bind password to the log', () => {
    const text = logs.text();
    expect(text.length).to.be.greaterThan(0);
    for (const person of Object.values(LDAP_PEOPLE)) expect(text).to.not.include(person.password);
    expect(text).to.not.include(slapd.bindPassword);
  });
});

describe('LdapProvider with an anonymously readable directory', function () {
  let slapd: Slapd;
  const { log } = capturingLogger();

  before(async () => {
    slapd = await startSlapd({ anonymousRead: true });
  });

  after(async () => {
    await slapd?.stop();
  });

  it('searches anonymously when no bind DN is configured, then throws once the server is gone', async () => {
    const p = new LdapProvider({ url: slapd.url, baseDN: slapd.baseDN, groupMapping: GROUP_MAPPING, connectTimeoutMs: 1000, timeoutMs: 1000 }, log);
    const profile = await p.authenticate('bob', LDAP_PEOPLE.bob.password);
    expect(profile!.provider_user_id).to.equal(LDAP_PEOPLE.bob.dn);
    expect(profile!.groups).to.have.members(['INT_USER', 'developers']);
    expect(await p.authenticate('bob', 'wrong')).to.equal(null);

    await slapd.stop();
    const started = Date.now();
    await expectRejection(p.authenticate('bob', LDAP_PEOPLE.bob.password));
    expect(Date.now() - started).to.be.below(2000);
  });
});

describe('LdapProvider settings', () => {
  const { log } = capturingLogger();
  const base = { url: 'ldap://127.0.0.1:389', baseDN: 'dc=example,dc=org' };

  it('rejects a bind DN without a bind password (it would be an unauthenticated bind)', () => {
    expect(() => new LdapProvider({ ...base, bindDN: 'cn=reader,dc=example,dc=org' }, log)).to.throw(/bindPassword/);
    expect(() => new LdapProvider({ ...base, bindDN: 'cn=reader,dc=example,dc=org', bindPassword: '' }, log)).to.throw(/bindPassword/);
  });

  it('rejects a non-LDAP URL, a missing base DN and a filter without {username}', () => {
    expect(() => new LdapProvider({ ...base, url: 'http://example.org' }, log)).to.throw(/url/);
    expect(() => new LdapProvider({ url: base.url } as LdapProviderOptions, log)).to.throw(/baseDN/);
    expect(() => new LdapProvider({ ...base, userFilter: '(uid=alice)' }, log)).to.throw(/userFilter/);
  });

  it('accepts ldaps:// and applies the defaults', () => {
    const p = new LdapProvider({ ...base, url: 'ldaps://ldap.example.org:636' }, log);
    expect(p.label).to.equal('LDAP');
  });
});

describe('LDAP filter escaping and DN normalisation', () => {
  it('escapes \\ * ( ) and NUL as RFC 4515 hex pairs', () => {
    expect(escapeFilterValue('a\\b*c(d)e\0f')).to.equal('a\\5cb\\2ac\\28d\\29e\\00f');
    expect(escapeFilterValue('*)(uid=*')).to.equal('\\2a\\29\\28uid=\\2a');
    expect(escapeFilterValue('jörg.müller@example.org')).to.equal('jörg.müller@example.org');
  });

  it('normalises case and whitespace around separators, keeping escaped commas', () => {
    expect(normalizeDN('CN=Admins, OU=Groups, DC=Example, DC=Org')).to.equal('cn=admins,ou=groups,dc=example,dc=org');
    expect(normalizeDN(' cn = Domain  Users ,dc=x ')).to.equal('cn=domain users,dc=x');
    expect(normalizeDN('cn=Smith\\, John,dc=x')).to.equal('cn=smith\\, john,dc=x');
    expect(normalizeDN('cn=a+uid=b , dc=x')).to.equal('cn=a+uid=b,dc=x');
  });
});
