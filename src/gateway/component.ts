import type Router from '@koa/router';
import http from 'node:http';
import type Koa from 'koa';
import { requestOrigin, type Authenticator } from '../auth/authenticate.js';
import type { OneTimeStore } from '../auth/one-time.js';
import type { ApiIdentity } from '../auth/identity.js';
import type { EventBus } from '../bus/bus.js';
import { CLIENT_EVENTS, type ClientAudience, type EventName } from '../bus/events.js';
import type { Logger } from '../log.js';
import { Gateway, type GatewayOptions } from './gateway.js';
import { WsTickets } from './tickets.js';
import { appClientAddress, authenticateUpgrade, cookieIdentityResolver } from './upgrade-auth.js';
import { gatewayRoutes } from './routes.js';
import { HttpError } from '../http/errors.js';

export interface GatewayComponentDeps {
  /** the auth area's shared one-time values: tickets are one of their purposes */
  oneTime: OneTimeStore;
  bus: EventBus;
  log: Logger;
  state: { iamReady: boolean; stopping: boolean };
  auth: Authenticator;
  /** the Koa app and its session middleware, to read the cookie session at the upgrade */
  app: Koa;
  sessionMiddleware: Koa.Middleware;
  /** the welcome's permissions of an identity that holds them all (GatewayDeps.allPermissions) */
  allPermissions?: (identity: ApiIdentity) => string[];
  /** a member who must enrol a second factor first reaches no socket (the HTTP enrolment wall's rule) */
  mustEnrol?: (identity: ApiIdentity) => boolean;
  /** a frame refused to its caller (GatewayDeps.refused) */
  refused?: (actor: ApiIdentity, event: string, err: unknown) => void;
  options?: Partial<GatewayOptions>;
}

/** The ws gateway with its tickets and routes, built from what the composition root has. */
export class GatewayComponent {
  readonly tickets: WsTickets;
  readonly gateway: Gateway;

  constructor(private readonly deps: GatewayComponentDeps) {
    const { auth, bus } = deps;
    this.tickets = new WsTickets(deps.oneTime);
    const cookieIdentity = cookieIdentityResolver(deps.app, deps.sessionMiddleware, (ctx) => auth.fromCookie(ctx));
    const selfOrigin = (req: http.IncomingMessage) => requestOrigin(deps.app.createContext(req, new http.ServerResponse(req)));
    const clientAddress = appClientAddress(deps.app);
    this.gateway = new Gateway({
      log: deps.log,
      state: deps.state,
      authenticate: async (req) => {
        const result = await authenticateUpgrade(req, { auth, tickets: this.tickets, cookieIdentity, selfOrigin, clientAddress });
        if (result.ok && deps.mustEnrol?.(result.identity))
          throw new HttpError(403, 'mfa_enrollment_required', 'your groups require a second factor: enrol one first (Account, Security: /settings#security)');
        return result;
      },
      // each frame acts with the identity as it is now: past the enrolment wall too
      refreshIdentity: async (id) => {
        const fresh = id.userId ? await auth.identityOf(id.userId, id.method, { scopes: id.keyScopes, proof: id.proof }) : id;
        return fresh && deps.mustEnrol?.(fresh) ? null : fresh;
      },
      // a connection ends with its credential, and when its account must now enrol a second
      // factor (the wall a new connection meets at the upgrade)
      revalidate: async (ids) => (await auth.revalidate(ids)).map((id) => (id && deps.mustEnrol?.(id) ? null : id)),
      allPermissions: deps.allPermissions,
      clientAddress,
      refused: deps.refused,
      options: deps.options,
    });
    // whatever ends a credential ends the connections it opened, within moments
    // a group's change reaches every member: every connection is checked (a cache hit for the others)
    bus.on('iam:permissions_changed', (change) => void (change.scope === 'user' ? this.gateway.recheckUser(change.user_id) : this.gateway.revalidate()));
    bus.on('iam:password_changed', ({ user_id }) => void this.gateway.recheckUser(user_id));
    bus.on('auth:credentials_revoked', ({ user_id }) => void this.gateway.recheckUser(user_id));
    bus.on('auth:system_key_changed', () => void this.gateway.recheckSystem());
    // the groups that must use a second factor may have changed (the 30 s sweep catches what this misses)
    bus.on('auth:settings_changed', () => void this.gateway.revalidate());
    // changes made elsewhere while the link to the other instances was down are caught up
    bus.on('bus:bridge_state', ({ up }) => void (up && this.gateway.revalidate()));
    for (const [event, audience] of Object.entries(CLIENT_EVENTS)) this.forward(event, audience!);
  }

  /** A bus event that reaches ws clients as it is: one declaration (CLIENT_EVENTS, or a plugin's manifest). */
  forward(event: string, audience: ClientAudience): () => void {
    return this.deps.bus.on(event as EventName, (payload) =>
      this.gateway.push({ event, payload, audience: audience === 'authenticated' ? { all: true } : { permission: audience.permission } }),
    );
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
