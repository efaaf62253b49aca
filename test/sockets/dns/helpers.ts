import { Resolver } from 'node:dns/promises';

/** A resolver that asks only the test's Unbound, once, briefly. */
export function resolverOf(port: number): Resolver {
  const r = new Resolver({ timeout: 1000, tries: 1 });
  r.setServers([`127.0.0.1:${port}`]);
  return r;
}

/** The DNS error code of a lookup (ENOTFOUND for NXDOMAIN, ENODATA for a name without that type), or 'resolved'. */
export async function lookupError(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'resolved';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? String(err);
  }
}
