import crypto from 'node:crypto';

/** Hex SHA-256: how keys, tokens, codes and secrets are looked up and recognised, never kept themselves. */
export function sha256(value: string | Buffer): string {
  return crypto.createHash('sha256').update(value).digest('hex');
}

/** Constant-time equality of two secrets of any length (compares their SHA-256 digests, so not even the length shows). */
export function safeEqual(a: string | Buffer, b: string | Buffer): boolean {
  const da = crypto.createHash('sha256').update(a).digest();
  const db = crypto.createHash('sha256').update(b).digest();
  return crypto.timingSafeEqual(da, db);
}
