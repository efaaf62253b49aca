import { freshDatabase } from '../../test/support/service.js';

/** `--name N` from the command line, else `fallback`. */
export function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

/** The p-th percentile of an ascending list (NaN when empty). */
export function pct(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : NaN;
}

/** A database of its own for one benchmark run: on SERVICE_BENCH_DATABASE_URL's server (PostgreSQL), else SQLite (null). */
export const benchDatabase = () => freshDatabase(process.env.SERVICE_BENCH_DATABASE_URL ?? '');
