/**
 * Connections of the LDAP provider (ldap.ts): the servers of the URL list tried in order (the one
 * that answered tried first for a while), ldaps:// or StartTLS with the certificate checked, the
 * service bind, closing; why a server could not be used (a TLS failure, a refused connection, a
 * timeout), said precisely for the operator; what Active Directory says in a refused bind.
 */
import net from 'node:net';
import type { ConnectionOptions } from 'node:tls';
import type { Client } from 'ldapts';
import { ldapts } from './ldapts.js';
import type { ResolvedOptions } from './ldap-options.js';
import type { RefusalReason } from './refusal.js';

/** What Active Directory's "data" code in a refused bind means (MS-ADTS; `80090308: … data 533, v…`). */
export interface AdBindFailure {
  /** the hex code as AD writes it (52e, 533, …) */
  code: string;
  /** what the person may be told (the directory said it only because the password was right), or null */
  refusal: RefusalReason | null;
  /** for the log */
  meaning: string;
}

const AD_BIND_CODES: Record<string, { refusal: RefusalReason | null; meaning: string }> = {
  '525': { refusal: null, meaning: 'no such user' },
  '52e': { refusal: null, meaning: 'wrong password' },
  '530': { refusal: 'logon_restricted', meaning: 'not permitted to sign in at this time' },
  '531': { refusal: 'logon_restricted', meaning: 'not permitted to sign in from this workstation' },
  '532': { refusal: 'password_expired', meaning: 'password expired' },
  '533': { refusal: 'account_disabled', meaning: 'account disabled' },
  '568': { refusal: null, meaning: 'too many security ids (groups) for a logon' },
  '701': { refusal: 'account_expired', meaning: 'account expired' },
  '773': { refusal: 'password_must_change', meaning: 'password must be changed' },
  // said whatever password was typed: telling would reveal that the name exists
  '775': { refusal: null, meaning: 'account locked' },
};

/** Reads AD's reason out of a refused bind's diagnostic message; null when it holds none. */
export function adBindFailure(message: string): AdBindFailure | null {
  const m = /AcceptSecurityContext error, data ([0-9a-f]{1,8})\b/i.exec(message) ?? /\bdata ([0-9a-f]{3})\b/i.exec(message);
  if (!m) return null;
  const code = m[1]!.toLowerCase();
  const known = AD_BIND_CODES[code];
  return { code, refusal: known?.refusal ?? null, meaning: known?.meaning ?? `unknown reason ${code}` };
}

export function errorMessage(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as NodeJS.ErrnoException).code;
  return typeof code === 'string' && !err.message.includes(code) ? `${err.message} (${code})` : err.message;
}

/** A connection or an operation that did not answer in time. */
export class LdapTimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LdapTimeoutError';
  }
}

/** Why the directory could not be used: no server answered (each one's reason), the service account was refused, or the provider is pausing. */
export type UnavailableKind = 'tls' | 'refused' | 'timeout' | 'unreachable' | 'service_bind' | 'paused';

/** One server of the list and why it could not be used. */
export interface ServerFailure {
  url: string;
  kind: UnavailableKind;
  reason: string;
}

/** The directory could not be used (`kind`, `failures` per server); the person is told only "unavailable". */
export class LdapUnavailableError extends Error {
  constructor(
    message: string,
    readonly kind: UnavailableKind = 'paused',
    readonly failures: ServerFailure[] = [],
  ) {
    super(message);
    this.name = 'LdapUnavailableError';
  }
}

/** ldapts says "Connection timeout" and "<Request>: Operation timed out". */
export function isTimeout(err: unknown): boolean {
  return err instanceof LdapTimeoutError || (err instanceof Error && /connection timeout|operation timed out/i.test(err.message));
}

