import type Router from '@koa/router';
import type http from 'node:http';
import type Koa from 'koa';
import type { Knex } from 'knex';
import type { Authenticator } from '../auth/authenticate.js';
import type { Logger } from '../log.js';
import { Gateway, type GatewayOptions, type NotificationFeed } from './gateway.js';
import { WsTickets } from './tickets.js';
import { authenticateUpgrade, cookieIdentityResolver } from './upgrade-auth.js';
import { gatewayRoutes } from './routes.js';
import type { SocketRequestHandler } from './frames.js';

export interface GatewayComponentDeps {
  db: Knex;
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
      refreshIdentity: (id) =>
        id.user_id ? auth.identityOf(id.user_id, id.method, { scopes: id.key_scopes ? [...id.key_scopes] : null, credentialId: id.credential_id }) : Promise.resolve(id),
      socketHandler: deps.socketHandler,
      liveCredentials: (ids) => auth.liveCredentials(ids),
      options: deps.options,
    });
  }

  attach(server: http.Server): void {
    this.gateway.attach(server);
  }

  setSocketHandler(handler: SocketRequestHandler | null): void {
    this.gateway.setSocketHandler(handler);
  }

  routers(): Router[] {
    return [gatewayRoutes(this.tickets)];
  }

  close(): Promise<void> {
    return this.gateway.close();
  }
}
