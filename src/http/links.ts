/**
 * Links that end up in a browser (notification links, `next` after login) are judged the way
 * a browser will read them: by the WHATWG URL parser, which drops tabs and newlines and reads
 * a backslash as a slash. `/\t/evil.example/x` looks like a path and is `//evil.example/x`.
 */
const BASE = 'http://same-origin.invalid';
const BASE_ORIGIN = new URL(BASE).origin;

/** A path on this service: starts with one "/" and, parsed as a browser would, stays on this origin. */
export function isLocalPath(value: string): boolean {
  // eslint-disable-next-line no-control-regex -- control characters are what it refuses (a browser drops some)
  if (!value.startsWith('/') || /[\x00-\x1f\x7f\\]/.test(value)) return false;
  try {
    return new URL(value, BASE).origin === BASE_ORIGIN;
  } catch {
    return false;
  }
}

/** An absolute http(s) URL, written as one (not a path that a browser would turn into one). */
export function isWebUrl(value: string): boolean {
  // eslint-disable-next-line no-control-regex -- control characters are what it refuses (a browser drops some)
  if (!/^https?:\/\//i.test(value) || /[\x00-\x20\x7f\\]/.test(value)) return false;
  try {
    const url = new URL(value);
    return url.protocol === 'http:' || url.protocol === 'https:';
  } catch {
    return false;
  }
}
