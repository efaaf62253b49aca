import type http from 'node:http';
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AddressInfo } from 'node:net';
import type Router from '@koa/router';
import type Koa from 'koa';
import type { Config } from './config.js';
import { createLogger, type Logger } from './log.js';
import { EventBus } from './bus/bus.js';
import type { DatabaseRelayReader } from './bus/database-relay.js';
import type { RedisBridge } from './bus/redis-bridge.js';
import { newInstanceId, PLUGIN_EVENT_SCHEMA } from './bus/cluster.js';
import { createDb, DbHealth, dbErrorText, dialectOf, probeDb, type Knex } from './db/knex.js';
import { createDatabaseHint, isMissingDatabase } from './db/create-database.js';
import { VERSION } from './version.js';
import { createHttpApp, mountRouters, type BootState } from './http/app.js';
import { drain, drainableServer, LISTEN_BACKLOG, STOP_GRACE_MS, STOP_IDLE_MS, type DrainTimes } from './http/drain.js';
import { webSessionMiddleware } from './auth/web-session.js';
import type { IamComponent } from './iam/component.js';
import type { AuthComponent } from './auth/component.js';
import { buildCore } from './core.js';
import { accessView, meRoutes } from './auth/routes/me.js';
import { userCredentialRoutes } from './auth/routes/user-credentials.js';
import { mfaRoutes } from './auth/routes/mfa.js';
import { webauthnRoutes } from './auth/routes/webauthn.js';
import { reachesHost, type Actor } from './iam/policy.js';
import { SecretKeyMismatch } from './iam/master-key.js';

const isActor = (v: object): v is Actor => typeof (v as Actor).username === 'string' && typeof (v as Actor).isSystem === 'boolean';

import { userRoutes } from './iam/routes/users.js';
import { groupRoutes } from './iam/routes/groups.js';
import { auditRoutes } from './iam/routes/audit.js';
import { systemKeyRoutes } from './auth/routes/system-key.js';
import { authRoutes } from './auth/routes/login.js';
import { oidcRoutes } from './auth/routes/oidc.js';
import { authSettingsRoutes } from './auth/routes/auth-settings.js';
import { openApiDocument, webRouters, type ExtraEndpoints } from './web/routes.js';
import { SocketsComponent } from './sockets/component.js';
import { Metrics } from './http/metrics.js';
import type { NotificationsComponent } from './notifications/component.js';
import { GatewayComponent } from './gateway/component.js';
import type { GatewayOptions } from './gateway/gateway.js';
import { PluginHost } from './plugins/host.js';
import { errorPage } from './web/error-page.js';
import { pluginAdminRoutes } from './plugins/routes.js';

/**
 * The composition root: takes the core (src/core.ts, shared with the CLI), builds the parts
 * that serve (HTTP, ws, sockets, plugins), wires them through the bus, and runs the boot order
 * (docs/architecture.md).
 */
export interface ServiceOptions {
  logger?: Logger;
  /** first delay of the database connect retry (doubles up to 10 s) */
  dbRetryMs?: number;
  /** ws gateway tuning (heartbeat, buffers); tests shorten the heartbeat */
  gateway?: Partial<GatewayOptions>;
}

export class Service {
  readonly log: Logger;
  readonly bus: EventBus;
  readonly db: Knex;
  readonly state: BootState = { iamReady: false, bootComplete: false, bootError: null, stopping: false, dbError: null };
  readonly iam: IamComponent;
  readonly auth: AuthComponent;
  readonly sockets: SocketsComponent;
  readonly metrics = new Metrics();
  readonly notifications: NotificationsComponent;
  readonly gateway: GatewayComponent;
  readonly plugins: PluginHost;
  readonly app: Koa;
  readonly server: http.Server;
  /** this instance's name (bus messages, provider lists) */
  readonly instanceId = newInstanceId(os.hostname());
  /** the bus bridge to the other instances (SERVICE_REDIS_URL; made at start), or null for one instance */
  bridge: RedisBridge | null = null;
  /** without SERVICE_REDIS_URL: what the CLI announces through the database (made at boot) */
  relay: DatabaseRelayReader | null = null;
  private bootPromise: Promise<void> | null = null;
  private stopped = false;
  private stopping: Promise<void> | null = null;
  private connectAbort = new AbortController();

