import crypto from 'node:crypto';

/** 256 random bits, URL-safe; the kind prefix makes a leaked token recognisable to scanners. */
export function newToken(kind: 'key' | 'session' | 'code' | 'ticket' | 'state' | 'mfa' | 'challenge'): string {
  const tag = { key: 'svk_', session: 'svs_', code: 'svc_', ticket: 'svt_', state: '', mfa: 'svm_', challenge: '' }[kind];
  return tag + crypto.randomBytes(32).toString('base64url');
}

/** The part of a token that may be shown after creation (kind tag + 6 characters). */
export function tokenPrefix(token: string): string {
  return token.slice(0, 10);
}
