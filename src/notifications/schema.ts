import Joi from 'joi';
import type { NotificationLevel } from '../bus/events.js';
import { nulField } from '../http/validate.js';
import { isLocalPath, isWebUrl } from '../http/links.js';
import { fieldErrorsOf } from '../errors.js';

/**
 * Validation of notify payloads, shared by every source: the bus, ws
 * frames, POST /api/notifications and the webhook.
 */
export const LEVELS: readonly NotificationLevel[] = ['info', 'success', 'warning', 'error'];
export const NOTIFICATION_ID = /^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$/;
export const TITLE_MAX = 200;
export const MESSAGE_MAX = 4000;

/** A link is an absolute http(s) URL or a path on this service; never javascript:, data: or //host in disguise. */
const link = Joi.string()
  .max(2048)
  .custom((value: string, helpers) =>
    isLocalPath(value) || isWebUrl(value) ? value : helpers.message({ custom: '{{#label}} must be an http(s) URL or a path starting with /' }),
  )
  .allow(null);

const base = {
  id: Joi.string().pattern(NOTIFICATION_ID).messages({ 'string.pattern.base': 'must be 1-128 characters of letters, digits and ._:@/-' }),
  title: Joi.string().trim().min(1).max(TITLE_MAX),
  message: Joi.string().max(MESSAGE_MAX).allow(''),
  level: Joi.string()
    .valid(...LEVELS)
    .default('info'),
  user: Joi.string().trim().min(1).max(128),
  source: Joi.string().trim().min(1).max(128).allow(null),
  link,
  persist: Joi.boolean().default(true),
  toast: Joi.boolean().default(true),
  action: Joi.string().valid('clear'),
};

const isClear = Joi.object({ action: Joi.valid('clear').required() }).unknown();

/**
 * `action: "clear"` needs only an id; everything else needs a title and a message. Written as two
 * shapes picked by `action` (not as conditions on single fields), so the API document states
 * which fields each one requires.
 */
function notifyShapes(user: Joi.Schema): Shapes {
  const keys = { ...base, user };
  return {
    clear: Joi.object<ValidNotify>({ ...keys, id: base.id.required(), action: base.action.required() }),
    notify: Joi.object<ValidNotify>({ ...keys, title: base.title.required(), message: base.message.required() }),
  };
}

/** The two shapes of a notify payload: a clear, and everything else. */
interface Shapes {
  clear: Joi.ObjectSchema<ValidNotify>;
  notify: Joi.ObjectSchema<ValidNotify>;
}

/** The two shapes as one schema, picked by `action` (what the API document states). */
const notifyShape = (shapes: Shapes): Joi.AlternativesSchema<ValidNotify> =>
  Joi.alternatives().conditional(isClear, { then: shapes.clear, otherwise: shapes.notify });

const shapesByKind: Record<NotifyKind, Shapes> = {
  broadcast: notifyShapes(Joi.any().forbidden().messages({ 'any.unknown': 'is only allowed in user:notify' })),
  user: notifyShapes(base.user.required()),
};
/**
 * A POST /api/notifications body (and a batch item), as the API document states it: with `user`
 * it is checked as targeted, without as a broadcast (checkNotify, with the shapes above).
 */
export const sendSchema = notifyShape(notifyShapes(base.user.description('username or id: only this user gets it (needs feature:notifications.send)'))).id(
  'NotificationSend',
);

export interface ValidNotify {
  id?: string;
  title?: string;
  message?: string;
  level: NotificationLevel;
  user?: string;
  source?: string | null;
  link?: string | null;
  persist: boolean;
  toast: boolean;
  action?: 'clear';
}

export interface FieldProblem {
  field: string;
  message: string;
}

export type NotifyKind = 'broadcast' | 'user';

/** Validates a notify payload; returns the normalised value or the problems, field by field. */
export function checkNotify(kind: NotifyKind, raw: unknown): { value: ValidNotify; problems: null } | { value: null; problems: FieldProblem[] } {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return { value: null, problems: [{ field: 'payload', message: 'must be an object' }] };
  }
  const nul = nulField(raw);
  if (nul !== null) return { value: null, problems: [{ field: nul || 'payload', message: 'must not contain NUL characters' }] };
  // the shape `action` picks, as the alternatives' condition picks it, without validating the
  // condition first: that second validation was a third of this function's time on the hot path
  const shapes = shapesByKind[kind];
  const shape = (raw as { action?: unknown }).action === 'clear' ? shapes.clear : shapes.notify;
  const { value, error } = shape.validate(raw, { abortEarly: false, convert: true, stripUnknown: false });
  if (error) {
    return {
      value: null,
      problems: fieldErrorsOf(error),
    };
  }
  return { value, problems: null };
}

/** Notifications in one POST /api/notifications/batch at most. */
export const MAX_BATCH = 1000;

/** The query of GET /api/notifications, defaults applied. */
export interface HistoryQuery {
  since?: number;
  before?: number;
  limit: number;
  unread: boolean;
}

export const historyQuerySchema = Joi.object<HistoryQuery, true>({
  // `since` with `before` is a 400 (oxor below); a query's parameters are listed one by one in the document, so their descriptions say it
  since: Joi.number().integer().min(0).description('everything after this seq, oldest first; not with `before`'),
  before: Joi.number().integer().min(1).description('the page older than this seq, newest first (the dashboard\'s "load older"); not with `since`'),
  limit: Joi.number().integer().min(1).max(200).default(50),
  unread: Joi.boolean().truthy('1').falsy('0').default(false),
}).oxor('since', 'before');

/** The payload of a `notifications:resume` frame. */
export interface ResumePayload {
  since: number;
}

export const resumeSchema = Joi.object<ResumePayload, true>({ since: Joi.number().integer().min(0).required() });
