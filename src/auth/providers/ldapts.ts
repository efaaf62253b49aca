import { createRequire } from 'node:module';
import type * as Ldapts from 'ldapts';

let loaded: typeof Ldapts | undefined;

/**
 * The LDAP client library, loaded at its first use (a connection, a filter): a start, or a
 * service without a directory, never needs it. Every module of the LDAP provider takes its
 * classes from here, so that the errors they test with `instanceof` are the ones the client
 * throws (one copy of the library).
 */
export function ldapts(): typeof Ldapts {
  return (loaded ??= createRequire(import.meta.url)('ldapts') as typeof Ldapts);
}
