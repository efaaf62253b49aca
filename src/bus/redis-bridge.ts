import crypto from 'node:crypto';
import { Redis } from 'ioredis';
import type Joi from 'joi';
import type { Logger } from '../log.js';
import type { EventBus } from './bus.js';
import { fieldPath } from '../errors.js';
import { CLUSTER_EVENTS, type EventName } from './events.js';

/** Messages larger than this are dropped on arrival (a notification is at most a few KiB). */
const MAX_MESSAGE_BYTES = 512 * 1024;
/** How far a message's timestamp may lie from this instance's clock, either way. */
export const FRESHNESS_MS = 30_000;
/** Message ids remembered against replays at most (the ones of the last FRESHNESS_MS, normally). */
const MAX_SEEN = 100_000;
/** One log line per drop reason at most this often; the metric counts every drop. */
const DROP_LOG_EVERY_MS = 10_000;

/** The start of every message: the format's version, then the MAC, then the envelope. */
const PREFIX = Buffer.from('sc-bus-v2.');
/** base64url of an HMAC-SHA256 */
const MAC_CHARS = 43;

/** Why a message was dropped (the `reason` label of service_bus_messages_dropped_total). */
export const DROP_REASONS = ['unsigned', 'bad_signature', 'too_large', 'malformed', 'stale', 'replayed', 'unknown_event', 'invalid_payload'] as const;
export type DropReason = (typeof DROP_REASONS)[number];

export interface RedisBridgeOptions {
  /** redis:// or rediss:// (TLS), with a user and password when Redis asks for them */
  url: string;
  bus: EventBus;
  log: Logger;
  /** the service's master key (SERVICE_SECRET_KEY): the bus key is derived from it */
  secretKey: string;
  /** this instance's name in messages; messages carrying it are its own and never emitted again */
  instanceId: string;
  /** the pub/sub channel; instances of one deployment share it (default: busChannel() of the URL's database) */
  channel?: string;
  /** how old (or how far ahead) a message may be (default FRESHNESS_MS) */
  freshnessMs?: number;
  /** how many message ids are remembered against replays at most (default MAX_SEEN) */
  maxSeen?: number;
}

/** What a message carries once its MAC is verified. */
export interface Envelope {
  v: 2;
  /** unique per message: a second message with the same id is a replay */
  id: string;
  /** when it was sent (ms since the epoch, the sender's clock) */
  ts: number;
  origin: string;
  event: string;
  payload: Record<string, unknown>;
}

/**
 * The MAC key of the bus: derived from the master key under a label of its own, so it is good for
 * nothing else (the secrets store and one-time values derive theirs under other labels).
 */
export function busKey(secretKey: string): Buffer {
  return Buffer.from(crypto.hkdfSync('sha256', secretKey, 'service-core bus v2', 'hmac-sha256 envelope', 32));
}

function macOf(key: Buffer, channel: string, body: Buffer): Buffer {
  // the channel is signed too: a message is good only on the channel it was sent to
  return Buffer.from(crypto.createHmac('sha256', key).update(channel).update('\n').update(body).digest('base64url'));
}

/** One message on the wire: `sc-bus-v2.<MAC>.<envelope JSON>`, the MAC over the channel and those very bytes. */
export function sealMessage(key: Buffer, channel: string, envelope: Envelope): Buffer {
  const body = Buffer.from(JSON.stringify(envelope));
  return Buffer.concat([PREFIX, macOf(key, channel, body), Buffer.from('.'), body]);
}

/** The envelope's bytes when the MAC is good (compared in constant time), else why not. Nothing is parsed before. */
export function openMessage(key: Buffer, channel: string, message: Buffer): Buffer | 'unsigned' | 'bad_signature' {
  if (message.length < PREFIX.length || !message.subarray(0, PREFIX.length).equals(PREFIX)) return 'unsigned';
  const macEnd = PREFIX.length + MAC_CHARS;
  if (message.length <= macEnd || message[macEnd] !== 0x2e /* . */) return 'bad_signature';
  const body = message.subarray(macEnd + 1);
  const expected = macOf(key, channel, body);
  return crypto.timingSafeEqual(message.subarray(PREFIX.length, macEnd), expected) ? body : 'bad_signature';
}

