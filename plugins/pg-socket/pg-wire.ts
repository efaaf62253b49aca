import net from 'node:net';

/**
 * Just enough of the PostgreSQL frontend/backend protocol (version 3) to probe a server over
 * its UNIX socket: an SSLRequest (answered with one byte by any live server) and a startup
 * message whose answer tells the authentication the server wants and, when it lets the role in
 * without a password, its parameters (server_version, encodings, time zone). No password is
 * ever sent and no query is ever run: on any authentication request the probe hangs up.
 */

const SSL_REQUEST_CODE = 80877103;
const PROTOCOL_3_0 = 196608;

export const AUTH_METHODS: Record<number, string> = {
  0: 'ok',
  2: 'kerberos_v5',
  3: 'cleartext_password',
  5: 'md5_password',
  7: 'gss',
  9: 'sspi',
  10: 'sasl',
};

export interface SslProbe {
  reachable: true;
  ssl_supported: boolean;
  latency_ms: number;
}

export interface StartupProbe {
  /** true when the server let the role in without a password (trust / peer) */
  accepted: boolean;
  /** the authentication the server asked for (ok = none) */
  auth: string | null;
  /** SASL mechanisms offered (e.g. SCRAM-SHA-256) */
  sasl_mechanisms?: string[];
  parameters: Record<string, string>;
  error: null | { code: string | null; message: string };
  latency_ms: number;
}

function open(socketPath: string, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const sock = net.createConnection({ path: socketPath });
    const timer = setTimeout(() => {
      sock.destroy();
      reject(Object.assign(new Error(`no connection within ${timeoutMs} ms`), { code: 'ETIMEDOUT' }));
    }, timeoutMs);
    sock.once('connect', () => {
      clearTimeout(timer);
      resolve(sock);
    });
    sock.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/** Reads from the socket until `done` says the collected bytes are enough. */
function readUntil<T>(sock: net.Socket, timeoutMs: number, done: (buf: Buffer) => T | undefined): Promise<T> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const finish = (fn: () => void) => {
      clearTimeout(timer);
      sock.off('data', onData);
      sock.off('error', onError);
      sock.off('close', onClose);
      fn();
    };
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (buf.length > 1 << 20) return finish(() => reject(new Error('answer too large')));
      let out: T | undefined;
      try {
        out = done(buf);
      } catch (err) {
        return finish(() => reject(err));
      }
      if (out !== undefined) finish(() => resolve(out as T));
    };
    const onError = (err: Error) => finish(() => reject(err));
    const onClose = () => finish(() => reject(new Error('the server closed the connection')));
    const timer = setTimeout(() => finish(() => reject(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' }))), timeoutMs);
    sock.on('data', onData);
    sock.once('error', onError);
    sock.once('close', onClose);
  });
}

export async function sslProbe(socketPath: string, timeoutMs: number): Promise<SslProbe> {
  const started = performance.now();
  const sock = await open(socketPath, timeoutMs);
  try {
    const req = Buffer.alloc(8);
    req.writeInt32BE(8, 0);
    req.writeInt32BE(SSL_REQUEST_CODE, 4);
    sock.write(req);
    const answer = await readUntil(sock, timeoutMs, (b) => (b.length >= 1 ? String.fromCharCode(b[0]) : undefined));
    if (answer !== 'S' && answer !== 'N') throw new Error(`not a PostgreSQL server (answered 0x${answer.charCodeAt(0).toString(16)})`);
    return { reachable: true, ssl_supported: answer === 'S', latency_ms: Math.round((performance.now() - started) * 10) / 10 };
  } finally {
    sock.destroy();
  }
}

function cstrings(b: Buffer): string[] {
  return b.toString('utf8').split('\0');
}

function startupMessage(params: Record<string, string>): Buffer {
  const body = Buffer.from(
    Object.entries(params)
      .flatMap(([k, v]) => [k, v])
      .join('\0') + '\0\0',
    'utf8',
  );
  const head = Buffer.alloc(8);
  head.writeInt32BE(8 + body.length, 0);
  head.writeInt32BE(PROTOCOL_3_0, 4);
  return Buffer.concat([head, body]);
}

export async function startupProbe(socketPath: string, opts: { user: string; database: string; timeoutMs: number }): Promise<StartupProbe> {
  const started = performance.now();
  const sock = await open(socketPath, opts.timeoutMs);
  const out: StartupProbe = { accepted: false, auth: null, parameters: {}, error: null, latency_ms: 0 };
  try {
    sock.write(startupMessage({ user: opts.user, database: opts.database, application_name: 'service-pg-socket-probe' }));
    await readUntil(sock, opts.timeoutMs, (buf) => {
      let off = 0;
      while (buf.length - off >= 5) {
        const type = String.fromCharCode(buf[off]);
        const len = buf.readInt32BE(off + 1);
        if (len < 4) throw new Error('malformed server message');
        if (buf.length - off < 1 + len) return undefined;
        const body = buf.subarray(off + 5, off + 1 + len);
        off += 1 + len;
        if (type === 'R') {
          const code = body.readInt32BE(0);
          out.auth = AUTH_METHODS[code] ?? `code_${code}`;
          if (code === 10) out.sasl_mechanisms = cstrings(body.subarray(4)).filter(Boolean);
          if (code !== 0) return true; // a password is wanted: hang up
          out.accepted = true;
        } else if (type === 'S') {
          const [name, value] = cstrings(body);
          out.parameters[name] = value;
        } else if (type === 'E') {
          const fields: Record<string, string> = {};
          for (const f of cstrings(body)) if (f) fields[f[0]] = f.slice(1);
          out.error = { code: fields.C ?? null, message: fields.M ?? 'error' };
          return true;
        } else if (type === 'Z') {
          return true;
        }
      }
      return undefined;
    });
    if (out.accepted) {
      // Terminate: 'X' + length 4
      sock.write(Buffer.from([0x58, 0, 0, 0, 4]));
    }
  } finally {
    sock.end();
    sock.destroy();
  }
  out.latency_ms = Math.round((performance.now() - started) * 10) / 10;
  return out;
}
