import type { NotificationLevel } from '../../bus/events.js';

/** Source-control systems whose webhooks the intake understands. */
export type ScmProvider = 'gitea' | 'github' | 'gitlab';

/** What the request headers claim: provider, event name and delivery id (null when absent or malformed). */
export interface ScmRequest {
  provider: ScmProvider;
  /** event name exactly as the provider sends it, e.g. `push`, `Merge Request Hook` */
  event: string;
  /** provider delivery id for de-duplication; namespace it with the provider when storing */
  deliveryId: string | null;
  /** SHA-256 of the body, for HMAC-signed providers: a replay under a new delivery id matches it */
  payloadSha256?: string;
}

/** Ready to be spread into a `system:notify` payload. Title and message are plain text, not escaped. */
export interface ScmNotification {
  title: string;
  message: string;
  level: NotificationLevel;
  source: `scm:${ScmProvider}`;
  /** http(s) web page of the thing, or null when the payload carried none that is safe */
  link: string | null;
  /** false for CI runs that are still queued or running */
  toast: boolean;
}

export type NormalizedScmEvent = { kind: 'ping' } | { kind: 'ignored'; reason: string } | { kind: 'notify'; notification: ScmNotification };

/** A handled event whose payload lacks a field we need (the route answers 400 naming `field`). */
export class ScmPayloadError extends Error {
  constructor(
    readonly field: string,
    /** what is wrong with the field, without its name (`is required`) */
    readonly reason: string,
  ) {
    super(`${field} ${reason}`);
    this.name = 'ScmPayloadError';
  }
}