function isEnvelope(v: unknown): v is Envelope {
  if (typeof v !== 'object' || v === null) return false;
  const e = v as Record<string, unknown>;
  return (
    e.v === 2 &&
    typeof e.id === 'string' &&
    /^[0-9a-f]{32}$/.test(e.id) &&
    Number.isSafeInteger(e.ts) &&
    typeof e.origin === 'string' &&
    typeof e.event === 'string' &&
    typeof e.payload === 'object' &&
    e.payload !== null &&
    !Array.isArray(e.payload)
  );
}

/**
 * The ids of the messages accepted within the freshness window, so that a second copy of one is
 * refused. Bounded: past `max` ids the oldest is forgotten and its timestamp becomes a floor, and
 * a message not newer than the floor is refused as well (it could be a copy of a forgotten one).
 * Ids older than the window go too (a copy of one is stale anyway), and also raise the floor,
 * so a clock stepped back does not make them new again.
 */
export class SeenIds {
  private readonly ids = new Map<string, number>();
  private floor = -Infinity;

  constructor(
    private readonly windowMs: number,
    private readonly max: number,
  ) {}

  get size(): number {
    return this.ids.size;
  }

  /** Records `id`; false when it was seen (or may have been). */
  remember(id: string, ts: number, now: number): boolean {
    for (const [old, oldTs] of this.ids) {
      if (oldTs >= now - this.windowMs) break;
      this.forget(old, oldTs);
    }
    if (ts <= this.floor || this.ids.has(id)) return false;
    this.ids.set(id, ts);
    while (this.ids.size > this.max) {
      const [old, oldTs] = this.ids.entries().next().value as [string, number];
      this.forget(old, oldTs);
    }
    return true;
  }

  private forget(id: string, ts: number): void {
    this.ids.delete(id);
    if (ts > this.floor) this.floor = ts;
  }
}

/** The Redis URL as logs may show it: never its password. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}

/**
 * The channel of the deployment whose Redis database is `db`: pub/sub ignores database numbers
 * (a message published in one reaches subscribers in every other), so the number is in the
 * name. Database 0 keeps the name the bus always had.
 */
export const busChannel = (db: number): string => (db ? `service-core:bus:${db}` : 'service-core:bus');

/**
 * Carries the cluster-wide bus events (CLUSTER_EVENTS, plus what plugins declare) between
 * instances over Redis pub/sub: an event emitted here is published once; a message from another
 * instance is verified, validated and emitted here once, never published again (no echo). Redis
 * being down never fails a request: publishing is skipped while the link is down, and when it
 * comes back `bus:bridge_state {up: true}` tells the areas to catch up from the database.
 *
 * Nothing on the channel is trusted for having reached it: every message carries an HMAC-SHA256
 * under a key derived from the master key, a timestamp and a unique id. A message is dropped,
 * counted (`stats.droppedBy`) and logged (at most once per reason every 10 s, never its payload)
 * when it is unsigned or badly signed (checked before anything of it is parsed), older or newer
 * than the freshness window, a copy of one already taken, for an event that is not cluster-wide
 * here, or when its payload does not match the event's schema exactly (no unknown fields).
 */
export class RedisBridge {
  readonly channel: string;
  private readonly pub: Redis;
  private readonly sub: Redis;
  private readonly key: Buffer;
  private readonly schemas = new Map<string, Joi.Schema>();
  private readonly detach: Array<() => void> = [];
  private readonly seen: SeenIds;
  private readonly freshnessMs: number;
  /** the last drop logged per reason, and how many were not logged since */
  private readonly dropLog = new Map<DropReason, { at: number; unlogged: number }>();
  /** set while a message from another instance is emitted here: nothing is published then */
  private injecting = false;
  private up = false;
  private closed = false;
  /** a connection problem was logged since the link was last up */
  private problemLogged = false;
  private lastError: string | null = null;
  /** publishes not yet acknowledged by Redis (close() waits for them briefly) */
  private readonly inFlight = new Set<Promise<unknown>>();
  /** counters for /metrics and tests */
  readonly stats = {
    published: 0,
    received: 0,
    /** every message dropped, whatever the reason */
    dropped: 0,
    skipped: 0,
    droppedBy: Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>,
  };

