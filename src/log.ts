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
