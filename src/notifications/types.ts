import { DomainError } from '../errors.js';
import type { OutboundNotification } from '../bus/events.js';
import type { FieldProblem } from './schema.js';

export { viewerOf, type Viewer } from '../bus/channels.js';

export interface UserRef {
  id: string;
  username: string;
}

/** Finds the targets of user:notify by id or username (the IAM store behind it), many at once. */
export interface UserDirectory {
  /** the users found, keyed by the ref that named them */
  findMany(refs: string[]): Promise<Map<string, UserRef>>;
}

/** A notification as the history API and the ws frames show it. */
export interface NotificationView extends Omit<OutboundNotification, 'user'> {
  updated_at: string;
  read: boolean;
  broadcast: boolean;
  toast: boolean;
  /** present (true) only on cleared notifications listed with `since` */
  cleared?: true;
  /** present (false) only on notifications that were pushed but not stored */
  persist?: false;
}

/** A clear, as pushed: the client removes `id`. */
export interface ClearView {
  id: string;
  seq: number | null;
  action: 'clear';
  broadcast: boolean;
}

/** One delivery to connected clients: every connection (userId null) or one user's. */
export interface PushFrame {
  event: 'system:notify' | 'user:notify';
  /** null = broadcast */
  userId: string | null;
  seq: number | null;
  payload: NotificationView | ClearView;
}

export type NotifyErrorCode = 'invalid_args' | 'unknown_user' | 'conflict';

/**
 * A notify request that cannot be honoured; `problems` name the fields. As a DomainError it is a
 * 400 (or a 409 for an id of another audience) wherever it surfaces; `reason` is the finer code
 * the bus and ws frames report.
 */
export class NotifyError extends DomainError {
  constructor(
    readonly reason: NotifyErrorCode,
    readonly problems: FieldProblem[],
  ) {
    super(reason === 'conflict' ? 'conflict' : 'validation_failed', problems.map((p) => `${p.field}: ${p.message}`).join('; '), problems);
    this.name = 'NotifyError';
  }
}

export interface NotifyResult {
  id: string;
  /** null when not stored (persist: false, or a clear of an id that was never stored) */
  seq: number | null;
  action: 'created' | 'updated' | 'cleared' | 'transient';
}
