import { expect } from 'chai';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import request from 'supertest';
import { startService, adminAuth, basic, SYSTEM_KEY, type TestService } from '../support/service.js';
import { capturingLogger } from '../sockets/helpers.js';
import { eventually, dbIdle } from './helpers.js';
import { isPublicAddress, publicLookup, RefusedDestination } from '../../plugins/outbound-forwarder/destination.js';
import { ManifestError, parseManifest } from '../../src/plugins/manifest.js';

/**
 * The outbound forwarder's destination (docs/plugins.md, "Example 1"): its signing secret follows
 * no changed url (entered again, 400 naming it), and it connects to public addresses only, the
 * address checked being the one the socket connects to; a trusted actor alone may allow private
 * ones. Only the last test sends a delivery, to a listener of its own.
 */
const FORWARDER = fileURLToPath(new URL('../../plugins/outbound-forwarder', import.meta.url));
const SECRET = 'forwarder-destination-secret-0123';
const OTHER_SECRET = 'another-receivers-secret-456789';

/** A listener that counts every connection made to it (a refused destination must see none). */
class Listener {
  connections = 0;
  readonly bodies: Array<{ headers: http.IncomingHttpHeaders; raw: string }> = [];
  private server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      this.bodies.push({ headers: req.headers, raw: Buffer.concat(chunks).toString('utf8') });
      res.end('{}');
    });
  });
  constructor() {
    this.server.on('connection', () => this.connections++);
  }
  async start(host: string): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, host, resolve));
    return (this.server.address() as AddressInfo).port;
  }
  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

