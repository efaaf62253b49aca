/**
 * The one place that lists every bus event and its payload type.
 * Spec section 6 and DESIGN section 7 name the events; payloads not fixed by either are ours.
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

export interface SocketResponsePayload {
  request_id: string;
  operation: string;
  provider: string | null;
  ok: boolean;
  result: unknown;
  error: null | { code: string; message: string; details?: unknown };
}

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
  'iam:permissions_changed': { user_id?: string; group?: string; all?: boolean };
  /** password of a user changed: drop cached Basic verifications, end what it proved */
  'iam:password_changed': { user_id: string };
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
}

export type EventName = keyof EventMap;