  constructor(private readonly opts: RedisBridgeOptions) {
    this.key = busKey(opts.secretKey);
    this.freshnessMs = opts.freshnessMs ?? FRESHNESS_MS;
    this.seen = new SeenIds(this.freshnessMs, opts.maxSeen ?? MAX_SEEN);
    const common = {
      lazyConnect: true,
      // reconnect forever, at most every 2 s
      retryStrategy: (times: number) => Math.min(100 * times, 2000),
      maxRetriesPerRequest: 1,
    };
    // ioredis reads the user, password, database and TLS (rediss://) from the URL itself;
    // no offline queue: while the link is down a publish fails at once instead of piling up
    this.pub = new Redis(opts.url, { ...common, enableOfflineQueue: false, connectionName: `${opts.instanceId}:pub` });
    this.sub = new Redis(opts.url, { ...common, connectionName: `${opts.instanceId}:sub` });
    this.channel = opts.channel ?? busChannel(this.sub.options.db ?? 0);
    for (const [event, schema] of Object.entries(CLUSTER_EVENTS)) this.declare(event, schema!);
    for (const c of [this.pub, this.sub]) {
      c.on('ready', () => this.updateState());
      c.on('close', () => this.updateState());
      c.on('end', () => this.updateState());
      // connection errors are reported once until the link is up again, not per retry
      c.on('error', (err: Error) => this.connectionProblem(err));
    }
    this.sub.on('messageBuffer', (channel: Buffer, message: Buffer) => {
      if (channel.toString() === this.channel) this.receive(message);
    });
  }

  get isUp(): boolean {
    return this.up;
  }

  /** Starts connecting; boot does not wait for Redis (the state event says when it is up). */
  start(): void {
    void this.pub.connect().catch(() => undefined);
    void this.sub.connect().then(
      () => this.sub.subscribe(this.channel),
      () => undefined,
    );
  }

  /** Makes one more event cluster-wide (a plugin's client event), validated by `schema` on arrival. */
  declare(event: string, schema: Joi.Schema): void {
    if (this.schemas.has(event)) return;
    this.schemas.set(event, schema);
    this.detach.push(this.opts.bus.on(event as EventName, (payload) => this.publish(event, payload)));
  }

  private publish(event: string, payload: unknown): void {
    if (this.injecting) return;
    if (!this.up) {
      this.stats.skipped++;
      return;
    }
    const envelope: Envelope = {
      v: 2,
      id: crypto.randomBytes(16).toString('hex'),
      ts: Date.now(),
      origin: this.opts.instanceId,
      event,
      payload: payload as Record<string, unknown>,
    };
    this.stats.published++;
    const sent = this.pub.publish(this.channel, sealMessage(this.key, this.channel, envelope)).catch(() => {
      this.stats.skipped++;
    });
    this.inFlight.add(sent);
    void sent.finally(() => this.inFlight.delete(sent));
  }

