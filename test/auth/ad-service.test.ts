import { expect } from 'chai';
import net from 'node:net';
import request from 'supertest';
import { adminAuth, ADMIN, basic, startPeer, startService, type TestService } from '../support/service.js';
import { startSambaDc, type AdUser, type SambaDc } from '../support/samba.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { capturingLogger } from '../sockets/helpers.js';
import { WsClient } from '../gateway/helpers.js';
import { REFUSAL_TEXT } from '../../src/auth/providers/refusal.js';
import { createUser, getUser, patchAuthSettings } from './helpers.js';
import { eventually } from '../plugins/helpers.js';

/** How long past the 2 s recheck interval a round may take to end a connection: a round searches the Samba DC, slow while the suite's two runs load the machine. */
const RECHECK_SLACK_MS = 8000;

/**
 * The service with an Active Directory as companies run it (a real Samba AD DC): the names
 * people type, why a login was refused, e-mail linking, TLS with a private CA changed at run
 * time, and directory accounts checked again between sign-ins (their end, their groups, their
 * names).
 */

const AD_FILTER = '(&(objectCategory=person)(objectClass=user)(|(sAMAccountName={username})(userPrincipalName={username})))';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A listener that accepts connections and never answers (a hung directory). */
async function silentServer(): Promise<{ url: string; accepted: () => number; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const server = net.createServer((s) => {
    accepted++;
    sockets.add(s);
    s.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `ldap://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    accepted: () => accepted,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function ldapSettings(dc: SambaDc): Record<string, unknown> {
  return {
    auth_providers: 'ldap,local',
    ldap_url: dc.ldapsUrl,
    ldap_ca_cert: dc.caPem,
    ldap_bind_dn: dc.bindDN,
    ldap_bind_password: dc.bindPassword,
    ldap_base_dn: dc.baseDN,
    ldap_user_filter: AD_FILTER,
    ldap_username_attr: 'sAMAccountName',
  };
}

const login = (svc: TestService, username: string, password: string) => request(svc.url).post('/api/auth/login').send({ username, password });

/**
 * What `probe` answers once it answers something, polling; fails after `ms`: a few recheck rounds
 * of 1 s, each a directory search that a Samba DC on a machine busy with the rest of the suite
 * (two databases' lanes side by side) may take seconds to answer.
 */
async function until<T>(what: string, probe: () => Promise<T | null | undefined | false>, ms = 15_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const answer = await probe();
    if (answer) return answer;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(150);
  }
}

/** The trail's events about one user: actor, action and details. */
async function eventsOf(svc: TestService, userId: string, action = 'user.updated'): Promise<Array<{ actor: string; outcome: string; details: any }>> {
  await svc.service.iam.audit.flush();
  const rows = await svc.service.db('audit_events').where({ action, target_id: userId }).orderBy('seq').select('actor_username', 'outcome', 'details');
  return rows.map((r) => ({ actor: r.actor_username, outcome: r.outcome, details: JSON.parse(r.details) }));
}

async function metric(svc: TestService, name: string): Promise<number> {
  const text = (await request(svc.url).get('/metrics').expect(200)).text;
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

describe('Active Directory sign-in through the service (real Samba AD DC)', function () {
  this.timeout(60_000);
  let dc: SambaDc;
  let svc: TestService;
  const logs = capturingLogger('info');
  const people: Record<string, AdUser> = {};
  let platform: string;

  before(async function () {
    this.timeout(240_000);
    dc = await startSambaDc();
    await dc.addOu('OU=People');
    await dc.addOu('OU=Groups');
    const add = async (sam: string, mail?: string, mustChange = false) => {
      const password = `${sam[0]!.toUpperCase()}${sam.slice(1)}-Pass-1!`;
      people[sam] = await dc.addUser(sam, password, { ou: 'OU=People', mail, mustChange, given: sam, surname: 'Test' });
    };
    for (const sam of ['alice', 'dora', 'rita', 'sam', 'tom']) await add(sam);
    await add('fay', undefined, true);
    await add('uma', 'uma@corp.example');
    await add('una', 'una@corp.example');
    await add('vic', 'vic@corp.example');
    platform = await dc.addGroup('Platform', 'OU=Groups');
    await dc.addGroup('Ops', 'OU=Groups');
    await dc.addMembers('Platform', ['Ops']);
    await dc.addMembers('Ops', ['alice']);
    await dc.disable('dora');
    svc = await startService({ logger: logs.logger });
    await patchAuthSettings(svc.url, { ...ldapSettings(dc), ldap_group_mapping: { [platform]: ['INT_USER'] } }).expect(200);
  });

  after(async () => {
    try {
      await svc?.destroy();
    } finally {
      await dc?.stop();
    }
  });

  it('CORP\\alice, alice@corp.example and alice sign in as one user named alice, mapped through a nested group', async () => {
    const ids = new Set<string>();
    for (const typed of ['CORP\\alice', 'alice@corp.example', 'alice']) {
      const res = await login(svc, typed, people.alice!.password).expect(200);
      expect(res.body.user.username, typed).to.equal('alice');
      ids.add(res.body.user.id);
    }
    expect(ids.size).to.equal(1);
    const user = await getUser(svc.url, [...ids][0]!);
    expect(user.identities).to.deep.equal([{ provider: 'ldap', provider_user_id: people.alice!.sid }]);
    // Platform holds Ops, Ops holds alice
    expect(user.groups).to.have.members(['INT_VIEWER', 'INT_USER']);
  });

  it("a refused account says why (401 details.reason, the login page's text); a wrong password or an unknown name stays the generic 401", async () => {
    const disabled = await login(svc, 'dora', people.dora!.password).expect(401);
    expect(disabled.body.error).to.deep.equal({ code: 'unauthorized', message: REFUSAL_TEXT.account_disabled, details: { reason: 'account_disabled' } });
    const mustChange = await login(svc, 'CORP\\fay', people.fay!.password).expect(401);
    expect(mustChange.body.error.details).to.deep.equal({ reason: 'password_must_change' });

    const wrong = await login(svc, 'dora', 'Not-Her-Password-1!').expect(401);
    const unknown = await login(svc, 'nobody-here', 'Not-Her-Password-1!').expect(401);
    expect(wrong.body).to.deep.equal(unknown.body);
    expect(wrong.body.error).to.deep.equal({ code: 'unauthorized', message: 'invalid username or password' });

    const failures = logs.lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'login_failed');
    expect(failures.find((l) => l.username === 'dora')).to.include({ reason: 'account_disabled', provider: 'ldap', via: 'login' });
    const refused = logs.lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'ldap_bind_refused');
    expect(refused.map((l) => l.reason)).to.include.members(['account_disabled', 'password_must_change']);
    expect(logs.text()).not.to.include(people.dora!.password);

    // the login form lands on the page with the reason's text
    const form = await request(svc.url).post('/login').type('form').send({ username: 'fay', password: people.fay!.password, next: '/' }).expect(303);
    expect(form.headers.location).to.equal('/login?error=password_must_change');
    const page = await request(svc.url).get(form.headers.location).expect(200);
    expect(page.text).to.include(REFUSAL_TEXT.password_must_change);
    const generic = await request(svc.url).post('/login').type('form').send({ username: 'fay', password: 'Not-Her-Password-1!', next: '/' }).expect(303);
    expect(generic.headers.location).to.equal('/login?error=invalid_credentials');
  });

  it('joins a login to a local user by e-mail only when turned on, and never to an administrator', async () => {
    // off by default: uma's directory address matches a local user, who stays apart
    const umaLocal = await createUser(svc.url, { username: 'uma-local', password: 'uma-local-password', email: 'uma@corp.example', groups: ['INT_VIEWER'] });
    const uma = await login(svc, 'uma', people.uma!.password).expect(200);
    expect(uma.body.user.id).not.to.equal(umaLocal);
    expect(uma.body.user.username).to.equal('uma');

    await patchAuthSettings(svc.url, { ldap_link_by_email: true }).expect(200);
    try {
      const unaLocal = await createUser(svc.url, { username: 'una-local', password: 'una-local-password', email: 'una@corp.example', groups: ['INT_VIEWER'] });
      const una = await login(svc, 'una@corp.example', people.una!.password).expect(200);
      expect(una.body.user.id, 'a plain user is joined').to.equal(unaLocal);
      expect((await getUser(svc.url, unaLocal)).identities).to.deep.include({ provider: 'ldap', provider_user_id: people.una!.sid });

      const vicAdmin = await createUser(svc.url, {
        username: 'vic-admin',
        password: 'vic-admin-password',
        email: 'vic@corp.example',
        groups: ['INT_VIEWER', 'INT_ADMIN'],
      });
      const vic = await login(svc, 'vic', people.vic!.password).expect(200);
      expect(vic.body.user.id, 'never an administrator').not.to.equal(vicAdmin);
      expect(vic.body.user.groups).not.to.include('INT_ADMIN');
      expect((await getUser(svc.url, vicAdmin)).identities).to.deep.equal([{ provider: 'local', provider_user_id: 'vic-admin' }]);
    } finally {
      await patchAuthSettings(svc.url, { ldap_link_by_email: null }).expect(200);
    }
  });

  it('TLS settings take effect without a restart; a new CA or StartTLS needs the bind password again', async () => {
    const moved = await patchAuthSettings(svc.url, { ldap_ca_cert: dc.otherCaPem }).expect(400);
    expect(moved.body.error.details).to.deep.equal([{ field: 'ldap_bind_password', message: 'must be entered again when ldap_ca_cert changes' }]);
    const startTls = await patchAuthSettings(svc.url, { ldap_starttls: true }).expect(400);
    expect(startTls.body.error.details).to.deep.equal([{ field: 'ldap_bind_password', message: 'must be entered again when ldap_starttls changes' }]);

    // a CA that did not sign the DC's certificate: directory logins fail, local ones go on
    await patchAuthSettings(svc.url, { ldap_ca_cert: dc.otherCaPem, ldap_bind_password: dc.bindPassword }).expect(200);
    await login(svc, 'alice', people.alice!.password).expect(401);
    await login(svc, ADMIN.username, ADMIN.password).expect(200);

    // StartTLS on ldap://, the CA typed into a one-line field (line breaks became spaces)
    const oneLine = dc.caPem.replace(/\n/g, ' ');
    await patchAuthSettings(svc.url, { ldap_url: dc.url, ldap_starttls: true, ldap_ca_cert: oneLine, ldap_bind_password: dc.bindPassword }).expect(200);
    const view = (await request(svc.url).get('/api/settings/auth').set('Authorization', adminAuth()).expect(200)).body.settings;
    expect(view.ldap_ca_cert.value).to.equal(dc.caPem.trim());
    await login(svc, 'alice', people.alice!.password).expect(200);

    // an address the certificate does not name: refused
    await patchAuthSettings(svc.url, { ldap_url: `ldap://${dc.otherAddress}`, ldap_bind_password: dc.bindPassword }).expect(200);
    await login(svc, 'alice', people.alice!.password).expect(401);
    expect(logs.text()).to.match(/ldap:\/\/127\.[0-9.]+: StartTLS failed: the certificate does not name this host [^"]*\[ERR_TLS_CERT_ALTNAME_INVALID\]/);

    for (const bad of [
      'not a certificate',
      '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----',
      '-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----',
    ]) {
      const res = await patchAuthSettings(svc.url, { ldap_ca_cert: bad, ldap_bind_password: dc.bindPassword }).expect(400);
      expect(res.body.error.details[0].field).to.equal('ldap_ca_cert');
    }
    await patchAuthSettings(svc.url, { ...ldapSettings(dc), ldap_starttls: null }).expect(200);
    await login(svc, 'alice', people.alice!.password).expect(200);
  });

  it('the directory recheck: an account disabled there loses its session and ws connection within the interval; a directory that does not answer ends nothing', async function () {
    this.timeout(90_000);
    await patchAuthSettings(svc.url, { ldap_recheck_interval: '2s' }).expect(200);
    const silent = await silentServer();
    const open: WsClient[] = [];
    try {
      const rita = (await login(svc, 'rita', people.rita!.password).expect(200)).body;
      const sam = (await login(svc, 'sam', people.sam!.password).expect(200)).body;
      const ritaWs = await WsClient.connect(svc, { headers: { Authorization: `Bearer ${rita.token}` } });
      const samWs = await WsClient.connect(svc, { headers: { Authorization: `Bearer ${sam.token}` } });
      open.push(ritaWs, samWs);

      await dc.disable('rita');
      const closed = await Promise.race([ritaWs.closed, sleep(2000 + RECHECK_SLACK_MS).then(() => null)]);
      expect(closed, "rita's connection is still open a recheck interval later").to.not.equal(null);
      expect(closed!.code).to.equal(1008);
      await request(svc.url).get('/api/me').set('Authorization', `Bearer ${rita.token}`).expect(401);
      await request(svc.url).get('/api/me').set('Authorization', `Bearer ${sam.token}`).expect(200);
      await samWs.roundTrip();
      expect(await metric(svc, 'ldap_recheck_accounts_ended_total{state="disabled"}')).to.equal(1);
      const ended = logs.lines.map((l) => JSON.parse(l)).find((l) => l.event === 'ldap_account_ended');
      expect(ended).to.include({ username: 'rita', state: 'disabled' });

      // the local user is disabled too (any other way in ends with it); enabling her in the
      // directory lets her in again
      expect((await getUser(svc.url, rita.user.id)).disabled).to.equal(true);
      await login(svc, 'rita', people.rita!.password).expect(401);
      await dc.enable('rita');
      await login(svc, 'rita', people.rita!.password).expect(200);
      expect((await getUser(svc.url, rita.user.id)).disabled).to.equal(false);

      // the directory hangs: nothing ends, it is reported, and logins go on without waiting for it
      await patchAuthSettings(svc.url, {
        ldap_url: silent.url,
        ldap_bind_password: dc.bindPassword,
        ldap_connect_timeout_ms: 300,
        ldap_timeout_ms: 300,
      }).expect(200);
      const deadline = Date.now() + 10_000;
      while ((await metric(svc, 'ldap_recheck_rounds_total{outcome="unavailable"}')) < 1 && Date.now() < deadline) await sleep(200);
      expect(await metric(svc, 'ldap_recheck_rounds_total{outcome="unavailable"}')).to.be.at.least(1);
      expect(await metric(svc, 'ldap_directory_up')).to.equal(0);
      await request(svc.url).get('/api/me').set('Authorization', `Bearer ${sam.token}`).expect(200);
      await samWs.roundTrip();
      // the timeout started the backoff: the chain goes straight to the local account
      const before = silent.accepted();
      await login(svc, ADMIN.username, ADMIN.password).expect(200);
      expect(silent.accepted(), 'LDAP was skipped').to.equal(before);
      expect(logs.text()).to.include('the directory could not be asked; no session ended');
    } finally {
      await Promise.all(open.map((c) => c.close()));
      await silent.close();
      await patchAuthSettings(svc.url, { ...ldapSettings(dc), ldap_connect_timeout_ms: null, ldap_timeout_ms: null, ldap_recheck_interval: null }).expect(200);
    }
  });
  it('the login_failed line and the event carry the reason AD gave (disabled, expired, password expired, must change, locked); a locked account tells the person nothing', async () => {
    const ed = await dc.addUser('ed', 'Ed-Pass-1!', { ou: 'OU=People' });
    const gus = await dc.addUser('gus', 'Gus-Pass-1!', { ou: 'OU=People' });
    const hal = await dc.addUser('hal', 'Hal-Pass-1!', { ou: 'OU=People' });
    await dc.setExpiry('ed', 0);
    await dc.agePassword('gus', 100); // past the domain's 42-day maximum age
    await dc.lockOut('hal');
    const tried: Array<[string, string]> = [
      ['dora', people.dora!.password],
      ['ed', ed.password],
      ['gus', gus.password],
      ['fay', people.fay!.password],
      ['hal', hal.password],
      ['hal', 'Not-His-Password-1!'],
    ];
    const answers = [];
    for (const [name, password] of tried) answers.push((await login(svc, name, password).expect(401)).body.error);
    expect(answers.slice(0, 4).map((a) => a.details.reason)).to.deep.equal(['account_disabled', 'account_expired', 'password_expired', 'password_must_change']);
    // locked: AD says so whatever the password, so the person gets what an unknown name gets
    const unknown = (await login(svc, 'nobody-at-all', 'Not-His-Password-1!').expect(401)).body.error;
    expect(answers.slice(4)).to.deep.equal([unknown, unknown]);

    const wanted = { dora: 'account_disabled', ed: 'account_expired', gus: 'password_expired', fay: 'password_must_change', hal: 'account_locked' };
    const failures = logs.lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'login_failed' && l.provider === 'ldap');
    for (const [name, reason] of Object.entries(wanted))
      expect(
        failures.filter((l) => l.username === name).map((l) => l.reason),
        name,
      ).to.include(reason);
    expect(failures.filter((l) => l.username === 'hal').map((l) => l.reason)).to.deep.equal(['account_locked', 'account_locked']);
    await svc.service.iam.audit.flush();
    const events = await svc.service
      .db('audit_events')
      .where({ action: 'auth.login_failed' })
      .whereIn('target_name', Object.keys(wanted))
      .select('target_name', 'details');
    for (const [name, reason] of Object.entries(wanted)) {
      expect(
        events.filter((e) => e.target_name === name).map((e) => JSON.parse(e.details).reason),
        name,
      ).to.include(reason);
    }
  });

  it('a directory account that ends is disabled within the interval: its local password, Basic and every other way in stop; its return enables it (the recheck or a sign-in); an administrator may keep it', async function () {
    this.timeout(90_000);
    const lou = await dc.addUser('lou', 'Lou-Pass-1!', { ou: 'OU=People' });
    const id = (await login(svc, 'lou', lou.password).expect(200)).body.user.id as string;
    // a local password too (it ends the sessions: no live credential is left to revoke)
    const local = 'Lou-Local-Secret-9!';
    await request(svc.url).patch(`/api/users/${id}`).set('Authorization', adminAuth()).send({ password: local }).expect(200);
    const byBasic = () => request(svc.url).get('/api/me').set('Authorization', basic('lou', local));
    await byBasic().expect(200);
    const recheck = svc.service.auth.directoryRecheck;
    const disabled = async (want: boolean) => (await getUser(svc.url, id)).disabled === want;
    await patchAuthSettings(svc.url, { ldap_recheck_interval: '1s' }).expect(200);
    try {
      await dc.disable('lou');
      await until('ended by the recheck', () => disabled(true));
      await byBasic().expect(401);
      await login(svc, 'lou', local).expect(401);
      expect((await eventsOf(svc, id)).at(-1)).to.deep.include({
        actor: 'directory-recheck',
        details: {
          fields: ['disabled'],
          disabled: true,
          directory_state: 'ended',
          provider: 'ldap',
          directory_account: 'disabled',
          because: 'its directory account ended',
        },
      });
      const ended = logs.lines.map((l) => JSON.parse(l)).find((l) => l.event === 'ldap_account_ended' && l.user_id === id);
      expect(ended).to.include({ state: 'disabled', revoked: 0, disabled: true });

      // back in the directory: the recheck enables it
      await dc.enable('lou');
      await until('enabled by the recheck', () => disabled(false));
      await byBasic().expect(200);
      expect((await eventsOf(svc, id)).at(-1)).to.deep.include({
        actor: 'directory-recheck',
        details: { fields: ['disabled'], disabled: false, directory_state: null, provider: 'ldap', because: 'its directory account is active again' },
      });

      // expired, and back: a sign-in through the directory enables it (no round in between)
      await dc.setExpiry('lou', 0);
      await until('ended again (expired)', () => disabled(true));
      recheck.stop();
      try {
        await dc.setExpiry('lou', 30);
        await login(svc, 'lou', lou.password).expect(200);
        expect((await eventsOf(svc, id)).at(-1)).to.deep.include({
          actor: 'login-mapping',
          details: { fields: ['disabled'], disabled: false, directory_state: null, provider: 'ldap', because: 'its directory account is active again' },
        });
      } finally {
        recheck.start();
      }

      // an administrator enables it while its directory account is disabled: it is kept (rounds leave it alone)
      await dc.disable('lou');
      await until('ended once more', () => disabled(true));
      await request(svc.url).patch(`/api/users/${id}`).set('Authorization', adminAuth()).send({ disabled: false }).expect(200);
      expect((await eventsOf(svc, id)).at(-1)).to.deep.include({
        actor: ADMIN.username,
        details: { fields: ['disabled'], disabled: false, directory_state: 'kept' },
      });
      const rounds = recheck.stats.rounds.checked;
      await until('two rounds', async () => recheck.stats.rounds.checked >= rounds + 2);
      await byBasic().expect(200);
      // back in the directory, the keeping is over: a new end applies again
      await dc.enable('lou');
      await until('kept no more', async () => (await svc.service.iam.store.userById(id))!.directoryState === null);
      await dc.disable('lou');
      await until('ended after its return', () => disabled(true));
      await byBasic().expect(401);
    } finally {
      await dc.enable('lou');
      await patchAuthSettings(svc.url, { ldap_recheck_interval: null }).expect(200);
    }
  });

  it('groups follow the directory between sign-ins: out of the group mapped to INT_ADMIN, the session, the key and the ws connection lose the rights within the interval; back in, they have them again', async function () {
    this.timeout(60_000);
    const admins = await dc.addGroup('SvcAdmins', 'OU=Groups');
    const ned = await dc.addUser('ned', 'Ned-Pass-1!', { ou: 'OU=People' });
    await dc.addMembers('SvcAdmins', ['ned']);
    await patchAuthSettings(svc.url, { ldap_group_mapping: { [platform]: ['INT_USER'], [admins]: ['INT_ADMIN'] }, ldap_recheck_interval: '1s' }).expect(200);
    let ws: WsClient | null = null;
    try {
      const session = (await login(svc, 'ned', ned.password).expect(200)).body;
      expect(session.user.groups).to.include('INT_ADMIN');
      const bearer = `Bearer ${session.token}`;
      const key = (await request(svc.url).post('/api/me/api-keys').set('Authorization', bearer).send({ label: 'automation' }).expect(201)).body.token as string;
      const users = (auth: Record<string, string>) => request(svc.url).get('/api/users').set(auth);
      await users({ Authorization: bearer }).expect(200);
      await users({ 'X-API-Key': key }).expect(200);
      ws = await WsClient.connect(svc, { headers: { Authorization: bearer } });
      const makeGroup = (name: string) => request(svc.url).post('/api/groups').set('Authorization', adminAuth()).send({ name, permissions: [] }).expect(201);
      await makeGroup('NED_WATCH_1');
      await ws.next('audit:event', (f) => f.payload.target?.name === 'NED_WATCH_1');

      await dc.removeMembers('SvcAdmins', ['ned']);
      await until('the session loses INT_ADMIN', async () => (await users({ Authorization: bearer })).status === 403);
      await users({ 'X-API-Key': key }).expect(403);
      const change = (await eventsOf(svc, session.user.id)).at(-1)!;
      expect(change.actor).to.equal('directory-recheck');
      expect(change.details).to.include({ provider: 'ldap' });
      expect(change.details.previous_groups).to.include('INT_ADMIN');
      expect(change.details.groups).to.have.members(['INT_VIEWER']);
      // the live connection follows: the trail's events (for administrators) no longer reach it
      await sleep(300);
      await makeGroup('NED_WATCH_2');
      await sleep(500);
      await ws.roundTrip();
      expect(ws.all('audit:event', (f) => f.payload.target?.name === 'NED_WATCH_2')).to.deep.equal([]);

      await dc.addMembers('SvcAdmins', ['ned']);
      await until('the key has INT_ADMIN again', async () => (await users({ 'X-API-Key': key })).status === 200);
    } finally {
      await ws?.close();
      await patchAuthSettings(svc.url, { ldap_group_mapping: { [platform]: ['INT_USER'] }, ldap_recheck_interval: null }).expect(200);
    }
  });

  it('names follow the directory (the objectSid stays the identity): at a sign-in, a name or address another user holds stays behind, logged; between sign-ins a rename follows, and a new hire gets the old name and address', async function () {
    this.timeout(60_000);
    // at a sign-in
    const quinnLocal = await createUser(svc.url, { username: 'quinn', password: 'Quinn-Local-Secret-9!', email: 'quinn@corp.example', groups: ['INT_VIEWER'] });
    const quincy = await dc.addUser('quincy', 'Quincy-Pass-1!', { ou: 'OU=People', given: 'Quincy', surname: 'Q', mail: 'quincy@corp.example' });
    const before = (await login(svc, 'quincy', quincy.password).expect(200)).body.user;
    expect(before).to.include({ username: 'quincy', email: 'quincy@corp.example', display_name: 'Quincy Q' });
    await dc.modify(quincy.dn, 'sAMAccountName', ['quinn']);
    await dc.modify(quincy.dn, 'mail', ['quinn@corp.example']);
    await dc.modify(quincy.dn, 'displayName', ['Quinn Q']);
    const held = (await login(svc, quincy.upn, quincy.password).expect(200)).body.user;
    expect(held).to.include({ id: before.id, username: 'quincy', email: 'quincy@corp.example', display_name: 'Quinn Q' });
    const skipped = logs.lines.map((l) => JSON.parse(l)).filter((l) => l.event === 'profile_not_followed' && l.user_id === before.id);
    expect(skipped.map((l) => [l.field, l.wanted, l.held_by])).to.have.deep.members([
      ['username', 'quinn', quinnLocal],
      ['email', 'quinn@corp.example', quinnLocal],
    ]);
    // the local quinn gone, the next sign-in takes both
    await request(svc.url).delete(`/api/users/${quinnLocal}`).set('Authorization', adminAuth()).expect(204);
    const taken = (await login(svc, 'quinn', quincy.password).expect(200)).body.user;
    expect(taken).to.include({ id: before.id, username: 'quinn', email: 'quinn@corp.example' });
    expect((await eventsOf(svc, before.id)).at(-1)).to.deep.include({
      actor: 'login-mapping',
      details: { fields: ['username', 'email'], provider: 'ldap', previous_username: 'quincy' },
    });

    // between sign-ins
    const pat = await dc.addUser('pat', 'Pat-Pass-1!', { ou: 'OU=People', given: 'Pat', surname: 'Old', mail: 'pat@corp.example' });
    const first = (await login(svc, 'pat', pat.password).expect(200)).body;
    expect(first.user).to.include({ username: 'pat', email: 'pat@corp.example', display_name: 'Pat Old' });
    await patchAuthSettings(svc.url, { ldap_recheck_interval: '1s' }).expect(200);
    try {
      // one change of the directory (the recheck runs every second: it must not see half of it)
      await dc.modifyAll(pat.dn, {
        sAMAccountName: ['patricia'],
        userPrincipalName: ['patricia@corp.example'],
        mail: ['patricia@corp.example'],
        displayName: ['Patricia Old'],
      });
      const renamed = await until('the rename follows', async () => {
        const u = await getUser(svc.url, first.user.id);
        return u.username === 'patricia' && u;
      });
      expect(renamed).to.include({ email: 'patricia@corp.example', display_name: 'Patricia Old' });
      expect(renamed.identities).to.deep.equal([{ provider: 'ldap', provider_user_id: pat.sid }]);
      expect((await eventsOf(svc, first.user.id)).at(-1)).to.deep.include({
        actor: 'directory-recheck',
        details: { fields: ['username', 'email', 'displayName'], provider: 'ldap', previous_username: 'pat' },
      });
      expect((await request(svc.url).get('/api/me').set('Authorization', `Bearer ${first.token}`).expect(200)).body.username).to.equal('patricia');

      const hire = await dc.addUser('pat', 'Pat-Hire-Pass-1!', { ou: 'OU=People', given: 'Pat', surname: 'New', mail: 'pat@corp.example' });
      const newPat = (await login(svc, 'pat', hire.password).expect(200)).body.user;
      expect(newPat).to.include({ username: 'pat', email: 'pat@corp.example', display_name: 'Pat New' });
      expect(newPat.id).not.to.equal(first.user.id);
    } finally {
      await patchAuthSettings(svc.url, { ldap_recheck_interval: null }).expect(200);
    }
  });
});

