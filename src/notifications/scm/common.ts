import Joi from 'joi';
import type { NotificationLevel } from '../../bus/events.js';
import { fieldErrorsOf } from '../../errors.js';
import { ScmPayloadError, type NormalizedScmEvent, type ScmProvider } from './types.js';

const TITLE_MAX = 200;
const MESSAGE_MAX = 500;
const LINK_MAX = 2048;

/** An optional string that providers send as "", null or not at all. */
export const optionalText = Joi.string().allow('', null);
/** A user object: GitHub has `login`, Gitea `login`/`username`/`full_name`, push pushers `name`. */
export const userSchema = Joi.object({
  login: optionalText,
  username: optionalText,
  name: optionalText,
  full_name: optionalText,
}).allow(null);

/**
 * Validates `payload` against a joi schema that names only the fields we use; other fields are
 * tolerated and dropped. The first problem becomes a ScmPayloadError naming the field.
 */
export function extract<T>(schema: Joi.ObjectSchema, payload: unknown): T {
  const { value, error } = schema.validate(payload, { abortEarly: true, allowUnknown: true, stripUnknown: true });
  if (error) {
    // in the words of every other validation (src/errors.ts): the field, and what is wrong with it
    const [first] = fieldErrorsOf(error, 'body');
    throw new ScmPayloadError(first!.field, first!.message);
  }
  return value as T;
}

/** Reads just the `action` of a payload, so ignored actions never need the full schema. */
export function actionOf(payload: unknown): string {
  return extract<{ action: string }>(Joi.object({ action: Joi.string().required() }).required(), payload).action;
}

// C0/C1 controls and bidi overrides have no place in a one-line title and can disguise text.
// eslint-disable-next-line no-control-regex -- matching control characters is its purpose
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]+/g;

/** One line of plain text: controls become spaces, runs of spaces collapse, long text is cut. */
export function cleanText(value: string, max: number): string {
  const text = value.replace(UNPRINTABLE, ' ').replace(/\s+/g, ' ').trim();
  if (text.length <= max) return text;
  return `${Array.from(text)
    .slice(0, max - 1)
    .join('')}…`;
}

/** First line of a commit message or similar, or undefined when there is none. */
export function firstLine(value: string | null | undefined): string | undefined {
  const line = value?.split(/\r?\n/, 1)[0]?.trim();
  return line ? line : undefined;
}

/** The first non-empty candidate. */
export function firstOf(...candidates: Array<string | null | undefined>): string | undefined {
  for (const candidate of candidates) {
    if (typeof candidate === 'string' && candidate.trim() !== '') return candidate.trim();
  }
  return undefined;
}

export interface PayloadUser {
  login?: string | null;
  username?: string | null;
  name?: string | null;
  full_name?: string | null;
}

export function userName(...users: Array<PayloadUser | null | undefined>): string {
  for (const user of users) {
    const name = firstOf(user?.login, user?.username, user?.name, user?.full_name);
    if (name) return name;
  }
  return 'someone';
}

/**
 * The link if it is an absolute http(s) URL without embedded credentials, else null.
 * Links come from the payload and end up in an href: javascript:, data: and friends never pass.
 */
export function safeLink(value: string | null | undefined): string | null {
  if (typeof value !== 'string' || value.length === 0 || value.length > LINK_MAX) return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return null;
  if (url.username !== '' || url.password !== '') return null;
  return url.href;
}

/** The first candidate that is a safe link. */
export function firstLink(...candidates: Array<string | null | undefined>): string | null {
  for (const candidate of candidates) {
    const link = safeLink(candidate);
    if (link) return link;
  }
  return null;
}

/**
 * A web page below a base URL from the payload, e.g. (project.web_url, '-', 'jobs', '42').
 * Each segment is percent-encoded; a segment may hold '/' (branch names) which is kept as a separator.
 */
export function linkBelow(base: string | null | undefined, ...segments: Array<string | number>): string | null {
  const root = safeLink(base);
  if (!root) return null;
  const path = segments.map((segment) => String(segment).split('/').map(encodeURIComponent).join('/')).join('/');
  return safeLink(`${root.replace(/\/+$/, '')}/${path}`);
}