  private receive(message: Buffer): void {
    if (message.length > MAX_MESSAGE_BYTES) return this.drop('too_large');
    // the MAC first: nothing of an unverified message is parsed, let alone believed
    const body = openMessage(this.key, this.channel, message);
    if (typeof body === 'string') return this.drop(body);
    let env: unknown;
    try {
      env = JSON.parse(body.toString('utf8'));
    } catch {
      return this.drop('malformed');
    }
    if (!isEnvelope(env)) return this.drop('malformed');
    if (env.origin === this.opts.instanceId) return; // our own, back from Redis
    const now = Date.now();
    if (Math.abs(now - env.ts) > this.freshnessMs) return this.drop('stale', env.event);
    if (!this.seen.remember(env.id, env.ts, now)) return this.drop('replayed', env.event);
    const schema = this.schemas.get(env.event);
    if (!schema) return this.drop('unknown_event', env.event);
    // exactly the event's fields (a schema that means to take any, a plugin's event, says so itself)
    const { value, error } = schema.validate(env.payload, { convert: false, allowUnknown: false, stripUnknown: false, presence: 'optional' });
    if (error) return this.drop('invalid_payload', env.event, error.details.map((d) => `${fieldPath(d.path) || 'payload'}: ${d.type}`).join('; '));
    this.stats.received++;
    this.injecting = true;
    try {
      this.opts.bus.emit(env.event as EventName, value as never);
    } finally {
      this.injecting = false;
    }
  }

  private drop(reason: DropReason, event?: string, problem?: string): void {
    this.stats.dropped++;
    this.stats.droppedBy[reason]++;
    const now = Date.now();
    const last = this.dropLog.get(reason);
    if (last && now - last.at < DROP_LOG_EVERY_MS) {
      last.unlogged++;
      return;
    }
    this.dropLog.set(reason, { at: now, unlogged: 0 });
    // the event name only once the MAC is good; never the payload
    const line: Record<string, unknown> = { reason, channel: this.channel };
    if (event !== undefined) line.event = event;
    if (problem !== undefined) line.problem = problem;
    if (last?.unlogged) line.also_dropped_since_last_line = last.unlogged;
    if (reason === 'bad_signature') line.hint = 'every instance (and the CLI) must have the same SERVICE_SECRET_KEY';
    this.opts.log.warn(line, 'bus bridge: message dropped');
  }

  private connectionProblem(err: Error): void {
    this.lastError = this.scrub(err.message);
    if (this.closed || this.up || this.problemLogged) return;
    this.problemLogged = true;
    this.opts.log.warn({ channel: this.channel, redis: redactRedisUrl(this.opts.url), error: this.lastError }, 'bus bridge cannot reach Redis: retrying');
  }

  /** An error message as it may be logged: never the URL's password, whatever the client put in it. */
  private scrub(message: string): string {
    let password = '';
    try {
      password = decodeURIComponent(new URL(this.opts.url).password);
    } catch {
      // an unparsable URL never connects: nothing of it is in the message
    }
    return password ? message.split(password).join('***') : message;
  }

  private updateState(): void {
    const up = !this.closed && this.pub.status === 'ready' && this.sub.status === 'ready';
    if (up === this.up) return;
    this.up = up;
    if (up) {
      this.problemLogged = false;
      this.lastError = null;
      this.opts.log.info({ channel: this.channel, redis: redactRedisUrl(this.opts.url) }, 'bus bridge up');
    } else if (!this.closed) {
      // the reconnect errors that follow are this outage's: not logged again
      this.problemLogged = true;
      this.opts.log.warn({ channel: this.channel, error: this.lastError ?? undefined }, 'bus bridge down: live pushes from other instances pause');
    }
    this.opts.bus.emit('bus:bridge_state', { up });
  }

  /** Stops relaying; what was published and not yet sent gets up to a second to leave. */
  async close(): Promise<void> {
    this.closed = true;
    for (const off of this.detach.splice(0)) off();
    if (this.inFlight.size) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([Promise.allSettled([...this.inFlight]), new Promise((r) => (timer = setTimeout(r, 1000)))]);
      clearTimeout(timer);
    }
    this.up = false;
    for (const c of [this.pub, this.sub]) {
      // a TLS connection torn down mid-handshake can still report its failure, a second time, on
      // its socket (which ioredis listens to once): nobody waits for it any more, and unheard it
      // would end the process
      (c as unknown as { stream?: NodeJS.EventEmitter }).stream?.on('error', () => undefined);
      c.disconnect();
    }
  }
}
