/**
 * What loadConfig (src/config.ts) checks beyond each variable's own rule: the passwords everybody
 * knows, the addresses only this machine reaches, and the SERVICE_* variables no setting reads.
 */
import net from 'node:net';
import { SETTINGS } from './settings-table.js';

export const DEFAULT_ADMIN_PASSWORD = 'admin-dev-password';
export const DEFAULT_BOT_PASSWORD = 'bot-dev-password';

/**
 * Passwords everybody knows: the development defaults (in the README), the placeholders of
 * docs/deploy/service-core.env and of its earlier versions, and the usual first guesses.
 * Production refuses them, and so does any mode on an address other hosts reach.
 */
const KNOWN_PASSWORDS = new Set([
  DEFAULT_ADMIN_PASSWORD,
  DEFAULT_BOT_PASSWORD,
  'admin-test-password',
  'bot-test-password',
  'change-me',
  'change-me-too',
  'changeme',
  'password',
  'password1',
  'administrator',
  '12345678',
  '123456789',
  'qwertyui',
  'letmein1',
]);
export const isKnownPassword = (p: string) => KNOWN_PASSWORDS.has(p.trim().toLowerCase()) || /^change[-_ .]?me/i.test(p.trim());
/** The master key placeholder of earlier versions of the env file template, and its kin. */
export const isPlaceholderKey = (k: string) => /change[-_ .]?me/i.test(k);

/** Is `host` an address only this machine reaches (127.0.0.0/8, ::1, localhost)? */
export function isLoopback(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[|\]$/g, '');
  if (h === 'localhost' || h.endsWith('.localhost')) return true;
  if (net.isIPv4(h)) return h.startsWith('127.');
  if (net.isIPv6(h)) return h === '::1' || /^::ffff:127\./.test(h) || /^(0{1,4}:){7}0{0,3}1$/.test(h);
  return false;
}

/** SERVICE_* variables that are nobody's setting by name but known by their shape. */
const KNOWN_PATTERNS = [
  // a plugin's setting, SERVICE_PLUGIN_<ID>_<KEY> (src/plugins/settings.ts)
  /^SERVICE_PLUGIN_[A-Z0-9]+(_[A-Z0-9]+)*_[A-Z0-9]+$/,
  // the test suite's and the benchmarks' own (README.md)
  /^SERVICE_(TEST|BENCH)_[A-Z0-9_]+$/,
];

/** Optimal string alignment distance (a swap of two neighbours counts one). */
function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/** The known variable nearest to `name` (a typo's likely intent). */
export function closestSetting(name: string): string {
  let best = SETTINGS[0]!.env;
  let bestDistance = Infinity;
  for (const s of SETTINGS) {
    const distance = editDistance(name, s.env);
    if (distance < bestDistance) [best, bestDistance] = [s.env, distance];
  }
  return best;
}

/** A warning for each SERVICE_* variable that no setting reads (set but ignored). */
export function unknownVariables(env: NodeJS.ProcessEnv): string[] {
  const known = new Set(SETTINGS.map((s) => s.env));
  return Object.keys(env)
    .filter((k) => k.startsWith('SERVICE_') && !known.has(k) && !KNOWN_PATTERNS.some((p) => p.test(k)))
    .sort()
    .map((k) => `${k} is not a setting and is ignored; did you mean ${closestSetting(k)}?`);
}
