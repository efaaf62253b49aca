/**
 * Half of a UTF-16 surrogate pair, which JSON lets a `\uD800` escape say and no UTF-8 text
 * holds (it would be stored as U+FFFD): the request bodies and the WebSocket frames refuse it.
 */

/** a lone surrogate: in a /u pattern a pair is one code point, so only half of one matches */
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * The path (from `root`) of the first string or key in `parsed` holding half a surrogate pair,
 * or null; looked for only when `text`, the JSON it was parsed from, escapes a surrogate at all.
 */
export function loneSurrogateIn(text: string, parsed: unknown, root: string): string | null {
  return /\\u[dD][89a-fA-F]/.test(text) ? illFormed(parsed, root, root, 0) : null;
}

function illFormed(value: unknown, path: string, root: string, depth: number): string | null {
  if (typeof value === 'string') return LONE_SURROGATE.test(value) ? path : null;
  if (!value || typeof value !== 'object' || depth > 64) return null;
  for (const [key, item] of Object.entries(value)) {
    if (LONE_SURROGATE.test(key)) return path;
    const found = illFormed(item, Array.isArray(value) ? `${path}[${key}]` : path === root ? key : `${path}.${key}`, root, depth + 1);
    if (found) return found;
  }
  return null;
}