  constructor(
    readonly config: Config,
    private readonly opts: ServiceOptions = {},
  ) {
    this.log = opts.logger ?? createLogger(config.logLevel);
    this.bus = new EventBus(this.log.child({ component: 'bus' }));
    this.db = createDb(config, this.log);
    ({
      iam: this.iam,
      auth: this.auth,
      notifications: this.notifications,
    } = buildCore({
      config,
      db: this.db,
      bus: this.bus,
      log: this.log,
      instanceId: this.instanceId,
    }));
    this.sockets = new SocketsComponent({
      config,
      db: this.db,
      bus: this.bus,
      log: this.log.child({ component: 'sockets' }),
      instanceId: this.instanceId,
      // an operation that reaches the host, from a web session with a second factor: step-up
      // (a caller that is no actor is a plugin's or the core's own request on the bus)
      stepUp: (caller, permissions) => (permissions.some(reachesHost) && caller && isActor(caller) ? this.auth.secondStep.require(caller) : Promise.resolve()),
      // who did what on the host (a request on the bus: the core or a plugin)
      record: (e) => {
        const actor =
          e.trusted || !e.caller || !isActor(e.caller)
            ? { user_id: null, username: e.trusted ? 'bus' : 'anonymous', method: e.trusted ? 'bus' : null, ip: null }
            : e.caller;
        // a refusal repeated by the same caller is coalesced by the trail (one event with its count)
        this.iam.commands.record({
          action: 'socket.operation',
          actor,
          target: { type: 'socket', id: e.operation, name: e.provider },
          outcome: e.outcome,
          details: { args: e.args, ...(e.error ? { error: e.error.code } : {}) },
        });
      },
    });

    this.app = createHttpApp({
      log: this.log.child({ component: 'http' }),
      state: this.state,
      keys: [config.secretKey],
      metrics: this.metrics,
      proxyHops: config.proxyHops,
      secureCookies: config.publicUrl.startsWith('https:'),
      version: VERSION,
      database: new DbHealth(this.db),
      errorPage: (ctx, status, error) => errorPage(ctx, status, error, config.publicUrl),
    });
    // kept in a variable: the ws gateway reads the cookie session with it
    const sessions = webSessionMiddleware(this.app, this.db, { ttlMs: config.sessionTtlMs, secure: config.publicUrl.startsWith('https:') });
    // the cookie session (only when the request carries one) and then the identity, in one step
    const identify = this.auth.middleware();
    this.app.use((ctx, next) => sessions(ctx, () => identify(ctx, next)));
    this.gateway = new GatewayComponent({
      oneTime: this.auth.oneTime,
      bus: this.bus,
      log: this.log.child({ component: 'gateway' }),
      state: this.state,
      auth: this.auth.authenticator,
      app: this.app,
      sessionMiddleware: sessions,
      // the system key's (and a superadmin's) welcome lists what /api/me/access lists
      allPermissions: (id) => accessView(this.auth, id).permissions,
      mustEnrol: (id) => this.auth.mustEnrol(id),
      // a frame refused to its caller is a denied event, as a refused request is
      refused: (actor, event, err) => this.iam.commands.refused({ action: 'request.denied', actor, target: { type: 'frame', id: event, name: null } }, err),
      options: { maxConnectionsPerUser: config.wsMaxConnectionsPerUser, ...opts.gateway },
    });
    // the areas that reach ws clients plug into the gateway (it knows none of them)
    this.notifications.attachChannels(this.gateway.gateway);
    this.sockets.attachChannels(this.gateway.gateway);
    this.metrics.gauge('ws_connections', 'open WebSocket connections', () => this.gateway.gateway.connectionCount);
    this.metrics.gauge('notifications_written', 'notifications this instance committed since it started', () => this.notifications.service.stats.notifications);
    this.metrics.gauge('notification_write_batches', 'group-commit transactions that wrote them', () => this.notifications.service.stats.batches);
    // the directory recheck (src/auth/directory-recheck.ts)
    const recheck = this.auth.directoryRecheck.stats;
    this.metrics.gauge('ldap_directory_up', '0 after a directory account recheck the directory did not answer, until one it answers', () =>
      recheck.directoryUp ? 1 : 0,
    );
    this.metrics.countersOf(
      'ldap_recheck_rounds_total',
      'directory account recheck rounds: checked, unavailable (nothing ended), skipped (another instance had the round), suspect (nobody found: nothing ended)',
      'outcome',
      () => recheck.rounds,
    );
    this.metrics.countersOf(
      'ldap_recheck_accounts_ended_total',
      'users whose sessions and keys the recheck revoked, by what the directory said of the account',
      'state',
      () => recheck.ended,
    );
    if (config.redisUrl) {
      this.metrics.gauge('bus_bridge_up', '1 while the Redis link to the other instances is up', () => (this.bridge?.isUp ? 1 : 0));
      this.metrics.gauge('bus_bridge_messages_dropped', 'malformed or foreign bus messages dropped', () => this.bridge?.stats.dropped ?? 0);
      this.metrics.countersOf(
        'service_bus_messages_dropped_total',
        'bus messages from Redis dropped: unsigned, badly signed, stale, replayed, unknown or invalid',
        'reason',
        () => this.bridge?.stats.droppedBy ?? {},
      );
    }
    // the access-management API, the login and session API, the pages; then the other areas
    const auth = this.auth;
    const routers: Router[] = [
      meRoutes(auth),
      userRoutes(this.iam, { noPasswordWarning: (user) => auth.noPasswordWarning(user) }),
      userCredentialRoutes(auth),
      mfaRoutes(auth),
      webauthnRoutes(auth),
      groupRoutes(this.iam),
      auditRoutes(this.iam),
      systemKeyRoutes(auth),
      authRoutes(auth),
      oidcRoutes(auth),
      authSettingsRoutes(auth),
      ...webRouters(auth, this.extraEndpoints),
      ...this.sockets.routers(),
      ...this.notifications.routers(),
      ...this.gateway.routers(),
    ];
    // plugin host: its admin API first, then the one dispatch middleware of every
    // plugin's routes under /api/plugins/<id>/ (a disabled plugin's routes vanish at once)
    this.plugins = new PluginHost({
      pluginsDir: config.pluginsDir,
      db: this.db,
      bus: this.bus,
      log: this.log.child({ component: 'plugins' }),
      iam: this.iam,
      sockets: this.sockets,
      authChain: this.auth.chain,
      env: config.pluginEnv, // SERVICE_PLUGIN_<ID>_<KEY> settings
      instanceId: this.instanceId,
      clientEvents: {
        forward: (topic, permission) => this.gateway.forward(topic, { permission }),
        clusterWide: (topic) => this.bridge?.declare(topic, PLUGIN_EVENT_SCHEMA),
      },
    });
    // every area's routes in one router, then the one dispatch of every plugin's routes
    mountRouters(this.app, [...routers, pluginAdminRoutes(this.plugins)]);
    this.app.use(this.plugins.middleware());
    // once stopping, every answer closes its connection (src/http/drain.ts)
    this.server = drainableServer(this.app.callback(), () => this.state.stopping);
    this.gateway.attach(this.server); // /ws upgrades
    this.server.headersTimeout = 20_000;
    this.server.requestTimeout = 60_000;

    this.bus.on('iam:ready', () => {
      this.state.iamReady = true;
    });
    this.bus.on('system:boot_complete', () => {
      this.state.bootComplete = true;
    });
    this.bus.on('system:boot_failed', ({ stage, error }) => {
      this.state.bootError = `${stage}: ${error}`;
      this.log.error({ stage, error }, 'boot failed');
    });
  }

