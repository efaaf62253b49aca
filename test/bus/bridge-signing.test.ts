import crypto from 'node:crypto';
import { expect } from 'chai';
import type Joi from 'joi';
import { Redis } from 'ioredis';
import { EventBus } from '../../src/bus/bus.js';
import { CLUSTER_EVENTS, type EventName } from '../../src/bus/events.js';
import { PLUGIN_EVENT_SCHEMA } from '../../src/bus/cluster.js';
import { busKey, RedisBridge, SeenIds, sealMessage, type DropReason, type Envelope } from '../../src/bus/redis-bridge.js';
import { startRedis, type TestRedis } from '../support/redis.js';
import { capturingLogger } from '../sockets/helpers.js';
import { eventually } from '../plugins/helpers.js';

const SECRET = 'bridge-test-secret-key-0123456789abcdef';
const CHANNEL = 'service-core:bus';

interface Peer {
  name: string;
  bus: EventBus;
  bridge: RedisBridge;
  log: ReturnType<typeof capturingLogger>;
  /** every payload of `event` this peer's bus saw */
  seen(event: EventName): unknown[];
}

/**
 * The bridge alone (no service): bridges on one redis-server of the test's own, a raw client
 * that publishes what an intruder on the Redis server would, and the bus key to craft messages
 * only a holder of SERVICE_SECRET_KEY could make.
 */
