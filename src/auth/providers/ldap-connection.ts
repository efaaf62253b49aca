/**
 * Connections of the LDAP provider (ldap.ts): ldaps:// or StartTLS with the certificate checked,
 * the service bind, closing; the timeouts and their errors; what Active Directory says in a
 * refused bind.
 */
import net from 'node:net';
import type { ConnectionOptions } from 'node:tls';
import { Client } from 'ldapts';
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

/** The provider is backing off after a timeout: it did not try the directory. */
export class LdapUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LdapUnavailableError';
  }
}

/** ldapts says "Connection timeout" and "<Request>: Operation timed out". */
export function isTimeout(err: unknown): boolean {
  return err instanceof LdapTimeoutError || (err instanceof Error && /connection timeout|operation timed out/i.test(err.message));
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

/** Opens the provider's connections (ldap.ts says which, and closes each with `close`). */
export class LdapConnector {
  private readonly options: ResolvedOptions;
  private readonly host: string;
  private readonly secure: boolean;

  constructor(options: ResolvedOptions) {
    this.options = options;
    const url = new URL(this.options.url);
    this.host = url.hostname.replace(/^\[|\]$/g, '') || 'localhost';
    this.secure = url.protocol === 'ldaps:';
  }

  /** The TLS options of LDAPS and StartTLS: the host name is checked against the certificate. */
  private tls(): ConnectionOptions {
    return {
      host: this.host,
      ...(net.isIP(this.host) ? {} : { servername: this.host }),
      rejectUnauthorized: this.options.tlsVerify,
      minVersion: 'TLSv1.2',
      ...(this.options.caCert ? { ca: this.options.caCert } : {}),
    };
  }

  /** A connection ready for a bind: TLS from the start (ldaps://) or upgraded with StartTLS. */
  async connect(): Promise<Client> {
    const client = new Client({
      url: this.options.url,
      timeout: this.options.timeoutMs,
      connectTimeout: this.options.connectTimeoutMs,
      // ldapts switches to TLS whenever tlsOptions is set, so only pass it for ldaps://.
      ...(this.secure ? { tlsOptions: this.tls() } : {}),
    });
    if (!this.secure && this.options.startTls) {
      try {
        // the TLS handshake itself has no timer of ldapts': bound it here
        await deadline(client.startTLS(this.tls()), this.options.connectTimeoutMs + this.options.timeoutMs, `LDAP StartTLS with ${this.host}`);
      } catch (err) {
        await LdapConnector.close(client);
        if (isTimeout(err)) throw err;
        throw new Error(`LDAP StartTLS with ${this.host} failed: ${errorMessage(err)}`);
      }
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

  /** A connection bound as the service account (or anonymous). */
  async serviceConnection(): Promise<Client> {
    const client = await this.connect();
    if (this.options.bindDN) {
      try {
        await client.bind(this.options.bindDN, this.options.bindPassword ?? '');
      } catch (err) {
        await LdapConnector.close(client);
        if (isTimeout(err)) throw err;
        throw new Error(`LDAP service bind as ${this.options.bindDN} failed: ${errorMessage(err)}`);
      }
    }
    return client;
  }
}
