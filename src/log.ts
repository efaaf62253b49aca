import pino, { type Logger } from 'pino';

export type { Logger };

/** Paths whose values never reach a log line (docs/security.md). */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-api-key"]',
  'req.headers["x-gitlab-token"]',
  'req.headers["x-hub-signature-256"]',
  'req.headers["x-gitea-signature"]',
  'res.headers["set-cookie"]',
  '*.password',
  '*.new_password',
  '*.current_password',
  '*.token',
  '*.secret',
  '*.key',
  '*.client_secret',
  '*.bind_password',
  '*.env',
  'password',
  'token',
  'secret',
];

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}

/** Control characters and line separators as \u escapes: nothing logged moves the cursor or starts a line. */
const escaped = (text: string) => text.replace(/[\p{Cc}\u2028\u2029]/gu, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** A field's value on a text line: plain when it is one simple word, else JSON. */
function shownValue(v: unknown): string {
  if (typeof v === 'string') return /^[\w.:/@+,-]+$/.test(v) ? v : escaped(JSON.stringify(v));
  // an error is its message here; the stack is for the JSON lines
  if (v && typeof v === 'object' && typeof (v as { message?: unknown }).message === 'string' && 'stack' in v)
    return escaped(JSON.stringify((v as Error).message));
  return escaped(JSON.stringify(v) ?? String(v));
}

/**
 * A destination that writes each of pino's lines as text for a person at a console:
 * `warn: message key=value ...` (no time: the terminal's). Redaction happened before; a value
 * or message cannot start a line of its own (control characters are escaped).
 */
export function textDestination(write: (text: string) => void): pino.DestinationStream {
  return {
    write(line: string) {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        write(line);
        return;
      }
      const { level, msg, time: _time, ...fields } = entry;
      const text = typeof msg === 'string' ? escaped(msg) : '';
      const parts = [`${String(level)}:`, ...(text ? [text] : []), ...Object.entries(fields).map(([k, v]) => `${k}=${shownValue(v)}`)];
      write(parts.join(' ') + '\n');
    },
  };
}

const LEVEL_METHODS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal']);

/** `value` with `conceal` applied to every string in it: an error's message and stack, nested fields. */
function concealedValue(value: unknown, conceal: (text: string) => string, seen = new WeakMap<object, unknown>()): unknown {
  if (typeof value === 'string') return conceal(value);
  if (!value || typeof value !== 'object') return value;
  if (seen.has(value)) return seen.get(value);
  if (Array.isArray(value)) {
    const out: unknown[] = [];
    seen.set(value, out);
    for (const item of value) out.push(concealedValue(item, conceal, seen));
    return out;
  }
  const isError = value instanceof Error;
  if (!isError && Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) {
    // an instance of a class is written as JSON.stringify writes it: that form, concealed
    let json: unknown;
    try {
      json = typeof (value as { toJSON?: unknown }).toJSON === 'function' ? (value as { toJSON(): unknown }).toJSON() : { ...value };
    } catch {
      json = '[unserializable]';
    }
    const out = concealedValue(json, conceal, seen);
    seen.set(value, out);
    return out;
  }
  // an error stays an error (the log's serializer names its type), with its words concealed
  const out: Record<string, unknown> = isError ? Object.create(Object.getPrototypeOf(value) as object) : {};
  seen.set(value, out);
  if (isError) {
    for (const key of ['message', 'stack', 'cause'] as const) {
      if (key in value) Object.defineProperty(out, key, { value: concealedValue((value as Error)[key], conceal, seen), enumerable: false, writable: true });
    }
  }
  for (const [key, item] of Object.entries(value)) out[key] = concealedValue(item, conceal, seen);
  return out;
}

/**
 * `log` with `conceal` applied to every line before it is written (its message, its fields, an
 * error's message and stack), and to the lines of its children: for a logger lent to code that
 * holds secrets the service must not show (a plugin's settings).
 */
export function concealingLogger(log: Logger, conceal: (text: string) => string): Logger {
  return new Proxy(log, {
    get(target, prop) {
      if (prop === 'child') {
        return (bindings: pino.Bindings, options?: pino.ChildLoggerOptions) => {
          const prefix = options?.msgPrefix === undefined ? {} : { msgPrefix: conceal(options.msgPrefix) };
          const child = target.child(concealedValue(bindings, conceal) as pino.Bindings, options && { ...options, ...prefix });
          return concealingLogger(child as unknown as Logger, conceal);
        };
      }
      const member = Reflect.get(target, prop, target) as unknown;
      if (typeof member !== 'function') return member;
      if (typeof prop === 'string' && LEVEL_METHODS.has(prop))
        return (...args: unknown[]) =>
          (member as (...a: unknown[]) => void).apply(
            target,
            args.map((arg) => concealedValue(arg, conceal)),
          );
      return (member as (...a: unknown[]) => unknown).bind(target);
    },
  });
}