describe('bus bridge: signed envelopes', function () {
  this.timeout(30_000);
  let redis: TestRedis;
  let raw: Redis;
  let tap: Redis;
  /** every message on the channel, as published */
  const captured: Buffer[] = [];
  const peers: Peer[] = [];
  let a: Peer;
  let b: Peer;

  const peer = async (name: string, opts: { secretKey?: string; maxSeen?: number } = {}): Promise<Peer> => {
    const log = capturingLogger('info');
    const bus = new EventBus(log.logger);
    const got = new Map<string, unknown[]>();
    for (const event of [...Object.keys(CLUSTER_EVENTS), 'plugin:pinger:beat']) {
      got.set(event, []);
      bus.on(event as EventName, (p) => void got.get(event)!.push(p));
    }
    const bridge = new RedisBridge({ url: redis.url, bus, log: log.logger, secretKey: opts.secretKey ?? SECRET, instanceId: name, maxSeen: opts.maxSeen });
    bridge.start();
    await eventually(() => expect(bridge.isUp).to.equal(true), 5000);
    const p: Peer = { name, bus, bridge, log, seen: (event) => got.get(event)! };
    peers.push(p);
    return p;
  };
  const drops = (p: Peer) => ({ ...p.bridge.stats.droppedBy });
  const delta = (p: Peer, before: Record<DropReason, number>) =>
    Object.fromEntries(
      Object.entries(p.bridge.stats.droppedBy)
        .filter(([r, n]) => n !== before[r as DropReason])
        .map(([r, n]) => [r, n - before[r as DropReason]]),
    );
  /** A's next event, after whatever was published before it, has reached B: B has handled everything before it too */
  const flush = async () => {
    const marker = crypto.randomBytes(4).toString('hex');
    a.bus.emit('iam:password_changed', { user_id: `flush-${marker}` });
    await eventually(() => expect(b.seen('iam:password_changed')).to.deep.include({ user_id: `flush-${marker}` }), 3000, 10);
  };
  const envelope = (fields: Partial<Envelope> & Pick<Envelope, 'event' | 'payload'>): Envelope => ({
    v: 2,
    id: crypto.randomBytes(16).toString('hex'),
    ts: Date.now(),
    origin: 'crafted',
    ...fields,
  });
  /** the first signed message captured that contains `text` */
  const capturedWith = (text: string) => captured.find((m) => m.toString().startsWith('sc-bus-v2.') && m.toString().includes(text));

  before(async () => {
    redis = await startRedis();
    raw = new Redis(redis.url);
    tap = new Redis(redis.url);
    await tap.subscribe(CHANNEL);
    tap.on('messageBuffer', (_channel: Buffer, message: Buffer) => captured.push(message));
    a = await peer('instance-a');
    b = await peer('instance-b');
  });
  after(async () => {
    for (const p of peers) await p.bridge.close();
    raw?.disconnect();
    tap?.disconnect();
    await redis?.stop();
  });

  it('an event emitted on one instance arrives once on the other, signed, with a unique id and a timestamp', async () => {
    a.bus.emit('iam:password_changed', { user_id: 'u-signed' });
    await eventually(() => expect(b.seen('iam:password_changed')).to.deep.include({ user_id: 'u-signed' }), 2000);
    const message = await eventually(() => capturedWith('u-signed') ?? Promise.reject(new Error('not captured')), 2000);
    const text = message.toString();
    expect(text).to.match(/^sc-bus-v2\.[A-Za-z0-9_-]{43}\./);
    const env = JSON.parse(text.slice(text.indexOf('.', 'sc-bus-v2.'.length) + 1));
    expect(env).to.include({ v: 2, origin: 'instance-a', event: 'iam:password_changed' });
    expect(env.id).to.match(/^[0-9a-f]{32}$/);
    expect(Math.abs(Date.now() - env.ts)).to.be.below(5000);
    a.bus.emit('iam:password_changed', { user_id: 'u-signed' });
    await eventually(() => expect(b.seen('iam:password_changed').filter((p) => (p as { user_id: string }).user_id === 'u-signed')).to.have.length(2), 2000);
    const ids = captured.filter((m) => m.toString().includes('u-signed')).map((m) => JSON.parse(m.toString().replace(/^sc-bus-v2\.[^.]+\./, '')).id);
    expect(new Set(ids).size).to.equal(2);
  });

  it("unsigned messages (today's plain JSON included) are dropped before anything in them is read", async () => {
    const before = drops(b);
    await raw.publish(CHANNEL, JSON.stringify({ v: 1, origin: 'intruder', event: 'iam:password_changed', payload: { user_id: 'u-unsigned' } }));
    await raw.publish(
      CHANNEL,
      JSON.stringify({ v: 1, origin: 'intruder', event: 'plugin:admin_changed', payload: { plugin_id: 'pinger', action: 'disable', instance: 'intruder' } }),
    );
    await raw.publish(CHANNEL, 'not json at all');
    await flush();
    expect(b.seen('iam:password_changed')).not.to.deep.include({ user_id: 'u-unsigned' });
    expect(b.seen('plugin:admin_changed')).to.deep.equal([]);
    expect(delta(b, before)).to.deep.equal({ unsigned: 3 });
  });

  it('a message signed with another key, or changed after signing, is dropped as badly signed', async () => {
    const other = await peer('instance-with-another-key', { secretKey: 'another-secret-key-0123456789abcdef' });
    const before = drops(b);
    other.bus.emit('iam:password_changed', { user_id: 'u-other-key' });
    // the honest instances drop it, and the one with another key drops theirs
    a.bus.emit('iam:password_changed', { user_id: 'u-honest' });
    await eventually(() => expect(other.bridge.stats.droppedBy.bad_signature).to.be.at.least(1), 2000);
    // a captured message with its payload changed, the MAC kept
    const message = capturedWith('u-honest')!.toString();
    await raw.publish(CHANNEL, message.replace('u-honest', 'u-altered'));
    // a MAC of the right length that is not the MAC, and one that is cut short
    await raw.publish(CHANNEL, message.replace(/^(sc-bus-v2\.)[A-Za-z0-9_-]{43}/, `$1${'A'.repeat(43)}`).replace('u-honest', 'u-forged'));
    await raw.publish(CHANNEL, message.replace(/^(sc-bus-v2\.)[A-Za-z0-9_-]{43}/, '$1AAAA').replace('u-honest', 'u-short'));
    await flush();
    for (const user_id of ['u-other-key', 'u-altered', 'u-forged', 'u-short']) expect(b.seen('iam:password_changed')).not.to.deep.include({ user_id });
    expect(delta(b, before)).to.deep.equal({ bad_signature: 4 });
    const line = b.log.lines.map((l) => JSON.parse(l)).find((l) => l.reason === 'bad_signature');
    expect(line.hint).to.match(/SERVICE_SECRET_KEY/);
    await other.bridge.close();
  });

  it('a captured message published again is dropped as a replay', async () => {
    a.bus.emit('plugin:admin_changed', { plugin_id: 'pinger', action: 'disable', instance: 'instance-a' });
    await eventually(() => expect(b.seen('plugin:admin_changed')).to.have.length(1), 2000);
    const message = capturedWith('"plugin:admin_changed"')!;
    const before = drops(b);
    await raw.publish(CHANNEL, message);
    await raw.publish(CHANNEL, message);
    await flush();
    expect(b.seen('plugin:admin_changed')).to.have.length(1);
    expect(delta(b, before)).to.deep.equal({ replayed: 2 });
  });

  it('a message outside the freshness window is dropped as stale, correctly signed or not', async () => {
    const key = busKey(SECRET);
    const before = drops(b);
    const payload = (user_id: string) => ({ event: 'iam:password_changed', payload: { user_id } });
    await raw.publish(CHANNEL, sealMessage(key, CHANNEL, envelope({ ...payload('u-old'), ts: Date.now() - 60_000 })));
    await raw.publish(CHANNEL, sealMessage(key, CHANNEL, envelope({ ...payload('u-ahead'), ts: Date.now() + 60_000 })));
    // within the window (a peer's clock a little behind): taken
    await raw.publish(CHANNEL, sealMessage(key, CHANNEL, envelope({ ...payload('u-fresh'), ts: Date.now() - 5_000 })));
    await flush();
    expect(b.seen('iam:password_changed')).to.deep.include({ user_id: 'u-fresh' });
    expect(b.seen('iam:password_changed')).not.to.deep.include({ user_id: 'u-old' });
    expect(b.seen('iam:password_changed')).not.to.deep.include({ user_id: 'u-ahead' });
    expect(delta(b, before)).to.deep.equal({ stale: 2 });
  });

  it('a signed message is sealed for its channel: the same bytes on another channel are badly signed', async () => {
    const side = new Redis(redis.url);
    const log = capturingLogger('info');
    const bus = new EventBus(log.logger);
    const seen: unknown[] = [];
    bus.on('iam:password_changed', (p) => void seen.push(p));
    const elsewhere = new RedisBridge({ url: redis.url, bus, log: log.logger, secretKey: SECRET, instanceId: 'elsewhere', channel: 'other-deployment:bus' });
    try {
      elsewhere.start();
      await eventually(() => expect(elsewhere.isUp).to.equal(true), 5000);
      await side.publish(
        'other-deployment:bus',
        sealMessage(busKey(SECRET), CHANNEL, envelope({ event: 'iam:password_changed', payload: { user_id: 'u-channel' } })),
      );
      await eventually(() => expect(elsewhere.stats.droppedBy.bad_signature).to.equal(1), 2000);
      expect(seen).to.deep.equal([]);
    } finally {
      side.disconnect();
      await elsewhere.close();
    }
  });

  it("a deployment on another database of the same Redis is on a channel of its own: neither hears the other's events", async () => {
    // pub/sub ignores the database number: the channel's name carries it
    const log = capturingLogger('info');
    const other = { bus: new EventBus(log.logger), seen: [] as unknown[] };
    other.bus.on('iam:password_changed', (p) => void other.seen.push(p));
    const third = new RedisBridge({ url: `${redis.url}/3`, bus: other.bus, log: log.logger, secretKey: SECRET, instanceId: 'db3' });
    const twinBus = new EventBus(log.logger);
    const twin = new RedisBridge({ url: `${redis.url}/3`, bus: twinBus, log: log.logger, secretKey: SECRET, instanceId: 'db3-twin' });
    try {
      expect([a.bridge.channel, third.channel]).to.deep.equal([CHANNEL, 'service-core:bus:3']);
      for (const bridge of [third, twin]) bridge.start();
      await eventually(() => expect(third.isUp && twin.isUp).to.equal(true), 5000);
      const before = drops(a);
      a.bus.emit('iam:password_changed', { user_id: 'u-database-0' });
      await flush();
      // the same key, so only the channel keeps them apart
      twinBus.emit('iam:password_changed', { user_id: 'u-database-3' });
      await eventually(() => expect(other.seen).to.deep.equal([{ user_id: 'u-database-3' }]), 3000);
      await flush();
      expect(other.seen).to.deep.equal([{ user_id: 'u-database-3' }]);
      expect(a.seen('iam:password_changed')).to.not.deep.include({ user_id: 'u-database-3' });
      expect(b.seen('iam:password_changed')).to.not.deep.include({ user_id: 'u-database-3' });
      expect([delta(a, before), third.stats.dropped]).to.deep.equal([{}, 0]);
    } finally {
      await Promise.all([third.close(), twin.close()]);
    }
  });

  it('a signed payload must match its schema exactly: an unknown field, a missing one, or an unknown event is dropped', async () => {
    const key = busKey(SECRET);
    const before = drops(b);
    const view = {
      id: 'n1',
      seq: null,
      title: 'Hello',
      message: 'm',
      level: 'info',
      source: null,
      link: null,
      created_at: new Date().toISOString(),
      updated_at: new Date().toISOString(),
      read: false,
      broadcast: true,
      toast: true,
      persist: false,
    };
    const push = (extra: Record<string, unknown>, outer: Record<string, unknown> = {}) =>
      envelope({ event: 'notification:push', payload: { event: 'system:notify', user_id: null, seq: null, payload: { ...view, ...extra }, ...outer } });
    const publish = (env: Envelope) => raw.publish(CHANNEL, sealMessage(key, CHANNEL, env));
    await publish(push({ onclick: 'steal()' }));
    await publish(push({}, { extra: true }));
    await publish(push({ seq: 5 })); // the payload's seq is not the push's
    await publish(envelope({ event: 'iam:password_changed', payload: { user_id: 'u-extra', admin: true } }));
    await publish(envelope({ event: 'plugin:admin_changed', payload: { plugin_id: 'pinger', action: 'disable' } }));
    await publish(envelope({ event: 'system:boot_complete', payload: { plugins: [] } }));
    // the same push, exactly as the schema says: taken
    await publish(push({ title: 'exact' }));
    await flush();
    const pushes = b.seen('notification:push') as Array<{ payload: { title: string } }>;
    expect(pushes.map((p) => p.payload.title)).to.deep.equal(['exact']);
    expect(b.seen('iam:password_changed')).not.to.deep.include({ user_id: 'u-extra', admin: true });
    expect(delta(b, before)).to.deep.equal({ invalid_payload: 5, unknown_event: 1 });
  });

  it('an event a plugin declares keeps working, with the fields the plugin gives it', async () => {
    for (const p of [a, b]) p.bridge.declare('plugin:pinger:beat', PLUGIN_EVENT_SCHEMA);
    a.bus.emit('plugin:pinger:beat' as EventName, { n: 7, detail: { ok: true } } as never);
    await eventually(() => expect(b.seen('plugin:pinger:beat' as EventName)).to.deep.equal([{ n: 7, detail: { ok: true } }]), 2000);
  });

  it('no cluster-wide schema lets an unknown field through', () => {
    const open: string[] = [];
    const walk = (d: any, where: string) => {
      if (!d || typeof d !== 'object') return;
      if (d.type === 'object' && d.flags?.unknown === true) open.push(where);
      for (const [k, v] of Object.entries(d.keys ?? {})) walk(v, `${where}.${k}`);
      for (const [i, m] of (d.matches ?? []).entries()) walk(m.schema, `${where}[${i}]`);
      if (d.items) for (const item of d.items) walk(item, `${where}[]`);
    };
    for (const [event, schema] of Object.entries(CLUSTER_EVENTS)) walk((schema as Joi.Schema).describe(), event);
    expect(open).to.deep.equal([]);
  });

  it('the replay memory is bounded, and still refuses a copy of a message it forgot', async () => {
    const small = await peer('instance-small-memory', { maxSeen: 3 });
    const before = drops(small);
    // a millisecond apart: the memory's floor is a timestamp, so more messages than it holds
    // within one millisecond would have the last refused (it fails closed; the real memory holds
    // far more than any millisecond carries)
    for (let i = 0; i < 5; i++) {
      a.bus.emit('iam:password_changed', { user_id: `u-bounded-${i}` });
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    await eventually(
      () => expect(small.seen('iam:password_changed').filter((p) => (p as { user_id: string }).user_id.startsWith('u-bounded-'))).to.have.length(5),
      2000,
    );
    await raw.publish(CHANNEL, capturedWith('u-bounded-0')!);
    await raw.publish(CHANNEL, capturedWith('u-bounded-4')!);
    await eventually(() => expect(delta(small, before)).to.deep.equal({ replayed: 2 }), 2000);

    const seen = new SeenIds(30_000, 3);
    const now = Date.now();
    for (let i = 0; i < 5; i++) expect(seen.remember(`id${i}`, now + i, now)).to.equal(true);
    expect(seen.size).to.equal(3);
    expect(seen.remember('id0', now, now), 'forgotten, but not newer than the floor').to.equal(false);
    expect(seen.remember('id4', now + 4, now), 'remembered').to.equal(false);
    expect(seen.remember('id5', now + 5, now)).to.equal(true);
    // a minute later the old ids are gone; copies of them would be stale anyway
    expect(seen.remember('id6', now + 60_000, now + 60_000)).to.equal(true);
    expect(seen.size).to.equal(1);
    await small.bridge.close();
  });

  it('drops are logged once per reason every 10 s, never with what the message carried', async () => {
    const key = busKey(SECRET);
    const c = await peer('instance-c');
    for (let i = 0; i < 20; i++)
      await raw.publish(CHANNEL, JSON.stringify({ v: 1, origin: 'intruder', event: 'notification:push', payload: { title: 'hunter2-unsigned' } }));
    for (let i = 0; i < 5; i++)
      await raw.publish(
        CHANNEL,
        sealMessage(key, CHANNEL, envelope({ event: 'auth:credentials_revoked', payload: { user_id: 'u1', password: 'hunter2-signed' } })),
      );
    await eventually(() => expect(c.bridge.stats.dropped).to.equal(25), 2000);
    const lines = c.log.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'bus bridge: message dropped');
    expect(lines.map((l) => l.reason)).to.deep.equal(['unsigned', 'invalid_payload']);
    expect(lines[0]).not.to.have.property('event'); // nothing of an unsigned message is believed, its event name neither
    expect(lines[1]).to.include({ event: 'auth:credentials_revoked', problem: 'password: object.unknown' });
    expect(c.log.text()).not.to.include('hunter2');
    await c.bridge.close();
  });
});
