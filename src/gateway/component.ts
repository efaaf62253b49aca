import type Router from '@koa/router';
import type http from 'node:http';
import type Koa from 'koa';
import type { Knex } from 'knex';
import type { Authenticator } from '../auth/authenticate.js';
import type { EventBus } from '../bus/bus.js';
import type { Logger } from '../log.js';
import { Gateway, type GatewayOptions, type NotificationFeed } from './gateway.js';
import { WsTickets } from './tickets.js';
import { authenticateUpgrade, cookieIdentityResolver } from './upgrade-auth.js';
import { gatewayRoutes } from './routes.js';
import type { SocketRequestHandler } from './frames.js';

export interface GatewayComponentDeps {
  db: Knex;
  bus: EventBus;
  log: Logger;
  state: { iamReady: boolean; stopping: boolean };
  auth: Authenticator;
  /** the Koa app and its session middleware, to read the cookie session at the upgrade */
  app: Koa;
  sessionMiddleware: Koa.Middleware;
  feed: NotificationFeed;
  socketHandler?: SocketRequestHandler;
  options?: Partial<GatewayOptions>;
}

/** The ws gateway with its tickets and routes, built from what the composition root has. */
export class GatewayComponent {
  readonly tickets: WsTickets;
  readonly gateway: Gateway;

  constructor(deps: GatewayComponentDeps) {
    const { auth } = deps;
    this.tickets = new WsTickets(deps.db);
    const cookieIdentity = cookieIdentityResolver(deps.app, deps.sessionMiddleware, (ctx) => auth.fromCookie(ctx));
    this.gateway = new Gateway({
      log: deps.log,
      state: deps.state,
      authenticate: (req) => authenticateUpgrade(req, { auth, tickets: this.tickets, cookieIdentity }),
      feed: deps.feed,
      refreshIdentity: (id) => (id.user_id ? auth.identityOf(id.user_id, id.method, { scopes: id.key_scopes, proof: id.proof }) : Promise.resolve(id)),
      socketHandler: deps.socketHandler,
      revalidate: (ids) => auth.revalidate(ids),
      options: deps.options,
    });
    // whatever ends a credential ends the connections it opened, within moments
    const { bus } = deps;
    bus.on('iam:permissions_changed', ({ user_id }) => void (user_id && this.gateway.recheckUser(user_id)));
    bus.on('iam:password_changed', ({ user_id }) => void this.gateway.recheckUser(user_id));
    bus.on('auth:credentials_revoked', ({ user_id }) => void this.gateway.recheckUser(user_id));
    bus.on('auth:system_key_changed', () => void this.gateway.recheckSystem());
  }

  attach(server: http.Server): void {
    this.gateway.attach(server);
  }

  routers(): Router[] {
    return [gatewayRoutes(this.tickets)];
  }

  close(): Promise<void> {
    return this.gateway.close();
  }
}