describe('the directory recheck on several instances (real Samba AD DC, Redis)', function () {
  this.timeout(60_000);
  let dc: SambaDc;
  let redis: TestRedis;
  let a: TestService;
  let b: TestService;
  let wes: AdUser;

  before(async function () {
    this.timeout(240_000);
    [dc, redis] = await Promise.all([startSambaDc(), startRedis()]);
    wes = await dc.addUser('wes', 'Wes-Pass-1!');
    const env = { SERVICE_REDIS_URL: redis.url };
    a = await startService({ env });
    b = await startPeer(a, env);
    await patchAuthSettings(a.url, { ...ldapSettings(dc), ldap_recheck_interval: '2s' }).expect(200);
    await b.service.auth.followAuthSettings();
  });

  after(async () => {
    try {
      await b?.stop();
      await a?.destroy();
    } finally {
      await Promise.all([dc?.stop(), redis?.stop()]);
    }
  });

  it('each round is done by one instance; the connections on both end within the interval', async () => {
    const token = (await login(a, 'wes', wes.password).expect(200)).body.token;
    const onA = await WsClient.connect(a, { headers: { Authorization: `Bearer ${token}` } });
    const onB = await WsClient.connect(b, { headers: { Authorization: `Bearer ${token}` } });
    // let both instances see a few rounds
    await sleep(4500);
    const rounds = (svc: TestService) => svc.service.auth.directoryRecheck.stats.rounds;
    expect(rounds(a).checked + rounds(b).checked).to.be.at.least(1);
    expect(rounds(a).skipped + rounds(b).skipped, 'the other instance skips a round already claimed').to.be.at.least(1);

    await dc.disable('wes');
    const closes = await Promise.all([onA, onB].map((c) => Promise.race([c.closed, sleep(2000 + RECHECK_SLACK_MS).then(() => null)])));
    expect(closes.map((c) => c?.code)).to.deep.equal([1008, 1008]);
    const ended = (svc: TestService) => svc.service.auth.directoryRecheck.stats.ended.disabled;
    // counted once the round has also revoked the keys, a moment after the disabling closed the connections
    await eventually(() => expect(ended(a) + ended(b), 'one instance revoked').to.equal(1), 5000);
    await request(b.url).get('/api/me').set('Authorization', `Bearer ${token}`).expect(401);
  });

  it('rounds of two instances that overlap (one running late on a busy machine) end a user once', async () => {
    const vic = await dc.addUser('vic', 'Vic-Pass-1!');
    const token = (await login(a, 'vic', vic.password).expect(200)).body.token;
    const recheck = (svc: TestService) => svc.service.auth.directoryRecheck;
    const ended = () => recheck(a).stats.ended.disabled + recheck(b).stats.ended.disabled;
    // no scheduled round from here on, and none under way (one would find vic still active)
    for (const svc of [a, b]) recheck(svc).stop();
    try {
      await Promise.all([a, b].map((svc) => recheck(svc).runOnce()));
      const before = ended();
      await dc.disable('vic');
      // rounds of two slots long past (no round of these services claimed them), one on each
      // instance: each claims its own, and both find vic with a live session before either has
      // revoked it
      const slot = Math.floor(Date.now() / 2000) - 1000;
      await Promise.all([recheck(a).runOnce(slot * 2000), recheck(b).runOnce((slot + 1) * 2000)]);
      expect(ended() - before, 'ended (logged and counted) by the round that revoked, only').to.equal(1);
    } finally {
      for (const svc of [a, b]) recheck(svc).start();
    }
    await request(a.url).get('/api/me').set('Authorization', `Bearer ${token}`).expect(401);
  });
});
