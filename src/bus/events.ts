import Joi from 'joi';
import type { AuditEventFrame, SocketResponse } from '../client/types.js';

/**
 * The one place that lists every bus event and its payload type.
 * Every event of the bus with its payload type; docs/architecture.md shows who emits and who listens.
 */

export type NotificationLevel = 'info' | 'success' | 'warning' | 'error';

/** Payload of system:notify (broadcast) and user:notify (one user). */
export interface NotifyPayload {
  id?: string;
  title: string;
  message: string;
  level?: NotificationLevel;
  /** username or user id; user:notify only */
  user?: string;
  source?: string;
  link?: string | null;
  persist?: boolean;
  toast?: boolean;
  action?: 'clear';
}

export interface OutboundNotification {
  id: string;
  seq: number | null;
  title: string;
  message: string;
  level: NotificationLevel;
  source: string | null;
  link: string | null;
  user: null | { id: string; username: string };
  created_at: string;
}

export interface SocketRequestPayload {
  request_id: string;
  operation: string;
  provider?: string;
  args?: Record<string, unknown>;
}

/** The answer to a socket:request: the frame the gateway client reads (src/client/types.ts). */
export type SocketResponsePayload = SocketResponse;

/** An event of the audit trail (src/iam/audit.ts), as GET /api/audit answers it and the `audit:event` frame carries it. */
export type AuditEventPayload = AuditEventFrame;

export interface EventMap {
  /** database ready: starts IAM initialisation */
  'db:connected': { dialect: 'sqlite' | 'postgres' };
  /** authentication is usable; releases the boot sequence */
  'iam:ready': { providers: string[] };
  /** manifests loaded; role and baseline grants apply */
  'system:boot_complete': { plugins: string[] };
  /** a boot stage failed for good; the service stays unready */
  'system:boot_failed': { stage: string; error: string };
  'plugin:state_changed': { plugin_id: string; state: string; enabled: boolean };
  /** a plugin registers an authentication provider (the provider object travels in-process) */
  'auth:register_provider': { provider: unknown; plugin_name?: string };
  /** any change to a user, a group or a membership: drop cached permissions */
  /** who may have gained or lost permissions: one user, every member of a group, or anyone */
  'iam:permissions_changed': { scope: 'user'; user_id: string } | { scope: 'group'; group: string } | { scope: 'all' };
  /** password of a user changed: drop cached Basic verifications, end what it proved */
  'iam:password_changed': { user_id: string };
  /** an event was appended to the audit trail (this instance's ws clients holding feature:admin.audit get it) */
  'audit:event': AuditEventPayload;
  /** events [from, to] were appended by `origin`: every other instance reads them from the database for its live tail */
  'audit:appended': { from: number; to: number; origin: string };
  /** a key or web session of this user was revoked: live connections made with it end */
  'auth:credentials_revoked': { user_id: string };
  /** the system key was set, rotated or cleared: live connections made with the old one end */
  'auth:system_key_changed': Record<string, never>;
  'system:notify': NotifyPayload;
  'user:notify': NotifyPayload;
  'notification:outbound': OutboundNotification;
  'socket:provider:register': { provider_class: unknown; plugin_name: string };
  'socket:request': SocketRequestPayload;
  'socket:response': SocketResponsePayload;
  /** a committed (or transient) notification, for the ws clients of every instance, in seq order */
  'notification:push': NotificationPush;
  /** the auth provider settings were changed through the API: reload them and rebuild the chain */
  'auth:settings_changed': Record<string, never>;
  /** an administrator enabled, disabled or changed the settings of a plugin: every instance follows */
  'plugin:admin_changed': { plugin_id: string; action: 'enable' | 'disable' | 'restart'; instance: string };
  /** an instance's socket providers changed (each instance's registry is the truth of its own host) */
  'socket:providers_changed': { instance: string; providers: string[] };
  /** this instance's link to the other instances went down or came back (not cluster-wide) */
  'bus:bridge_state': { up: boolean };
}