/** Node's certificate verdicts, in words an operator can act on. */
const CERT_WORDS: Record<string, string> = {
  DEPTH_ZERO_SELF_SIGNED_CERT: 'the certificate is self-signed (trust its CA with SERVICE_LDAP_CA_CERT)',
  SELF_SIGNED_CERT_IN_CHAIN: 'the certificate chain ends in a CA that is not trusted (set SERVICE_LDAP_CA_CERT)',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'the certificate is signed by a CA that is not trusted (set SERVICE_LDAP_CA_CERT)',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'the certificate is signed by a CA that is not trusted (set SERVICE_LDAP_CA_CERT)',
  UNABLE_TO_GET_ISSUER_CERT: 'the certificate is signed by a CA that is not trusted (set SERVICE_LDAP_CA_CERT)',
  CERT_HAS_EXPIRED: 'the certificate has expired',
  CERT_NOT_YET_VALID: 'the certificate is not valid yet (check the clocks)',
  ERR_TLS_CERT_ALTNAME_INVALID: 'the certificate does not name this host (connect by a name the certificate holds)',
  CERT_SIGNATURE_FAILURE: 'the certificate signature does not verify',
};

/** Why a connection attempt failed, for the operator; null when the failure is not about reaching the server. */
export function connectionFailure(err: unknown): { kind: UnavailableKind; reason: string } | null {
  if (isTimeout(err)) return { kind: 'timeout', reason: `no answer in time (${errorMessage(err)})` };
  // the server answered (an LDAP result code): whatever its words, the connection is fine
  if (!(err instanceof Error) || err instanceof ldapts().ResultCodeError) return null;
  const code = (err as NodeJS.ErrnoException).code ?? '';
  if (CERT_WORDS[code]) return { kind: 'tls', reason: `TLS failed: ${CERT_WORDS[code]} [${code}]` };
  if (/^ERR_SSL_|^ERR_TLS_|^EPROTO$/.test(code) || /SSL routines|TLS|certificate|handshake/i.test(err.message)) {
    return { kind: 'tls', reason: `TLS failed: ${errorMessage(err)}` };
  }
  if (code === 'ECONNREFUSED') return { kind: 'refused', reason: 'connection refused (nothing listens on that port)' };
  if (['EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'ECONNRESET', 'EPIPE', 'EADDRNOTAVAIL'].includes(code) || /socket error/i.test(err.message)) {
    return { kind: 'unreachable', reason: `unreachable: ${errorMessage(err)}` };
  }
  // a server (or a balancer before it) that accepts and then hangs up without a word: ldapts's words for it
  if (/connection closed before message response/i.test(err.message)) {
    return { kind: 'unreachable', reason: `the server closed the connection without answering (${errorMessage(err)})` };
  }
  return null;
}

async function deadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new LdapTimeoutError(`${what} timed out after ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

function hostOf(url: string): string {
  return new URL(url).hostname.replace(/^\[|\]$/g, '') || 'localhost';
}

/** A connection bound as the service account, and the server it reached. */
export interface Opened {
  client: Client;
  url: string;
}

/** Opens the provider's connections (ldap.ts says which, and closes each with `close`). */
export class LdapConnector {
  private readonly options: ResolvedOptions;
  /** the server that answered last, tried first until `until` */
  private remembered = { url: '', until: 0 };
  /** the servers the last serviceConnection() could not use before one answered (or all of them) */
  lastFailures: ServerFailure[] = [];

  constructor(options: ResolvedOptions) {
    this.options = options;
  }

  /** The servers in the order they are tried now: the remembered one first, then the list's order. */
  order(now = Date.now()): string[] {
    const { url, until } = this.remembered;
    if (until <= now || !this.options.urls.includes(url)) return [...this.options.urls];
    return [url, ...this.options.urls.filter((u) => u !== url)];
  }

  /** The TLS options of LDAPS and StartTLS: the host name is checked against the certificate. */
  private tls(host: string): ConnectionOptions {
    return {
      host,
      ...(net.isIP(host) ? {} : { servername: host }),
      rejectUnauthorized: this.options.tlsVerify,
      minVersion: 'TLSv1.2',
      ...(this.options.caCert ? { ca: this.options.caCert } : {}),
    };
  }

  /**
   * A connection to `url` ready for a bind: TCP (and TLS for ldaps://) established, or upgraded
   * with StartTLS. Throws what connectionFailure() reads for a server that cannot be used.
   */
  async connect(url: string): Promise<Client> {
    const host = hostOf(url);
    const secure = url.startsWith('ldaps:');
    const client = new (ldapts().Client)({
      url,
      timeout: this.options.timeoutMs,
      connectTimeout: this.options.connectTimeoutMs,
      // ldapts switches to TLS whenever tlsOptions is set, so only pass it for ldaps://.
      ...(secure ? { tlsOptions: this.tls(host) } : {}),
    });
    try {
      if (!secure && this.options.startTls) {
        // the TLS handshake itself has no timer of ldapts': bound it here
        await deadline(client.startTLS(this.tls(host)), this.options.connectTimeoutMs + this.options.timeoutMs, `LDAP StartTLS with ${host}`);
      } else {
        // connect now, so a server that does not answer is known here and the next one is tried
        // (ldapts connects on the first operation otherwise; its connect has no public name)
        const open = (client as unknown as { _connect?: () => Promise<void> | void })._connect;
        if (typeof open === 'function') await open.call(client);
      }
    } catch (err) {
      await LdapConnector.close(client);
      if (!secure && this.options.startTls && !connectionFailure(err)) {
        // the server answered but would not start TLS: a TLS failure, the next server is tried
        throw Object.assign(new Error(`the server refused StartTLS: ${errorMessage(err)}`), { code: 'ERR_TLS_STARTTLS_REFUSED' });
      }
      throw err;
    }
    return client;
  }

  static async close(client: Client): Promise<void> {
    try {
      await client.unbind();
    } catch {
      // the connection is gone either way
    }
  }

  /**
   * A connection bound as the service account (or anonymous), to the first server of `order()`
   * that answers; remembered. Throws LdapUnavailableError: `kind` of the last server's failure
   * and each server's reason when none answered; `service_bind` when one answered and refused
   * the service account (the next is not tried: the credentials are wrong everywhere).
   */
  async serviceConnection(): Promise<Opened> {
    const failures: ServerFailure[] = [];
    for (const url of this.order()) {
      let client: Client;
      try {
        client = await this.connect(url);
      } catch (err) {
        const failure = connectionFailure(err) ?? { kind: 'unreachable' as const, reason: errorMessage(err) };
        // say which TLS: the operator looks at SERVICE_LDAP_STARTTLS then
        if (failure.kind === 'tls' && !url.startsWith('ldaps:')) failure.reason = failure.reason.replace(/^TLS failed/, 'StartTLS failed');
        failures.push({ url, ...failure });
        continue;
      }
      if (this.options.bindDN) {
        try {
          await client.bind(this.options.bindDN, this.options.bindPassword ?? '');
        } catch (err) {
          await LdapConnector.close(client);
          const failure = connectionFailure(err);
          if (failure) {
            failures.push({ url, ...failure });
            continue;
          }
          const why = err instanceof ldapts().InvalidCredentialsError ? 'wrong bind DN or password' : errorMessage(err);
          const reason = `the service bind as ${this.options.bindDN} was refused: ${why}`;
          throw new LdapUnavailableError(`LDAP: ${reason} (${url})`, 'service_bind', [...failures, { url, kind: 'service_bind', reason }]);
        }
      }
      this.remembered = { url, until: Date.now() + this.options.rememberMs };
      this.lastFailures = failures;
      return { client, url };
    }
    this.remembered = { url: '', until: 0 };
    this.lastFailures = failures;
    const last = failures[failures.length - 1]!;
    throw new LdapUnavailableError(`no LDAP server answered: ${failures.map((f) => `${f.url}: ${f.reason}`).join('; ')}`, last.kind, failures);
  }
}
