import type Router from '@koa/router';
import type { Knex } from 'knex';
import type { CommandPath } from '../iam/commands.js';
import type { EventBus } from '../bus/bus.js';
import type { NotifyPayload } from '../bus/events.js';
import type { Logger } from '../log.js';
import { NotificationsService } from './service.js';
import { notificationRoutes } from './routes.js';
import { ScmWebhook, type ScmWebhookDeps } from './webhook.js';
import { webhookRoutes, webhookSecretRoutes } from './webhook-routes.js';
import { WebhookSecrets, type SecretStore } from './webhook-secrets.js';
import { NotifyError, type UserDirectory } from './types.js';
import { DomainError } from '../errors.js';
import { NotificationChannels } from './channels.js';
import { NotificationRetention, type RetentionOptions } from './retention.js';
import type { ClientChannels } from '../bus/channels.js';
import type { NotifyKind } from './schema.js';
import type { ScmProvider } from './scm/index.js';

export interface NotificationsDeps {
  db: Knex;
  bus: EventBus;
  log: Logger;
  users: UserDirectory;
  secrets: SecretStore;
  /** SERVICE_SCM_WEBHOOK_SECRET */
  webhookSecret: string | null;
  /** SERVICE_SCM_WEBHOOK_SECRET_<FORGE> */
  webhookForgeSecrets?: Partial<Record<ScmProvider, string | null>>;
  retention: RetentionOptions;
  /** webhook secret changes and refused deliveries are audit events */
  commands: CommandPath;
  /** the attempt gate's budget of wrong webhook signatures per address */
  wrongSignatures?: ScmWebhookDeps['wrongSignatures'];
  /**
   * no bus bridge carries other processes' pushes (SERVICE_REDIS_URL unset): look in the
   * database for what they committed (FOLLOW_EVERY_MS)
   */
  followDatabase?: boolean;
}

/** how often old notifications are deleted (each instance; the passes are idempotent) */
const RETENTION_EVERY_MS = 3_600_000;
/** without the bus bridge: how often the counter is read for what other processes committed */
export const FOLLOW_EVERY_MS = 1000;

/**
 * Notifications: consumes system:notify and user:notify from the bus, owns the history API,
 * the SCM webhook and its secret setting. Its tables come with the migrations IAM runs, so it
 * starts writing at iam:ready (bus events that arrive earlier wait for it).
 */
export class NotificationsComponent {
  readonly service: NotificationsService;
  readonly webhook: ScmWebhook;
  /** the webhook's secrets and their writer */
  readonly webhookSecrets: WebhookSecrets;
  private readonly detach: (() => void)[] = [];
  private channels: NotificationChannels | null = null;
  readonly retention: NotificationRetention;
  private retentionTimer: NodeJS.Timeout | null = null;

  constructor(private readonly deps: NotificationsDeps) {
    const { db, bus, log, users } = deps;
    this.retention = new NotificationRetention(db, log.child({ part: 'retention' }), deps.retention);
    this.service = new NotificationsService({ db, bus, log, users, truncatedBefore: () => this.retention.watermark() });
    const webhookLog = log.child({ part: 'scm-webhook' });
    this.webhookSecrets = new WebhookSecrets({
      secrets: deps.secrets,
      log: webhookLog,
      envSecret: deps.webhookSecret,
      envForgeSecrets: deps.webhookForgeSecrets ?? {},
      commands: deps.commands,
    });
    this.webhook = new ScmWebhook({
      db,
      log: webhookLog,
      notifications: this.service,
      secrets: this.webhookSecrets,
      commands: deps.commands,
      wrongSignatures: deps.wrongSignatures,
    });
    this.detach.push(
      bus.on('iam:ready', () => {
        this.service.setReady();
        const pass = () => void this.retention.run().catch((err) => log.warn({ err: (err as Error).message }, 'notification retention failed'));
        // the first pass a little after boot, so it never competes with a start under load
        this.retentionTimer = setTimeout(pass, 60_000);
        this.retentionTimer.unref();
        const every = setInterval(pass, RETENTION_EVERY_MS);
        every.unref();
        this.detach.push(() => clearInterval(every));
      }),
    );
    this.detach.push(bus.on('system:notify', (p) => this.fromBus('broadcast', p)));
    this.detach.push(bus.on('user:notify', (p) => this.fromBus('user', p)));
  }

  /** Plugs the notifications into the ws gateway (pushes, resume, client-sent notify frames). */
  attachChannels(channels: ClientChannels): void {
    const ws = new NotificationChannels({ channels, service: this.service, bus: this.deps.bus, log: this.deps.log });
    this.channels = ws;
    this.detach.push(
      this.deps.bus.on('iam:ready', async () => {
        await ws.start();
        if (this.deps.followDatabase) ws.follow(FOLLOW_EVERY_MS);
      }),
    );
  }

  private async fromBus(kind: NotifyKind, payload: NotifyPayload): Promise<void> {
    try {
      await this.service.notify(kind, payload, { sender: 'bus' });
    } catch (err) {
      // a bad payload from an in-process emitter is logged and dropped; the emitter goes on. So is
      // one that cannot be stored now (a stop's grace ran out, the database is away): said why
      const event = kind === 'broadcast' ? 'system:notify' : 'user:notify';
      if (err instanceof NotifyError) {
        this.deps.log.warn({ event, code: err.reason, problems: err.problems }, 'notification dropped');
      } else if (err instanceof DomainError && err.code === 'unavailable') {
        this.deps.log.warn({ event, code: err.code, reason: err.message }, 'notification dropped');
      } else {
        this.deps.log.error({ err }, 'storing a notification failed');
      }
    }
  }

  routers(): Router[] {
    return [webhookRoutes(this.webhook), notificationRoutes(this.service), ...webhookSecretRoutes(this.webhookSecrets)];
  }

  /** A stop's grace ran out: notifications not yet being written are refused (503). */
  refuseWrites(): void {
    this.service.refuseWrites();
  }

  async stop(): Promise<void> {
    for (const off of this.detach.splice(0)) off();
    if (this.retentionTimer) clearTimeout(this.retentionTimer);
    this.channels?.stop();
    await this.service.drain();
  }
}
