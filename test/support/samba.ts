/**
 * A throwaway Active Directory domain controller (Samba AD DC) for tests that need a real
 * directory of the kind companies run: provisioned into a temp dir, started as `samba -i` and
 * answering LDAP and LDAPS with a certificate from a private CA made for it. Needs Debian's
 * `samba` package (samba, samba-tool and its Python bindings) and `openssl`.
 *
 * Ports: Samba's LDAP server always listens on 389 and 636 (no option moves them), so each DC
 * gets addresses of its own in 127.0.0.0/8 instead (`interfaces = <address>/8`, `bind interfaces
 * only`): several DCs, of several test files or engineers, run side by side, and nothing else on
 * the machine listening on 127.0.0.1:389 is in the way. It listens on two addresses: `address`,
 * which the server certificate names, and `otherAddress`, which it does not (the wrong-host
 * case of TLS tests).
 *
 * Domain CORP / corp.example (base DN DC=corp,DC=example), only the LDAP service runs (no KDC,
 * DNS, SMB or RPC). Passwords must meet AD's complexity rules. Accounts lock after
 * LOCKOUT_THRESHOLD bad passwords. Simple binds over plain ldap:// are allowed
 * (`ldap server require strong auth = no`), so that plain, LDAPS and StartTLS can all be tried.
 * The domain is provisioned once per machine (provisionedTemplate) and each DC runs on a copy;
 * users, groups and OUs are made over LDAPS as the domain's administrator, as an administrator's
 * tool does.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { constants as fsConstants, readFileSync, rmSync } from 'node:fs';
import { access, cp, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Attribute, Change, Client, EqualityFilter } from 'ldapts';
import { runTool } from './run-tool.js';

const SAMBA = '/usr/sbin/samba';
const SAMBA_TOOL = '/usr/bin/samba-tool';
const OPENSSL = '/usr/bin/openssl';
const READY_TIMEOUT_MS = 60_000;

export const AD_REALM = 'CORP.EXAMPLE';
export const AD_DOMAIN = 'CORP';
export const AD_DNS_DOMAIN = 'corp.example';
export const AD_BASE_DN = 'DC=corp,DC=example';
/** the DC's name in its certificate (next to its address) */
export const AD_HOSTNAME = 'dc1.corp.example';
export const LOCKOUT_THRESHOLD = 5;

export interface AdUser {
  sam: string;
  password: string;
  dn: string;
  upn: string;
  /** objectSid in string form */
  sid: string;
  mail: string | null;
}

export interface AddUserOptions {
  given?: string;
  surname?: string;
  mail?: string;
  /** e.g. 'OU=People' (relative to the base DN); default CN=Users */
  ou?: string;
  /** pwdLastSet 0: the password must be changed at the next logon */
  mustChange?: boolean;
}

export interface SambaDc {
  /** the address the certificate names; the DC listens on 389 and 636 there */
  address: string;
  /** a second address the DC listens on, which the certificate does not name */
  otherAddress: string;
  /** ldap://<address> */
  url: string;
  /** ldaps://<address> */
  ldapsUrl: string;
  baseDN: string;
  /** NetBIOS domain name (CORP) */
  domain: string;
  dnsDomain: string;
  /** the domain's SID (S-1-5-21-…) */
  domainSid: string;
  /** the service account the login searches with (OU=Service Accounts) */
  bindDN: string;
  bindPassword: string;
  adminDN: string;
  adminPassword: string;
  /** PEM of the private CA that signed the DC's certificate */
  caPem: string;
  /** PEM of another CA, which signed nothing this DC presents */
  otherCaPem: string;
  /** an organizational unit, e.g. 'OU=People' (relative to the base DN) */
  addOu(ou: string): Promise<void>;
  addUser(sam: string, password: string, opts?: AddUserOptions): Promise<AdUser>;
  addGroup(name: string, ou?: string): Promise<string>;
  addMembers(group: string, members: string[]): Promise<void>;
  removeMembers(group: string, members: string[]): Promise<void>;
  disable(sam: string): Promise<void>;
  enable(sam: string): Promise<void>;
  /** accountExpires in `days` (0: expired now) */
  setExpiry(sam: string, days: number): Promise<void>;
  /** sets pwdLastSet `days` ago (past the domain's 42-day maximum password age: expired) */
  agePassword(sam: string, days: number): Promise<void>;
  /** LOCKOUT_THRESHOLD bad passwords: the account is locked */
  lockOut(sam: string): Promise<void>;
  deleteUser(sam: string): Promise<void>;
  /** the DN of the group with this sAMAccountName */
  groupDN(name: string): Promise<string>;
  /** the objectSid (string form) of the account or group with this sAMAccountName */
  sidOf(name: string): Promise<string>;
  /** replaces an attribute's values, as the DC's administrator over LDAP */
  modify(dn: string, attribute: string, values: string[]): Promise<void>;
  /** replaces several attributes' values in one LDAP modify: a reader sees all of them or none */
  modifyAll(dn: string, changes: Record<string, string[]>): Promise<void>;
  /** stops samba and removes the temp dir; safe to call twice */
  stop(): Promise<void>;
}

