import knex from 'knex';

/** `--name N` from the command line, else `fallback`. */
export function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

/** The p-th percentile of an ascending list (NaN when empty). */
export function pct(sorted: number[], p: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : NaN;
}

/** A database of its own for one benchmark run: SERVICE_BENCH_DATABASE_URL's server (PostgreSQL), else SQLite (null). */
export async function freshDatabase(): Promise<{ url: string | null; drop(): Promise<void> }> {
  const base = process.env.SERVICE_BENCH_DATABASE_URL;
  if (!base) return { url: null, drop: async () => {} };
  const name = `svc_bench_${Date.now()}`;
  const admin = knex({ client: 'pg', connection: base });
  await admin.raw(`CREATE DATABASE "${name}"`);
  await admin.destroy();
  const u = new URL(base);
  u.pathname = `/${name}`;
  return {
    url: u.toString(),
    async drop() {
      const a = knex({ client: 'pg', connection: base });
      await a.raw(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await a.destroy();
    },
  };
}
