import type { Knex } from 'knex';
import type { Config } from './config.js';
import type { EventBus } from './bus/bus.js';
import type { Logger } from './log.js';
import type { CatalogEntry } from './iam/permissions.js';
import { IamComponent } from './iam/component.js';
import { AuthComponent } from './auth/component.js';
import { NotificationsComponent } from './notifications/component.js';
import { userDirectory } from './notifications/users.js';

export interface CoreOptions {
  config: Config;
  db: Knex;
  bus: EventBus;
  log: Logger;
  /** this process's name: audit events it appends are announced under it */
  instanceId: string;
  /** bcrypt worker threads: the pool's default for the service; 0 for a one-shot command */
  passwordThreads?: number;
  /** permissions of plugins installed but not loaded in this process (the CLI loads none) */
  installedCatalog?: CatalogEntry[];
}

/** The stores and services every transport acts through: the model, credentials, notifications. */
export interface Core {
  iam: IamComponent;
  auth: AuthComponent;
  notifications: NotificationsComponent;
}

/**
 * Builds the core once, the same way for the service (src/service.ts, which adds HTTP, ws,
 * sockets and plugins on top and runs the boot) and for every CLI command (src/cli/context.ts):
 * one MFA issuer, one set of required groups, one set of secret writers. Constructing starts
 * nothing (no timer, no connection, no migration): the service's boot does (db:connected,
 * auth.init(), iam:ready); the CLI never does.
 */
export function buildCore(o: CoreOptions): Core {
  const { config, db, bus, log, instanceId } = o;
  // the model asks the credentials area for its rules when it first needs them (built on the next line)
  const iam: IamComponent = new IamComponent({
    config,
    db,
    bus,
    log: log.child({ component: 'iam' }),
    instanceId,
    passwordThreads: o.passwordThreads,
    installedCatalog: o.installedCatalog,
    credentials: () => auth,
  });
  const auth = new AuthComponent({ config, db, bus, log: log.child({ component: 'auth' }), iam });
  const users = userDirectory(iam.store);
  // a user deleted or renamed is no longer a target (every instance: the event is cluster-wide)
  bus.on('iam:permissions_changed', () => users.forget());
  const notifications = new NotificationsComponent({
    db,
    bus,
    log: log.child({ component: 'notifications' }),
    users,
    secrets: iam.secrets,
    webhookSecret: config.scmWebhookSecret,
    webhookForgeSecrets: config.scmWebhookForgeSecrets,
    commands: iam.commands,
    wrongSignatures: auth.gate,
    retention: { retentionMs: config.notificationRetentionMs, maxPerUser: config.notificationMaxPerUser },
    // without Redis: what another process commits (the CLI, another instance) reaches this one's clients within about a second
    followDatabase: !config.redisUrl,
  });
  return { iam, auth, notifications };
}