export type EventName = keyof EventMap;

/** A notification push as the gateway delivers it: every connection (user_id null) or one user's. */
export interface NotificationPush {
  event: 'system:notify' | 'user:notify';
  user_id: string | null;
  seq: number | null;
  payload: { id: string; seq: number | null } & Record<string, unknown>;
}

const id = Joi.string().max(128);
const userId = Joi.string().max(64);
const pushSeq = Joi.number().integer().min(1).allow(null);
/** What a push hands clients (src/notifications/rows.ts): a notification, field by field, or a clear of one. */
const pushedNotification = Joi.alternatives().try(
  Joi.object({
    id: id.required(),
    seq: pushSeq.required(),
    title: Joi.string().max(200).required(),
    message: Joi.string().max(4000).allow('').required(),
    level: Joi.valid('info', 'success', 'warning', 'error').required(),
    source: Joi.string().max(128).allow(null).required(),
    link: Joi.string().max(2048).allow(null).required(),
    created_at: Joi.string().isoDate().required(),
    updated_at: Joi.string().isoDate().required(),
    read: Joi.boolean().required(),
    broadcast: Joi.boolean().required(),
    toast: Joi.boolean().required(),
    cleared: Joi.valid(true),
    persist: Joi.valid(false),
  }),
  Joi.object({ id: id.required(), seq: pushSeq.required(), action: Joi.valid('clear').required(), broadcast: Joi.boolean().required() }),
);

/**
 * Events that happen once and matter to every instance: the instance where one happens
 * publishes it (src/bus/redis-bridge.ts); every other instance validates it with this schema
 * and emits it locally, once. Anything not listed here stays on the instance that emitted it.
 */
export const CLUSTER_EVENTS: Partial<Record<EventName, Joi.Schema>> = {
  'notification:push': Joi.object({
    event: Joi.valid('system:notify', 'user:notify').required(),
    user_id: userId.allow(null).required(),
    seq: pushSeq.required(),
    payload: pushedNotification.required(),
  }).custom((push: NotificationPush, helpers) => (push.payload.seq === push.seq ? push : helpers.error('any.invalid'))),
  'iam:permissions_changed': Joi.object({
    scope: Joi.string().valid('user', 'group', 'all').required(),
    user_id: userId.when('scope', { is: 'user', then: Joi.required(), otherwise: Joi.forbidden() }),
    group: Joi.string().max(64).when('scope', { is: 'group', then: Joi.required(), otherwise: Joi.forbidden() }),
  }),
  'iam:password_changed': Joi.object({ user_id: userId.required() }),
  'audit:appended': Joi.object({
    from: Joi.number().integer().min(1).required(),
    to: Joi.number().integer().min(Joi.ref('from')).required(),
    origin: Joi.string().max(200).required(),
  }),
  'auth:credentials_revoked': Joi.object({ user_id: userId.required() }),
  'auth:system_key_changed': Joi.object({}),
  'auth:settings_changed': Joi.object({}),
  'plugin:admin_changed': Joi.object({
    plugin_id: id.required(),
    action: Joi.valid('enable', 'disable', 'restart').required(),
    instance: Joi.string().max(200).required(),
  }),
  'socket:providers_changed': Joi.object({
    instance: Joi.string().max(200).required(),
    providers: Joi.array().items(Joi.string().max(64)).max(1000).required(),
  }),
};

/** Who among the ws clients sees a bus event: everyone authenticated, or holders of a permission. */
export type ClientAudience = 'authenticated' | { permission: string };

/**
 * Bus events that reach ws clients as they are, by one line each (the gateway forwards them).
 * Notifications and socket responses have their own rules (src/notifications, src/sockets);
 * plugins add theirs from their manifests (`client_events`).
 */
export const CLIENT_EVENTS: Partial<Record<EventName, ClientAudience>> = {
  'socket:providers_changed': 'authenticated',
  'audit:event': { permission: 'feature:admin.audit' },
};