describe('outbound forwarder: where it may deliver', function () {
  this.timeout(60_000);
  let svc: TestService;
  let pluginsDir: string;
  const logs = capturingLogger('info');
  const v4 = new Listener();
  const v6 = new Listener();
  let p4 = 0;
  let p6 = 0;
  const superadmin = () => adminAuth(); // SERVICE_ADMIN_FORCE_SUPERADMIN below
  const plain = basic('plainadmin', 'plainadmin-password');
  const sys = { 'X-API-Key': SYSTEM_KEY };
  const api = () => request(svc.url);
  const patch = (auth: Record<string, string>, changes: Record<string, string | null>) =>
    api().patch('/api/plugins/outbound-forwarder/settings').set(auth).send(changes);
  const asPlain = { Authorization: plain };
  const asSuper = () => ({ Authorization: superadmin() });
  const status = async () => (await api().get('/api/plugins/outbound-forwarder/status').set(sys).expect(200)).body;
  const storedUrl = async () =>
    (await api().get('/api/plugins/outbound-forwarder/settings').set(sys).expect(200)).body.settings.find((s: { key: string }) => s.key === 'url').value;

  before(async () => {
    // this folder holds the forwarder only (the other example needs PostgreSQL's socket)
    pluginsDir = fs.mkdtempSync(path.join(os.tmpdir(), 'forwarder-plugins-'));
    fs.symlinkSync(FORWARDER, path.join(pluginsDir, 'outbound-forwarder'));
    p4 = await v4.start('127.0.0.1');
    p6 = await v6.start('::1');
    svc = await startService({ logger: logs.logger, env: { SERVICE_PLUGINS_DIR: pluginsDir, SERVICE_ADMIN_FORCE_SUPERADMIN: 'true' } });
    await api().put('/api/settings/system-api-key').set('Authorization', superadmin()).send({ key: SYSTEM_KEY }).expect(204);
    await api()
      .post('/api/users')
      .set(sys)
      .send({ username: 'plainadmin', password: 'plainadmin-password', groups: ['INT_ADMIN'] })
      .expect(201);
    await svc.service.iam.ledger.applyAll();
  });
  after(async () => {
    if (svc) {
      await dbIdle(svc.service.db);
      await svc.destroy();
    }
    await v4.close();
    await v6.close();
    fs.rmSync(pluginsDir, { recursive: true, force: true });
  });

  it('a plain admin moving url without the secret typed again: 400 naming secret, nothing stored; with it: accepted', async () => {
    // .example never resolves: no delivery can leave
    const first = 'https://hooks.receiver.example/in';
    await patch(asPlain, { url: first, secret: SECRET }).expect(200);
    const moves: Array<Record<string, string>> = [
      { url: 'https://hooks.attacker.example/collect' },
      { url: 'https://hooks.attacker.example/collect', max_attempts: '1' },
    ];
    for (const changes of moves) {
      const refused = await patch(asPlain, changes).expect(400);
      expect(refused.body.error.details).to.deep.equal([{ field: 'secret', message: 'must be entered again when url changes' }]);
      expect(await storedUrl()).to.equal(first);
    }
    // a trusted actor does not carry the stored secret along either: the rule is the secret's
    await patch(sys, { url: 'https://hooks.attacker.example/collect' }).expect(400);
    // whoever moves the url sets the key that signs for it
    await patch(asPlain, { url: 'https://hooks.other.example/in', secret: OTHER_SECRET }).expect(200);
    expect(await storedUrl()).to.equal('https://hooks.other.example/in');
    // settings other than the url keep the stored secret
    await patch(asPlain, { max_attempts: '1' }).expect(200);
  });

  it('refuses loopback, private and link-local destinations at connect time: nothing reaches a listener, the refusal is counted and logged without the content', async () => {
    const destinations = [
      `http://127.0.0.1:${p4}/in`,
      `http://[::1]:${p6}/in`,
      // a name: refused by the connection's own lookup (localhost resolves to loopback only)
      `http://localhost:${p4}/in`,
      `http://localhost:${p6}/in`,
      // other spellings of loopback
      `http://[::ffff:127.0.0.1]:${p4}/in`,
      `http://0.0.0.0:${p4}/in`,
      `http://127.9.9.9:${p4}/in`,
      // private and link-local: refused before any packet
      'http://10.20.30.40:9/in',
      'http://172.16.5.4:9/in',
      'http://192.168.1.1:9/in',
      'http://100.64.0.1:9/in',
      'http://169.254.169.254/latest/meta-data/',
      'http://[fe80::1]:9/in',
      'http://[fd00::1]:9/in',
    ];
    for (const url of destinations) {
      // a plain admin may point the forwarder anywhere; it connects to public addresses only
      await patch(asPlain, { url, secret: SECRET, max_attempts: '3', backoff_ms: '0' }).expect(200);
      const title = `payroll for ${crypto.randomUUID()}`;
      await api().post('/api/notifications').set(sys).send({ title, message: 'private figures' }).expect(202);
      const s = await eventually(async () => {
        const now = await status();
        expect(now, url).to.include({ refused: 1, pending: 0 });
        return now;
      });
      // final at once: no retry, no give-up, nothing delivered
      expect(s, url).to.include({ delivered: 0, failed: 0, retries: 0 });
      expect(s.last_error, url).to.match(/^refused: .+ is not a public address \(loopback, link-local or private\); allow_private_destinations is off$/);
      expect(logs.text()).to.include('delivery refused');
      expect(logs.text()).not.to.include(title);
      expect(logs.text()).not.to.include('private figures');
    }
    expect(v4.connections).to.equal(0);
    expect(v6.connections).to.equal(0);
  });

  it('only a trusted actor allows private destinations, and only a trusted actor moves the url while they are allowed; then the local listener gets the signed delivery', async () => {
    await svc.service.iam.audit.flush();
    const deniedBefore = (
      await svc.service.db('audit_events').where({ action: 'settings.changed', outcome: 'denied', actor_username: 'plainadmin' }).orderBy('seq')
    ).length;
    const local = `http://127.0.0.1:${p4}/hooks`;
    for (const value of ['true', 'false', null]) {
      const refused = await patch(asPlain, { allow_private_destinations: value }).expect(403);
      expect(refused.body.error.details).to.deep.equal([{ field: 'allow_private_destinations', message: 'only a superadmin or the system key may change it' }]);
    }
    await patch(asPlain, { url: local, secret: SECRET, allow_private_destinations: 'true' }).expect(403);
    const settings = (await api().get('/api/plugins/outbound-forwarder/settings').set(sys).expect(200)).body.settings;
    expect(settings.find((s: { key: string }) => s.key === 'allow_private_destinations')).to.include({ value: 'false', source: 'default' });
    await svc.service.iam.audit.flush();
    const denied = await svc.service.db('audit_events').where({ action: 'settings.changed', outcome: 'denied', actor_username: 'plainadmin' }).orderBy('seq');
    // recorded denied by the command path (repeats of one refusal coalesce)
    expect(denied.length).to.be.greaterThan(deniedBefore);
    const first = denied[deniedBefore]!;
    expect(first).to.include({ target_type: 'plugin', target_id: 'outbound-forwarder' });
    expect(JSON.stringify(first.details)).to.include('allow_private_destinations: only a superadmin or the system key may change it');

    // a superadmin allows it, with the url it is allowed for
    await patch(asSuper(), { url: local, secret: SECRET, allow_private_destinations: 'true' }).expect(200);
    // the allowance was given for that url: a plain admin cannot move it elsewhere inside
    const moved = await patch(asPlain, { url: `http://10.0.0.7:${p4}/x`, secret: OTHER_SECRET }).expect(403);
    expect(moved.body.error.details).to.deep.equal([
      { field: 'url', message: 'only a superadmin or the system key may change it while allow_private_destinations is set' },
    ]);
    expect(await storedUrl()).to.equal(local);

    const title = `deploy ${crypto.randomUUID()}`;
    await api().post('/api/notifications').set(sys).send({ title, message: 'done' }).expect(202);
    const got = await eventually(() => {
      expect(v4.bodies.length).to.equal(1);
      return v4.bodies[0]!;
    });
    const expected = 'sha256=' + crypto.createHmac('sha256', SECRET).update(got.raw).digest('hex');
    expect(got.headers['x-service-signature-256']).to.equal(expected);
    expect(JSON.parse(got.raw).notification).to.include({ title, message: 'done' });
    await eventually(async () => expect(await status()).to.include({ delivered: 1, refused: 0 }));

    // the system key (trusted) takes the allowance back; then a plain admin may move the url again
    await patch(sys, { allow_private_destinations: null }).expect(200);
    await patch(asPlain, { url: 'https://hooks.receiver.example/in', secret: SECRET }).expect(200);
  });

  it("a notification to one user is that user's: withheld unless a trusted actor forwards them, which then holds the url", async () => {
    // no administrator reads another's notification through the API: a plugin administrator may not send them to a url of their own
    for (const value of ['true', null]) {
      const refused = await patch(asPlain, { forward_user_notifications: value }).expect(403);
      expect(refused.body.error.details).to.deep.equal([{ field: 'forward_user_notifications', message: 'only a superadmin or the system key may change it' }]);
    }
    const local = `http://127.0.0.1:${p4}/users`;
    await patch(sys, { url: local, secret: SECRET, allow_private_destinations: 'true' }).expect(200);
    const seen = v4.bodies.length;
    const delivered = () => v4.bodies.slice(seen).map((b) => JSON.parse(b.raw).notification as { title: string; user: { username: string } | null });
    const mine = `salary of ${crypto.randomUUID()}`;
    await api().post('/api/notifications').set(sys).send({ title: mine, message: 'for plainadmin only', user: 'plainadmin' }).expect(202);
    const everyone = `maintenance ${crypto.randomUUID()}`;
    await api().post('/api/notifications').set(sys).send({ title: everyone, message: 'tonight' }).expect(202);
    await eventually(async () => expect(await status()).to.include({ delivered: 1, withheld: 1, pending: 0 }));
    expect(delivered().map((n) => n.title)).to.deep.equal([everyone]);

    // a trusted actor forwards them: then they go, and only a trusted actor moves the url
    await patch(sys, { forward_user_notifications: 'true' }).expect(200);
    const next = `review of ${crypto.randomUUID()}`;
    await api().post('/api/notifications').set(sys).send({ title: next, message: 'for plainadmin only', user: 'plainadmin' }).expect(202);
    await eventually(() => expect(delivered().map((n) => n.title)).to.deep.equal([everyone, next]));
    expect(delivered()[1]!.user).to.deep.include({ username: 'plainadmin' });
    await patch(sys, { allow_private_destinations: null }).expect(200);
    const moved = await patch(asPlain, { url: 'https://hooks.collector.example/in', secret: OTHER_SECRET }).expect(403);
    expect(moved.body.error.details).to.deep.equal([
      { field: 'url', message: 'only a superadmin or the system key may change it while forward_user_notifications is set' },
    ]);
    await patch(sys, { forward_user_notifications: null, url: 'https://hooks.receiver.example/in', secret: SECRET }).expect(200);
  });

  it('manifest: guards names other settings, and only a trusted_only setting guards', () => {
    const manifest = (settings: Record<string, unknown>) => ({ id: 'x', name: 'X', version: '0.1.0', entry: 'a.mjs', settings });
    const m = parseManifest(manifest({ url: {}, allow: { default: 'false', trusted_only: true, guards: ['url'] } }));
    expect(m.settings.allow)
      .to.include({ trusted_only: true })
      .and.deep.include({ guards: ['url'] });
    for (const [settings, message] of [
      [{ url: {}, allow: { trusted_only: true, guards: ['nope'] } }, 'settings.allow.guards names nope, which is not another setting'],
      [{ url: {}, allow: { trusted_only: true, guards: ['allow'] } }, 'settings.allow.guards names allow, which is not another setting'],
      [{ url: {}, allow: { guards: ['url'] } }, 'settings.allow.guards is for trusted_only settings'],
    ] as const) {
      expect(() => parseManifest(manifest(settings)))
        .to.throw(ManifestError)
        .with.property('message')
        .that.includes(message);
    }
  });

  it('classifies every spelling of a non-public address, and the lookup hands a socket none of them', async () => {
    const notPublic = [
      '127.0.0.1',
      '127.255.255.254',
      '0.0.0.0',
      '10.0.0.1',
      '172.16.0.1',
      '172.31.255.255',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '100.127.255.255',
      '198.18.0.1',
      '224.0.0.1',
      '255.255.255.255',
      '::',
      '::1',
      '::127.0.0.1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      '0:0:0:0:0:ffff:a9fe:a9fe',
      '::ffff:10.0.0.1',
      '64:ff9b::7f00:1',
      '64:ff9b:1::1',
      '2002:7f00:1::1',
      '2002:c0a8:101::1',
      'fe80::1',
      'fe80::1%eth0',
      'FE80::abcd',
      'fc00::1',
      'fd12:3456::1',
      'fec0::1',
      'ff02::1',
      'not an address',
    ];
    for (const a of notPublic) expect(isPublicAddress(a), a).to.equal(false);
    const public_ = [
      '8.8.8.8',
      '1.1.1.1',
      '172.15.255.255',
      '172.32.0.1',
      '100.63.255.255',
      '100.128.0.1',
      '2606:4700:4700::1111',
      '::ffff:8.8.8.8',
      '64:ff9b::808:808',
      '2002:808:808::1',
    ];
    for (const a of public_) expect(isPublicAddress(a), a).to.equal(true);

    for (const all of [true, false]) {
      const err = await new Promise<unknown>((resolve) => publicLookup('localhost', { all }, (e) => resolve(e)));
      expect(err, `all: ${all}`).to.be.instanceOf(RefusedDestination);
    }
  });
});