function canConnect(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Two addresses of 127.0.0.0/8 on which nothing listens at 389 or 636. */
async function freeAddresses(): Promise<[string, string]> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const prefix = `127.${randomInt(64, 250)}.${randomInt(1, 250)}`;
    const last = randomInt(2, 250);
    const pair: [string, string] = [`${prefix}.${last}`, `${prefix}.${last + 1}`];
    const taken = await Promise.all(pair.flatMap((a) => [canConnect(a, 389), canConnect(a, 636)]));
    if (!taken.some(Boolean)) return pair;
  }
  throw new Error('no free loopback address for a Samba DC');
}

/** The interpreter samba-tool runs with (its shebang): the one that has Samba's Python bindings. */
function sambaPython(): string {
  const first = readFileSync(SAMBA_TOOL, 'utf8').split('\n', 1)[0]!;
  const m = /^#!\s*(\S+)/.exec(first);
  return m ? m[1]! : '/usr/bin/python3';
}

/** A private CA and a server certificate for `hostname` and `address`; another CA that signed nothing. */
async function makeCertificates(dir: string, hostname: string, address: string): Promise<void> {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  await runTool(OPENSSL, [
    'req',
    '-x509',
    ...ec,
    '-keyout',
    path.join(dir, 'ca.key'),
    '-out',
    path.join(dir, 'ca.pem'),
    '-days',
    '2',
    '-subj',
    '/CN=service-core test CA',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  await runTool(OPENSSL, [
    'req',
    '-x509',
    ...ec,
    '-keyout',
    path.join(dir, 'other-ca.key'),
    '-out',
    path.join(dir, 'other-ca.pem'),
    '-days',
    '2',
    '-subj',
    '/CN=some other CA',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
  ]);
  await runTool(OPENSSL, ['req', ...ec, '-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'server.csr'), '-subj', `/CN=${hostname}`]);
  await writeFile(path.join(dir, 'server.ext'), `subjectAltName=DNS:${hostname},IP:${address}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n`);
  await runTool(OPENSSL, [
    'x509',
    '-req',
    '-in',
    path.join(dir, 'server.csr'),
    '-CA',
    path.join(dir, 'ca.pem'),
    '-CAkey',
    path.join(dir, 'ca.key'),
    '-CAcreateserial',
    '-out',
    path.join(dir, 'cert.pem'),
    '-days',
    '2',
    '-extfile',
    path.join(dir, 'server.ext'),
  ]);
}

/** The provisioned smb.conf, made to run only the LDAP server, on our addresses, with our certificate, all state in `dir`. */
function adjustConfig(conf: string, dir: string, addresses: string[]): string {
  const own = [
    `interfaces = ${addresses.map((a) => `${a}/8`).join(' ')}`,
    'bind interfaces only = yes',
    'server services = ldap',
    `pid directory = ${path.join(dir, 'run')}`,
    `ncalrpc dir = ${path.join(dir, 'run', 'ncalrpc')}`,
    `winbindd socket directory = ${path.join(dir, 'run', 'winbindd')}`,
    `log file = ${path.join(dir, 'log', 'log.%m')}`,
    'ldap server require strong auth = no',
    'tls enabled = yes',
    `tls keyfile = ${path.join(dir, 'tls', 'key.pem')}`,
    `tls certfile = ${path.join(dir, 'tls', 'cert.pem')}`,
    `tls cafile = ${path.join(dir, 'tls', 'ca.pem')}`,
  ];
  const names = new Set(own.map((line) => line.split('=')[0]!.trim()));
  const kept = conf.split('\n').filter((line) => {
    const name = line.split('=')[0]!.trim().toLowerCase();
    return !line.includes('=') || !names.has(name);
  });
  const at = kept.findIndex((line) => line.trim() === '[global]');
  if (at < 0) throw new Error('the provisioned smb.conf has no [global] section');
  kept.splice(at + 1, 0, ...own.map((line) => `\t${line}`));
  return kept.join('\n');
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

/** Resolves once the DC answers a rootDSE read over LDAP; rejects when samba exits first. */
async function waitForLdap(child: ChildProcess, url: string, output: () => string): Promise<void> {
  let exitInfo: string | null = null;
  child.once('exit', (code, signal) => (exitInfo = `code ${code}, signal ${signal}`));
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let last = '';
  while (Date.now() < deadline) {
    if (exitInfo) throw new Error(`samba exited before answering LDAP (${exitInfo}): ${output().slice(-3000)}`);
    const client = new Client({ url, connectTimeout: 1000, timeout: 2000 });
    try {
      const { searchEntries } = await client.search('', { scope: 'base', filter: '(objectClass=*)', attributes: ['defaultNamingContext'] });
      if (searchEntries[0]?.defaultNamingContext) return;
    } catch (err) {
      last = (err as Error).message;
    } finally {
      await client.unbind().catch(() => undefined);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`samba did not answer LDAP at ${url} within ${READY_TIMEOUT_MS} ms (${last}): ${output().slice(-3000)}`);
}

/** objectSid bytes -> S-1-5-21-… */
function sidText(buf: Buffer): string {
  const parts = ['S', String(buf[0]), String(buf.readUIntBE(2, 6))];
  for (let i = 0; i < buf[1]!; i++) parts.push(String(buf.readUInt32LE(8 + i * 4)));
  return parts.join('-');
}

/** What a provisioned domain holds besides its files (kept next to them in the template). */
interface Provisioned {
  adminPassword: string;
  bindPassword: string;
}

/**
 * The domain as provisioned (samba-tool domain provision, the password policy, the service
 * account), made once per machine and Samba version: provisioning takes the better part of half
 * a minute of CPU, and every DC of a test run starts from the same domain. Each DC runs on a
 * copy of it (startSambaDc). Kept in the temp dir under a name of its own (not a temp dir of a
 * test: the run does not own it); TEMPLATE_VERSION changes when the provisioning below does.
 */
const TEMPLATE_VERSION = 1;

async function provisionedTemplate(): Promise<{ dir: string; provisioned: Provisioned }> {
  const version = (await runTool(SAMBA, ['--version'])).trim().replace(/[^A-Za-z0-9.-]+/g, '_');
  const dir = path.join(os.tmpdir(), `service-core-samba-template-${TEMPLATE_VERSION}-${version}`);
  const ready = path.join(dir, 'provisioned.json');
  const lock = `${dir}.lock`;
  const deadline = Date.now() + 180_000;
  for (;;) {
    try {
      return { dir, provisioned: JSON.parse(await readFile(ready, 'utf8')) as Provisioned };
    } catch {
      // not made yet
    }
    try {
      await mkdir(lock);
      break; // ours to make
    } catch {
      // another test process is making it (or died doing so: a lock older than the deadline is stale)
      const age = Date.now() - (await stat(lock).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
      if (age > 180_000) await rm(lock, { recursive: true, force: true });
      if (Date.now() > deadline) throw new Error(`waited 180 s for another process to provision the Samba template at ${dir}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  try {
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
    const provisioned: Provisioned = {
      adminPassword: `Adm1n-${randomBytes(9).toString('base64url')}`,
      bindPassword: `Svc-${randomBytes(9).toString('base64url')}-1`,
    };
    const conf = path.join(dir, 'etc', 'smb.conf');
    const tool = (...args: string[]) => runTool(SAMBA_TOOL, [...args, '-s', conf]);
    await runTool(SAMBA_TOOL, [
      'domain',
      'provision',
      `--targetdir=${dir}`,
      `--realm=${AD_REALM}`,
      `--domain=${AD_DOMAIN}`,
      `--adminpass=${provisioned.adminPassword}`,
      '--server-role=dc',
      '--dns-backend=NONE',
      '--use-rfc2307',
      '--host-name=dc1',
      // replaced by each copy's own addresses (adjustConfig)
      '--option=interfaces = 127.0.0.1/8',
      '--option=bind interfaces only = yes',
    ]);
    await tool(
      'domain',
      'passwordsettings',
      'set',
      `--account-lockout-threshold=${LOCKOUT_THRESHOLD}`,
      '--account-lockout-duration=30',
      '--reset-account-lockout-after=30',
    );
    await tool('ou', 'add', 'OU=Service Accounts');
    await tool('user', 'add', 'svc-login', provisioned.bindPassword, '--userou=OU=Service Accounts');
    await writeFile(ready, JSON.stringify(provisioned));
    return { dir, provisioned };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}

/**
 * Starts a DC on a copy of the provisioned domain (provisioning it first when this machine has
 * none: give the calling hook a minute or two). Share one per test file.
 */
export async function startSambaDc(): Promise<SambaDc> {
  for (const binary of [SAMBA, SAMBA_TOOL, OPENSSL]) {
    try {
      await access(binary, fsConstants.X_OK);
    } catch {
      throw new Error(`Active Directory tests need a real Samba AD DC: ${binary} is missing. Install Debian's samba package (apt-get install -y samba).`);
    }
  }
  if (process.getuid?.() !== 0) throw new Error('a Samba AD DC runs as root: run these tests as root');

  const template = await provisionedTemplate();
  const { adminPassword, bindPassword } = template.provisioned;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'samba-dc-test-'));
  let child: ChildProcess | undefined;
  let output = '';
  const conf = path.join(dir, 'etc', 'smb.conf');
  let addresses: [string, string];
  try {
    addresses = await freeAddresses();
    await mkdir(path.join(dir, 'tls'), { mode: 0o700 });
    await mkdir(path.join(dir, 'run'));
    await mkdir(path.join(dir, 'log'));
    await makeCertificates(path.join(dir, 'tls'), AD_HOSTNAME, addresses[0]);
    // the domain's files, with the paths in its smb.conf moved here
    await cp(template.dir, dir, { recursive: true, preserveTimestamps: true, filter: (src) => path.basename(src) !== 'provisioned.json' });
    const provisionedConf = (await readFile(conf, 'utf8')).split(template.dir).join(dir);
    await writeFile(conf, adjustConfig(provisionedConf, dir, addresses));

    child = spawn(SAMBA, ['-i', '-M', 'single', '-s', conf, '--debug-stdout', '-d', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (d: Buffer) => (output = (output + d.toString()).slice(-20_000));
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    await waitForLdap(child, `ldap://${addresses[0]}`, () => output);
  } catch (err) {
    if (child) await stopProcess(child);
    await rm(dir, { recursive: true, force: true });
    throw err;
  }

  const running = child;
  // never leave a DC (or its files) behind if the test process ends without calling stop()
  const killOnExit = () => {
    running.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', killOnExit);
  const [address, otherAddress] = addresses;
  const adminDN = `CN=Administrator,CN=Users,${AD_BASE_DN}`;

  const caPem = await readFile(path.join(dir, 'tls', 'ca.pem'), 'utf8');
  /**
   * Something done as the domain's administrator over LDAPS, as an administrator's tool does
   * (a password is written only over an encrypted connection); far quicker than a samba-tool
   * process (a second of Python start-up each).
   */
  async function asAdmin<T>(work: (client: Client) => Promise<T>): Promise<T> {
    const client = new Client({ url: `ldaps://${address}`, connectTimeout: 5000, timeout: 10_000, tlsOptions: { ca: [caPem], servername: AD_HOSTNAME } });
    try {
      await client.bind(adminDN, adminPassword);
      return await work(client);
    } finally {
      await client.unbind().catch(() => undefined);
    }
  }
  const search = (filter: string | EqualityFilter, attributes: string[]) =>
    asAdmin(async (client) => (await client.search(AD_BASE_DN, { scope: 'sub', filter, attributes, explicitBufferAttributes: ['objectSid'] })).searchEntries);
  /** one LDAP modify replacing each attribute named: a reader sees all of it or none */
  const replaceAll = (dn: string, changes: Record<string, string[] | Buffer[]>) =>
    asAdmin((client) =>
      client.modify(
        dn,
        Object.entries(changes).map(([type, values]) => new Change({ operation: 'replace', modification: new Attribute({ type, values }) })),
      ),
    );
  const replace = (dn: string, type: string, values: string[] | Buffer[]) => replaceAll(dn, { [type]: values });
  /** userAccountControl with `bit` set or cleared (ACCOUNTDISABLE is 2) */
  const accountControl = async (sam: string, bit: number, on: boolean) => {
    const [entry] = await search(new EqualityFilter({ attribute: 'sAMAccountName', value: sam }), ['userAccountControl']);
    if (!entry) throw new Error(`no account ${sam} in the test DC`);
    const now = Number(entry.userAccountControl);
    await replace(entry.dn, 'userAccountControl', [String(on ? now | bit : now & ~bit)]);
  };
  /** a time as AD writes it: 100 ns steps since 1601 */
  const fileTime = (ms: number) => String(BigInt(Math.round(ms)) * 10_000n + 116_444_736_000_000_000n);
  const bySam = async (sam: string) => {
    const [entry] = await search(new EqualityFilter({ attribute: 'sAMAccountName', value: sam }), ['objectSid', 'userPrincipalName', 'mail']);
    if (!entry) throw new Error(`no account ${sam} in the test DC`);
    return entry;
  };
  const [domainEntry] = await (async () => {
    const client = new Client({ url: `ldap://${address}` });
    try {
      await client.bind(adminDN, adminPassword);
      return (await client.search(AD_BASE_DN, { scope: 'base', filter: '(objectClass=*)', attributes: ['objectSid'], explicitBufferAttributes: ['objectSid'] }))
        .searchEntries;
    } finally {
      await client.unbind().catch(() => undefined);
    }
  })();
  const domainSid = sidText(domainEntry!.objectSid as Buffer);
  const python = sambaPython();

  let stopped: Promise<void> | undefined;
  return {
    address,
    otherAddress,
    url: `ldap://${address}`,
    ldapsUrl: `ldaps://${address}`,
    baseDN: AD_BASE_DN,
    domain: AD_DOMAIN,
    dnsDomain: AD_DNS_DOMAIN,
    domainSid,
    bindDN: `CN=svc-login,OU=Service Accounts,${AD_BASE_DN}`,
    bindPassword,
    adminDN,
    adminPassword,
    caPem,
    otherCaPem: await readFile(path.join(dir, 'tls', 'other-ca.pem'), 'utf8'),
    async addOu(ou) {
      await asAdmin((client) => client.add(`${ou},${AD_BASE_DN}`, { objectClass: ['top', 'organizationalUnit'] }));
    },
    async addUser(sam, password, opts = {}) {
      // named as samba-tool names a user: "Given Surname" when given, else the account name
      const display = [opts.given, opts.surname].filter(Boolean).join(' ');
      const cn = display || sam;
      const dn = `CN=${cn},${opts.ou ?? 'CN=Users'},${AD_BASE_DN}`;
      const fields: Record<string, string | string[] | Buffer> = {
        objectClass: ['top', 'person', 'organizationalPerson', 'user'],
        sAMAccountName: sam,
        userPrincipalName: `${sam}@${AD_DNS_DOMAIN}`,
        ...(display ? { displayName: display } : {}),
        ...(opts.given ? { givenName: opts.given } : {}),
        ...(opts.surname ? { sn: opts.surname } : {}),
        ...(opts.mail ? { mail: opts.mail } : {}),
        // AD takes a password as the quoted string in UTF-16LE; a normal, enabled account
        unicodePwd: Buffer.from(`"${password}"`, 'utf16le'),
        userAccountControl: '512',
      };
      const attributes = Object.entries(fields).map(([type, v]) => new Attribute({ type, values: Buffer.isBuffer(v) ? [v] : Array.isArray(v) ? v : [v] }));
      await asAdmin((client) => client.add(dn, attributes));
      if (opts.mustChange) await replace(dn, 'pwdLastSet', ['0']);
      const entry = await bySam(sam);
      return { sam, password, dn: entry.dn, upn: String(entry.userPrincipalName), sid: sidText(entry.objectSid as Buffer), mail: opts.mail ?? null };
    },
    async addGroup(name, ou) {
      const dn = `CN=${name},${ou ?? 'CN=Users'},${AD_BASE_DN}`;
      await asAdmin((client) => client.add(dn, { objectClass: ['top', 'group'], sAMAccountName: name }));
      return (await bySam(name)).dn;
    },
    async addMembers(group, members) {
      const groupDn = (await bySam(group)).dn;
      const dns = await Promise.all(members.map(async (m) => (await bySam(m)).dn));
      await asAdmin((client) => client.modify(groupDn, new Change({ operation: 'add', modification: new Attribute({ type: 'member', values: dns }) })));
    },
    async removeMembers(group, members) {
      const groupDn = (await bySam(group)).dn;
      const dns = await Promise.all(members.map(async (m) => (await bySam(m)).dn));
      await asAdmin((client) => client.modify(groupDn, new Change({ operation: 'delete', modification: new Attribute({ type: 'member', values: dns }) })));
    },
    async disable(sam) {
      await accountControl(sam, 2, true);
    },
    async enable(sam) {
      await accountControl(sam, 2, false);
    },
    async setExpiry(sam, days) {
      await replace((await bySam(sam)).dn, 'accountExpires', [fileTime(Date.now() + days * 86_400_000)]);
    },
    async agePassword(sam, days) {
      // pwdLastSet takes only 0 and -1 over LDAP; the DC's own database takes a date with the
      // control that lets Samba's tools write it (DSDB_CONTROL_PASSWORD_BYPASS_LAST_SET_OID)
      const dn = (await bySam(sam)).dn;
      const script = [
        'import sys, time, ldb',
        'from samba.samdb import SamDB',
        'from samba.param import LoadParm',
        'from samba.auth import system_session',
        'lp = LoadParm(); lp.load(sys.argv[1])',
        "db = SamDB(url=lp.private_path('sam.ldb'), session_info=system_session(), lp=lp)",
        'm = ldb.Message(); m.dn = ldb.Dn(db, sys.argv[2])',
        'ft = int((time.time() - float(sys.argv[3]) * 86400 + 11644473600) * 10**7)',
        "m['pwdLastSet'] = ldb.MessageElement(str(ft), ldb.FLAG_MOD_REPLACE, 'pwdLastSet')",
        "db.modify(m, controls=['local_oid:1.3.6.1.4.1.7165.4.3.12:0'])",
      ].join('\n');
      await runTool(python, ['-c', script, conf, dn, String(days)]);
    },
    async lockOut(sam) {
      const upn = String((await bySam(sam)).userPrincipalName);
      for (let i = 0; i < LOCKOUT_THRESHOLD; i++) {
        const client = new Client({ url: `ldap://${address}` });
        await client.bind(upn, `wrong-${i}`).catch(() => undefined);
        await client.unbind().catch(() => undefined);
      }
    },
    async deleteUser(sam) {
      const dn = (await bySam(sam)).dn;
      await asAdmin((client) => client.del(dn));
    },
    async groupDN(name) {
      return (await bySam(name)).dn;
    },
    async sidOf(name) {
      return sidText((await bySam(name)).objectSid as Buffer);
    },
    async modify(dn, attribute, values) {
      await replace(dn, attribute, values);
    },
    async modifyAll(dn, changes) {
      await replaceAll(dn, changes);
    },
    stop() {
      stopped ??= (async () => {
        process.off('exit', killOnExit);
        await stopProcess(running);
        await rm(dir, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
}