  /** Routes that come and go with plugins and socket providers (the API document's moving part). */
  private readonly extraEndpoints: ExtraEndpoints = () => [this.plugins.documentedRoutes(), this.sockets.documentedRoutes()];

  /** The OpenAPI document served at /openapi.json, as it is now (plugins and providers included). */
  openApiDocument(): string {
    return openApiDocument(this.app, this.extraEndpoints);
  }

  get url(): string {
    const addr = this.server.address() as AddressInfo | null;
    if (!addr) throw new Error('service is not listening');
    return `http://127.0.0.1:${addr.port}`;
  }

  /** Listens at once, then boots in the background; `booted()` waits for the end of boot. */
  async start(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen({ port: this.config.port, host: this.config.host, backlog: LISTEN_BACKLOG }, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.log.info({ url: this.config.publicUrl, port: (this.server.address() as AddressInfo).port, instance: this.instanceId }, 'listening');
    // Redis may come later (or go): boot and requests never wait for it (ioredis is loaded only when used)
    if (this.config.redisUrl) {
      const { RedisBridge } = await import('./bus/redis-bridge.js');
      this.bridge = new RedisBridge({
        url: this.config.redisUrl,
        bus: this.bus,
        log: this.log.child({ component: 'bus-bridge' }),
        secretKey: this.config.secretKey,
        instanceId: this.instanceId,
      });
      this.bridge.start();
    }
    this.bootPromise = this.boot();
    this.bootPromise.catch((err) => this.log.error({ err }, 'boot aborted'));
  }

  /** Resolves at system:boot_complete; rejects when boot fails for good. */
  booted(): Promise<void> {
    if (!this.bootPromise) return Promise.reject(new Error('service not started'));
    return this.bootPromise;
  }

  private async boot(): Promise<void> {
    const dialect = dialectOf(this.config);
    await this.connectWithRetry();
    if (this.stopped) return;
    // IAM starts its migrations and seeding at db:connected; then the credentials on the model
    // (settings, login chain)
    this.bus.emit('db:connected', { dialect });
    try {
      await this.iam.initialised();
      // without Redis, what the CLI announces is read from here on (the table exists once migrated):
      // before the API opens at iam:ready, so nothing changed after that moment is missed
      if (!this.config.redisUrl && !this.stopped) {
        const { DatabaseRelayReader } = await import('./bus/database-relay.js');
        this.relay = new DatabaseRelayReader({ db: this.db, bus: this.bus, origin: this.instanceId, log: this.log.child({ component: 'bus-relay' }) });
        await this.relay.start();
      }
      await this.auth.init();
    } catch (err) {
      this.log.error({ err }, 'IAM initialisation failed');
      // with another master key this instance can neither verify the others' bus messages nor sign its own for them
      if (err instanceof SecretKeyMismatch) await this.bridge?.close();
      this.bus.emit('system:boot_failed', { stage: 'iam', error: (err as Error).message });
      throw new Error(`iam: ${(err as Error).message}`);
    }
    this.bus.emit('iam:ready', { providers: this.auth.chain.providers().map((p) => p.id) });
    // the built-in providers are registered before plugins boot; their permissions (a gRPC
    // daemon's methods) can be granted while they are registered
    const { registry } = this.sockets;
    // a plugin's provider declares its permissions in its manifest
    const providerCatalog = () =>
      this.iam.setProviderCatalog(registry.names().flatMap((n) => (registry.ownerOf(n) === 'core' ? (registry.get(n)?.permissions() ?? []) : [])));
    this.bus.on('socket:providers_changed', (e) => (e.instance === registry.instance ? providerCatalog() : undefined));
    this.sockets.registerBuiltins();
    providerCatalog();
    // plugins load after the built-in providers and before boot_complete
    const plugins = await this.plugins.loadAll();
    // the plugins' grants are in place before anyone is told the service is ready
    await this.iam.ledger.applyAll();
    this.bus.emit('system:boot_complete', { plugins });
  }

  private async connectWithRetry(): Promise<void> {
    let delay = this.opts.dbRetryMs ?? 500;
    for (let attempt = 1; !this.stopped; attempt++) {
      try {
        await probeDb(this.db, this.config);
        this.state.dbError = null;
        if (attempt > 1) this.log.info({ attempt }, 'database reachable');
        return;
      } catch (err) {
        // the message only, without the URL's password; /readyz shows it too
        const reason = dbErrorText(err, this.config.databaseUrl);
        this.state.dbError = reason;
        // a missing database never appears by waiting: say how to make it
        const hint = isMissingDatabase(err) ? { hint: createDatabaseHint(this.config.databaseUrl!) } : {};
        this.log.warn({ attempt, reason, retry_in_ms: delay, ...hint }, 'database unreachable, retrying');
        // a stop ends the wait (an AbortError, swallowed: the loop then ends)
        await sleep(delay, undefined, { signal: this.connectAbort.signal }).catch(() => undefined);
        delay = Math.min(delay * 2, 10_000);
      }
    }
  }

  /**
   * Closes the WebSocket connections, then stops accepting; answers every request that reaches
   * it, with `Connection: close`; leaves idle connections to their peer for `idleMs` (a balancer may be
   * writing a request onto one); at `graceMs` refuses (503) what is still to run or reach it, and
   * cuts what is left `refuseMs` later (src/http/drain.ts); then closes everything.
   */
  stop(times: Partial<DrainTimes> = {}): Promise<void> {
    // a second call waits for the first stop instead of answering before it is done
    return (this.stopping ??= this.stopOnce(times));
  }

  private async stopOnce(times: Partial<DrainTimes>): Promise<void> {
    this.stopped = true;
    this.state.stopping = true;
    this.connectAbort.abort();
    const graceMs = times.graceMs ?? STOP_GRACE_MS;
    // upgraded sockets would keep the drain waiting; they are also most of a loaded loop's work,
    // so the drain keeps listening until they are closed (src/http/drain.ts)
    const wsClosed = this.gateway.close();
    const refuse = () => {
      // too loaded to finish within the grace: answer what is left rather than have it cut
      this.log.warn({ grace_ms: graceMs }, 'stop: the grace ran out; refusing what has not run yet');
      this.state.refusing = true;
      this.notifications.refuseWrites();
    };
    const drained = drain(this.server, { ...times, graceMs, idleMs: times.idleMs ?? Math.min(STOP_IDLE_MS, graceMs) }, refuse, wsClosed);
    // a gateway that failed to close still leaves the drain to finish what it holds
    const [closing] = await Promise.allSettled([wsClosed]);
    if (closing.status === 'rejected') this.log.error({ err: closing.reason }, 'stop: closing the WebSocket connections failed');
    await drained;
    this.relay?.stop(); // the requests in flight saw what the CLI changed; nothing relayed reaches the parts as they stop
    this.auth.stop();
    await this.iam.stop();
    await this.plugins.close(); // plugin teardown before the registry closes their providers
    await this.notifications.stop(); // after plugin teardown (it may notify); lets in-flight writes commit
    await this.sockets.close();
    await this.bridge?.close();
    this.bus.removeAll();
    await this.db.destroy();
  }
}