const SHA = /^[0-9a-f]{7,64}$/i;
export const isSha = (value: string | null | undefined): value is string => typeof value === 'string' && SHA.test(value);
export const isZeroSha = (value: string | null | undefined): boolean => typeof value === 'string' && /^0+$/.test(value);
export const shortSha = (value: string | null | undefined): string | undefined => (isSha(value) ? value.slice(0, 7) : undefined);

export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

export interface CiOutcome {
  level: NotificationLevel;
  toast: boolean;
  /** how the title says it: "passed", "failed", "is running" ... */
  phrase: string;
}

const CI_OUTCOMES = new Map<string, CiOutcome>(
  Object.entries({
    success: { level: 'success', toast: true, phrase: 'passed' },
    failure: { level: 'error', toast: true, phrase: 'failed' },
    failed: { level: 'error', toast: true, phrase: 'failed' },
    error: { level: 'error', toast: true, phrase: 'failed' },
    timed_out: { level: 'error', toast: true, phrase: 'timed out' },
    startup_failure: { level: 'error', toast: true, phrase: 'failed to start' },
    cancelled: { level: 'warning', toast: true, phrase: 'was cancelled' },
    canceled: { level: 'warning', toast: true, phrase: 'was cancelled' },
    action_required: { level: 'warning', toast: true, phrase: 'needs action' },
    warning: { level: 'warning', toast: true, phrase: 'reported a warning' },
    // Not finished yet: recorded in history, never toasted.
    running: { level: 'info', toast: false, phrase: 'is running' },
    in_progress: { level: 'info', toast: false, phrase: 'is running' },
    canceling: { level: 'info', toast: false, phrase: 'is being cancelled' },
    pending: { level: 'info', toast: false, phrase: 'is pending' },
    queued: { level: 'info', toast: false, phrase: 'is queued' },
    requested: { level: 'info', toast: false, phrase: 'is queued' },
    waiting: { level: 'info', toast: false, phrase: 'is waiting' },
    waiting_for_resource: { level: 'info', toast: false, phrase: 'is waiting for a resource' },
    preparing: { level: 'info', toast: false, phrase: 'is preparing' },
    created: { level: 'info', toast: false, phrase: 'was created' },
    scheduled: { level: 'info', toast: false, phrase: 'is scheduled' },
    manual: { level: 'info', toast: false, phrase: 'waits for a manual action' },
  } satisfies Record<string, CiOutcome>),
);

/** Level and wording of a CI state; null for states not worth a notification (skipped, neutral, stale, unknown). */
export function ciOutcome(state: string | null | undefined): CiOutcome | null {
  if (typeof state !== 'string') return null;
  return CI_OUTCOMES.get(state.toLowerCase()) ?? null;
}

export function ignored(reason: string): NormalizedScmEvent {
  return { kind: 'ignored', reason };
}

export interface NotificationParts {
  title: string;
  message: string;
  level: NotificationLevel;
  link: string | null;
  toast?: boolean;
}

export function notify(provider: ScmProvider, parts: NotificationParts): NormalizedScmEvent {
  return {
    kind: 'notify',
    notification: {
      title: cleanText(parts.title, TITLE_MAX),
      message: cleanText(parts.message, MESSAGE_MAX),
      level: parts.level,
      source: `scm:${provider}`,
      link: safeLink(parts.link),
      toast: parts.toast ?? true,
    },
  };
}

/** "refs/heads/main" -> branch main, "refs/tags/v1" -> tag v1, anything else is kept as a ref. */
export function describeRef(ref: string): { kind: 'branch' | 'tag' | 'ref'; name: string } {
  if (ref.startsWith('refs/heads/')) return { kind: 'branch', name: ref.slice('refs/heads/'.length) };
  if (ref.startsWith('refs/tags/')) return { kind: 'tag', name: ref.slice('refs/tags/'.length) };
  return { kind: 'ref', name: ref };
}
