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
