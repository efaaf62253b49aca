import { Redis } from 'ioredis';
import type Joi from 'joi';
import type { Logger } from '../log.js';
import type { EventBus } from './bus.js';
import { CLUSTER_EVENTS, type EventName } from './events.js';

/** Messages larger than this are dropped on arrival (a notification is at most a few KiB). */
const MAX_MESSAGE_BYTES = 512 * 1024;

export interface RedisBridgeOptions {
  url: string;
  bus: EventBus;
  log: Logger;
  /** this instance's name in messages; messages carrying it are its own and never emitted again */
  instanceId: string;
  /** the pub/sub channel; instances of one deployment share it */
  channel?: string;
}

interface Envelope {
  v: 1;
  origin: string;
  event: string;
  payload: unknown;
}

/**
 * Carries the cluster-wide bus events (CLUSTER_EVENTS, plus what plugins declare) between
 * instances over Redis pub/sub: an event emitted here is published once; a message from another
 * instance is validated and emitted here once, never published again (no echo). Redis being
 * down never fails a request: publishing is skipped while the link is down, and when it comes
 * back `bus:bridge_state {up: true}` tells the areas to catch up from the database.
 */
export class RedisBridge {
  readonly channel: string;
  private readonly pub: Redis;
  private readonly sub: Redis;
  private readonly schemas = new Map<string, Joi.Schema>();
  private readonly detach: Array<() => void> = [];
  /** set while a message from another instance is emitted here: nothing is published then */
  private injecting = false;
  private up = false;
  private closed = false;
  /** publishes not yet acknowledged by Redis (close() waits for them briefly) */
  private readonly inFlight = new Set<Promise<unknown>>();
  /** counters for /metrics and tests */
  readonly stats = { published: 0, received: 0, dropped: 0, skipped: 0 };

  constructor(private readonly opts: RedisBridgeOptions) {
    this.channel = opts.channel ?? 'service-core:bus';
    const common = {
      lazyConnect: true,
      // reconnect forever, at most every 2 s
      retryStrategy: (times: number) => Math.min(100 * times, 2000),
      maxRetriesPerRequest: 1,
    };
    // no offline queue: while the link is down a publish fails at once instead of piling up
    this.pub = new Redis(opts.url, { ...common, enableOfflineQueue: false, connectionName: `${opts.instanceId}:pub` });
    this.sub = new Redis(opts.url, { ...common, connectionName: `${opts.instanceId}:sub` });
    for (const [event, schema] of Object.entries(CLUSTER_EVENTS)) this.declare(event, schema!);
    for (const c of [this.pub, this.sub]) {
      c.on('ready', () => this.updateState());
      c.on('close', () => this.updateState());
      c.on('end', () => this.updateState());
      // connection errors are reported once per state change (updateState), not per retry
      c.on('error', () => undefined);
    }
    this.sub.on('message', (channel: string, message: string) => {
      if (channel === this.channel) this.receive(message);
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
    const message: Envelope = { v: 1, origin: this.opts.instanceId, event, payload };
    this.stats.published++;
    const sent = this.pub.publish(this.channel, JSON.stringify(message)).catch(() => {
      this.stats.skipped++;
    });
    this.inFlight.add(sent);
    void sent.finally(() => this.inFlight.delete(sent));
  }

  private receive(message: string): void {
    if (message.length > MAX_MESSAGE_BYTES) return this.drop('too large', null);
    let env: Envelope;
    try {
      env = JSON.parse(message) as Envelope;
    } catch {
      return this.drop('not JSON', null);
    }
    if (typeof env !== 'object' || env === null || env.v !== 1 || typeof env.origin !== 'string' || typeof env.event !== 'string') return this.drop('not an envelope', null);
    if (env.origin === this.opts.instanceId) return; // our own, back from Redis
    const schema = this.schemas.get(env.event);
    if (!schema) return this.drop('not a cluster-wide event here', env.event);
    const { value, error } = schema.validate(env.payload, { convert: false });
    if (error) return this.drop(error.message, env.event);
    this.stats.received++;
    this.injecting = true;
    try {
      this.opts.bus.emit(env.event as EventName, value as never);
    } finally {
      this.injecting = false;
    }
  }

  private drop(reason: string, event: string | null): void {
    this.stats.dropped++;
    this.opts.log.warn({ reason, event }, 'bus bridge: message dropped');
  }

  private updateState(): void {
    const up = !this.closed && this.pub.status === 'ready' && this.sub.status === 'ready';
    if (up === this.up) return;
    this.up = up;
    if (up) this.opts.log.info({ channel: this.channel }, 'bus bridge up');
    else if (!this.closed) this.opts.log.warn({ channel: this.channel }, 'bus bridge down: live pushes from other instances pause');
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
    this.pub.disconnect();
    this.sub.disconnect();
  }
}
