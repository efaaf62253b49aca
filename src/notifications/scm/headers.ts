import { createHmac, timingSafeEqual } from 'node:crypto';
import { safeEqual } from '../../digest.js';
import { fieldError } from '../../errors.js';
import type { ScmProvider, ScmRequest } from './types.js';

export type RequestHeaders = Record<string, string | string[] | undefined>;

/**
 * One header value, looked up case-insensitively. A header sent several times is ambiguous
 * (which copy was signed?) and counts as absent.
 */
export function headerValue(headers: RequestHeaders, name: string): string | undefined {
  const wanted = name.toLowerCase();
  let found: string | undefined;
  let seen = 0;
  for (const [key, raw] of Object.entries(headers ?? {})) {
    if (key.toLowerCase() !== wanted || raw === undefined) continue;
    const values = Array.isArray(raw) ? raw : [raw];
    seen += values.length;
    found = values[0];
  }
  return seen === 1 && typeof found === 'string' ? found : undefined;
}

function trimmed(headers: RequestHeaders, name: string): string | undefined {
  const value = headerValue(headers, name)?.trim();
  return value ? value : undefined;
}

// GitLab event names contain spaces ("Merge Request Hook"); anything else is not an event name.
export const EVENT_NAME = /^[A-Za-z0-9_. -]{1,64}$/;
// Delivery ids are UUIDs in practice; accept any short visible-ASCII token, refuse the rest.
export const DELIVERY_ID = /^[\x21-\x7e]{1,200}$/;

function deliveryId(value: string | undefined): string | null {
  return value !== undefined && DELIVERY_ID.test(value) ? value : null;
}

/**
 * Which provider a webhook request claims to come from, by its event header. Gitea also sends
 * X-GitHub-Event (and X-Gogs-Event) for compatibility, so X-Gitea-Event wins. A request that
 * claims both GitLab and GitHub, or has no event header, is not recognised (null).
 */
export function detectScmRequest(headers: RequestHeaders): ScmRequest | null {
  const gitea = trimmed(headers, 'x-gitea-event');
  const gitlab = trimmed(headers, 'x-gitlab-event');
  const github = trimmed(headers, 'x-github-event');

  let provider: ScmProvider;
  let event: string;
  let delivery: string | undefined;
  if (gitea !== undefined) {
    provider = 'gitea';
    event = gitea;
    delivery = trimmed(headers, 'x-gitea-delivery');
  } else if (gitlab !== undefined && github !== undefined) {
    return null;
  } else if (gitlab !== undefined) {
    provider = 'gitlab';
    event = gitlab;
    // Idempotency-Key stays the same when GitLab re-sends a delivery; the event UUID is the fallback
    // for GitLab versions before 17.4.
    delivery = trimmed(headers, 'idempotency-key') ?? trimmed(headers, 'x-gitlab-event-uuid');
  } else if (github !== undefined) {
    provider = 'github';
    event = github;
    delivery = trimmed(headers, 'x-github-delivery');
  } else {
    return null;
  }
  if (!EVENT_NAME.test(event)) return null;
  return { provider, event, deliveryId: deliveryId(delivery) };
}

export const HEX_SHA256 = /^[0-9a-fA-F]{64}$/;
export const GITHUB_SIGNATURE = /^sha256=([0-9a-fA-F]{64})$/;

function hmacMatches(hex: string | undefined, rawBody: Buffer, secret: string): boolean {
  if (hex === undefined || !HEX_SHA256.test(hex)) return false;
  const expected = createHmac('sha256', secret).update(rawBody).digest();
  const given = Buffer.from(hex, 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** Constant-time equality of a token and a secret, whatever their lengths; false without a token. */
export const tokenMatches = (token: string | undefined, secret: string): boolean => Boolean(token) && safeEqual(token!, secret);

/**
 * Checks the request against its forge's secret, on the raw body bytes, before any parsing.
 * Gitea: X-Gitea-Signature = hex HMAC-SHA256; GitHub: X-Hub-Signature-256 = `sha256=<hex>`;
 * GitLab: X-Gitlab-Token = the secret. Anything missing, malformed or wrong is false, never a throw.
 */
export function verifyScmSignature(request: ScmRequest, headers: RequestHeaders, rawBody: Buffer, secret: string): boolean {
  try {
    if (typeof secret !== 'string' || secret.length === 0 || !Buffer.isBuffer(rawBody)) return false;
    switch (request.provider) {
      case 'gitea':
        return hmacMatches(headerValue(headers, 'x-gitea-signature'), rawBody, secret);
      case 'github': {
        const match = GITHUB_SIGNATURE.exec(headerValue(headers, 'x-hub-signature-256') ?? '');
        return match !== null && hmacMatches(match[1], rawBody, secret);
      }
      case 'gitlab':
        return tokenMatches(headerValue(headers, 'x-gitlab-token'), secret);
      default:
        return false;
    }
  } catch {
    // Verification must never turn into a 500; whatever went wrong, the request is not verified.
    return false;
  }
}

/**
 * Why a delivery's signature header cannot verify by its form alone (missing, or not the form
 * the forge uses), for the refusal's message; null when the form is right and the value is
 * simply not this secret's. Says nothing of the secret.
 */
export function signatureFormProblem(request: ScmRequest, headers: RequestHeaders): string | null {
  const header = { gitea: 'X-Gitea-Signature', github: 'X-Hub-Signature-256', gitlab: 'X-Gitlab-Token' }[request.provider];
  const value = headerValue(headers, header.toLowerCase());
  const sent = Object.entries(headers).some(([k, v]) => k.toLowerCase() === header.toLowerCase() && v !== undefined);
  if (value === undefined && sent) return `${header} was sent more than once`;
  if (value === undefined || value === '') return `no ${header} header: give the webhook a secret on the forge`;
  if (request.provider === 'gitea' && !HEX_SHA256.test(value))
    return `${header} must be the hex HMAC-SHA256 of the body (64 hex digits${value.startsWith('sha256=') ? ', without the sha256= prefix' : ''})`;
  if (request.provider === 'github' && !GITHUB_SIGNATURE.test(value)) return `${header} must be sha256= and the hex HMAC-SHA256 of the body`;
  return null;
}

const UTF8 = new TextDecoder();

/** A verified delivery's payload: a JSON object, else 400 naming the body (and a form-encoded one as such). */
export function payloadOf(headers: RequestHeaders, rawBody: Buffer): Record<string, unknown> {
  let payload: unknown;
  try {
    // decoded as UTF-8, a leading byte-order mark dropped (RFC 8259 lets a parser ignore one)
    payload = JSON.parse(UTF8.decode(rawBody));
  } catch {
    // GitHub's webhooks may be set to send the payload form-encoded
    const form = /^application\/x-www-form-urlencoded\b/i.test(headerValue(headers, 'content-type') ?? '');
    throw fieldError('body', form ? "is form-encoded: set the webhook's content type to application/json on the forge" : 'is not valid JSON');
  }
  if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw fieldError('body', 'must be a JSON object');
  return payload as Record<string, unknown>;
}
