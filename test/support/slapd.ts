/**
 * Starts a throwaway OpenLDAP slapd on 127.0.0.1 with a small directory, for tests that need a
 * real LDAP server. Needs Debian's `slapd` and `ldap-utils` packages (slapd, slapadd, schemas).
 *
 * Directory (suffix dc=example,dc=org):
 *   ou=people    inetOrgPerson users, see LDAP_PEOPLE (uid, cn, mail, userPassword)
 *   ou=groups    groupOfNames admins, developers, staff (member = user DNs)
 *   ou=services  cn=reader, the service account returned as bindDN
 * Plain OpenLDAP has neither objectSid nor (without the memberof overlay) memberOf, so a tiny
 * schema in the temp dir defines both with Active Directory's OIDs and an auxiliary class
 * `adStyleAccount` carrying them; user `dave` looks like an AD account (binary objectSid,
 * memberOf values written in AD's upper-case, spaced style). Everyone else has no memberOf, so
 * group membership must be found through the groupOfNames entries.
 *
 * ACLs: userPassword is only usable for binds; by default anonymous clients can bind but read
 * nothing (a service bind is needed to search), `anonymousRead: true` lets them read entries.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { access, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { unusedPort } from '../auth/helpers.js';
import { runTool } from './run-tool.js';

const SLAPD = '/usr/sbin/slapd';
const SLAPADD = '/usr/sbin/slapadd';
const SCHEMA_DIR = '/etc/ldap/schema';
const MODULE_DIR = '/usr/lib/ldap';
const READY_TIMEOUT_MS = 5000;

export const LDAP_BASE_DN = 'dc=example,dc=org';
export const LDAP_GROUPS = {
  admins: `cn=admins,ou=groups,${LDAP_BASE_DN}`,
  developers: `cn=developers,ou=groups,${LDAP_BASE_DN}`,
  staff: `cn=staff,ou=groups,${LDAP_BASE_DN}`,
} as const;

export interface LdapPerson {
  uid: string;
  dn: string;
  password: string;
  cn: string;
  displayName?: string;
  mail?: string;
  /** string form of the binary objectSid stored for this person, if any */
  objectSid?: string;
}

const person = (p: Omit<LdapPerson, 'dn'>): LdapPerson => ({ ...p, dn: `uid=${p.uid},ou=people,${LDAP_BASE_DN}` });

/** The people in the directory; tests log in with these. */
export const LDAP_PEOPLE = {
  /** member of admins and developers (groupOfNames) */
  alice: person({ uid: 'alice', password: 'alice-Secret-1', cn: 'Alice Liddell', displayName: 'Alice L.', mail: 'alice@example.org' }),
  /** member of developers and staff; no displayName (cn is the display name) */
  bob: person({ uid: 'bob', password: 'bob-Secret-2', cn: 'Bob Builder', mail: 'bob@example.org' }),
  /** member of staff only; her mail is meant to match a local account created later by a linker test */
  carol: person({ uid: 'carol', password: 'carol-Secret-3', cn: 'Carol Local', mail: 'carol@example.org' }),
  /** AD-style: binary objectSid and memberOf (admins + an unmapped Domain Users group); no mail */
  dave: person({ uid: 'dave', password: 'dave-Secret-4', cn: 'Dave Domain', objectSid: 'S-1-5-21-1004336348-1177238915-682003330-1104' }),
  /** uid containing a filter metacharacter: proves the input is escaped, not rejected */
  qbert: person({ uid: 'q*bert', password: 'qbert-Secret-5', cn: 'Q Bert', mail: 'qbert@example.org' }),
  /** twin1 and twin2 share one mail: a (mail={username}) filter matches both */
  twin1: person({ uid: 'twin1', password: 'twin-Secret-6', cn: 'Twin One', mail: 'twins@example.org' }),
  twin2: person({ uid: 'twin2', password: 'twin-Secret-6', cn: 'Twin Two', mail: 'twins@example.org' }),
} as const;

// dave's objectSid as stored: S-1-5-21-1004336348-1177238915-682003330-1104
const DAVE_OBJECT_SID_BASE64 = 'AQUAAAAAAAUVAAAA3PTcO4M9K0aCi6YoUAQAAA==';
const DAVE_MEMBER_OF = ['CN=Admins, OU=Groups, DC=Example, DC=Org', 'CN=Domain Users,CN=Users,DC=example,DC=org'];

export interface Slapd {
  url: string;
  port: number;
  baseDN: string;
  /** service account allowed to search */
  bindDN: string;
  bindPassword: string;
  /** the database rootdn, for tests that need to write */
  rootDN: string;
  rootPassword: string;
  /** stops slapd and removes its temp dir; safe to call twice */
  stop(): Promise<void>;
}

export interface StartSlapdOptions {
  /** let anonymous clients read entries (not passwords); default false */
  anonymousRead?: boolean;
}

/** OpenLDAP's salted SHA-1 password scheme, so no cleartext password sits in the directory. */
function ssha(password: string): string {
  const salt = randomBytes(8);
  const digest = createHash('sha1').update(password).update(salt).digest();
  return `{SSHA}${Buffer.concat([digest, salt]).toString('base64')}`;
}

const CUSTOM_SCHEMA = `# objectSid and memberOf as Active Directory defines them, for AD-style test accounts.
attributetype ( 1.2.840.113556.1.4.146 NAME 'objectSid'
  DESC 'AD security identifier (binary SID)'
  EQUALITY octetStringMatch
  SYNTAX 1.3.6.1.4.1.1466.115.121.1.40 SINGLE-VALUE )
attributetype ( 1.2.840.113556.1.2.102 NAME 'memberOf'
  DESC 'AD group membership back-link'
  EQUALITY distinguishedNameMatch
  SYNTAX 1.3.6.1.4.1.1466.115.121.1.12 )
objectclass ( 1.3.6.1.4.1.4203.666.100.1 NAME 'adStyleAccount'
  DESC 'test-only: lets an entry carry AD attributes'
  SUP top AUXILIARY MAY ( objectSid $ memberOf ) )
`;

function buildConfig(dir: string, rootDN: string, rootPassword: string, options: StartSlapdOptions): string {
  const schemas = ['core', 'cosine', 'inetorgperson', 'nis'].map((s) => `include ${SCHEMA_DIR}/${s}.schema`);
  const readers = options.anonymousRead ? 'by * read' : 'by users read by anonymous auth';
  return [
    ...schemas,
    `include ${path.join(dir, 'ad-style.schema')}`,
    `pidfile ${path.join(dir, 'slapd.pid')}`,
    `argsfile ${path.join(dir, 'slapd.args')}`,
    `modulepath ${MODULE_DIR}`,
    'moduleload back_mdb',
    'database mdb',
    `suffix "${LDAP_BASE_DN}"`,
    `rootdn "${rootDN}"`,
    `rootpw ${ssha(rootPassword)}`,
    `directory ${path.join(dir, 'db')}`,
    'maxsize 16777216',
    // Passwords are only ever usable to bind, never readable.
    'access to attrs=userPassword by self write by anonymous auth by * none',
    `access to * ${readers}`,
    '',
  ].join('\n');
}

function buildLdif(service: { dn: string; password: string }): string {
  const entries: string[] = [
    `dn: ${LDAP_BASE_DN}\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example Org`,
    `dn: ou=people,${LDAP_BASE_DN}\nobjectClass: organizationalUnit\nou: people`,
    `dn: ou=groups,${LDAP_BASE_DN}\nobjectClass: organizationalUnit\nou: groups`,
    `dn: ou=services,${LDAP_BASE_DN}\nobjectClass: organizationalUnit\nou: services`,
    `dn: ${service.dn}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\ncn: reader\nuserPassword: ${ssha(service.password)}`,
  ];
  for (const p of Object.values(LDAP_PEOPLE)) {
    // slapadd wants all values of one attribute together, so the AD class goes next to inetOrgPerson.
    const adStyle = p.uid === 'dave';
    const lines = [
      `dn: ${p.dn}`,
      'objectClass: inetOrgPerson',
      ...(adStyle ? ['objectClass: adStyleAccount'] : []),
      `uid: ${p.uid}`,
      `cn: ${p.cn}`,
      `sn: ${p.cn.split(' ').pop()}`,
    ];
    if (p.displayName) lines.push(`displayName: ${p.displayName}`);
    if (p.mail) lines.push(`mail: ${p.mail}`);
    lines.push(`userPassword: ${ssha(p.password)}`);
    if (adStyle) {
      lines.push(`objectSid:: ${DAVE_OBJECT_SID_BASE64}`, ...DAVE_MEMBER_OF.map((g) => `memberOf: ${g}`));
    }
    entries.push(lines.join('\n'));
  }
  const members: Record<keyof typeof LDAP_GROUPS, LdapPerson[]> = {
    admins: [LDAP_PEOPLE.alice],
    developers: [LDAP_PEOPLE.alice, LDAP_PEOPLE.bob],
    staff: [LDAP_PEOPLE.bob, LDAP_PEOPLE.carol],
  };
  for (const [cn, people] of Object.entries(members)) {
    entries.push([`dn: cn=${cn},ou=groups,${LDAP_BASE_DN}`, 'objectClass: groupOfNames', `cn: ${cn}`, ...people.map((p) => `member: ${p.dn}`)].join('\n'));
  }
  return entries.join('\n\n') + '\n';
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
  await exited;
  clearTimeout(timer);
}

/** Spawns slapd on `port` and resolves once it accepts TCP connections; rejects if it exits first. */
async function launch(conf: string, port: number): Promise<ChildProcess> {
  const child = spawn(SLAPD, ['-h', `ldap://127.0.0.1:${port}/`, '-f', conf, '-d', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  let exitInfo: string | null = null;
  child.once('exit', (code, signal) => (exitInfo = `code ${code}, signal ${signal}`));
  child.once('error', (err) => (exitInfo = err.message));

  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (exitInfo) throw new Error(`slapd exited before listening (${exitInfo}): ${stderr.trim()}`);
    if (await canConnect(port)) return child;
    await new Promise((r) => setTimeout(r, 50));
  }
  await stopProcess(child);
  throw new Error(`slapd did not accept connections on 127.0.0.1:${port} within ${READY_TIMEOUT_MS} ms: ${stderr.trim()}`);
}

export async function startSlapd(options: StartSlapdOptions = {}): Promise<Slapd> {
  for (const binary of [SLAPD, SLAPADD, `${SCHEMA_DIR}/inetorgperson.schema`, `${MODULE_DIR}/back_mdb.so`]) {
    try {
      await access(binary, fsConstants.R_OK);
    } catch {
      throw new Error(
        `LDAP tests need a real OpenLDAP server: ${binary} is missing. Install Debian's slapd and ldap-utils packages (apt-get install -y slapd ldap-utils).`,
      );
    }
  }

  const dir = await mkdtemp(path.join(os.tmpdir(), 'slapd-test-'));
  const rootDN = `cn=admin,${LDAP_BASE_DN}`;
  const rootPassword = randomBytes(12).toString('hex');
  const service = { dn: `cn=reader,ou=services,${LDAP_BASE_DN}`, password: randomBytes(12).toString('hex') };
  let child: ChildProcess | undefined;
  let port = 0;
  try {
    await mkdir(path.join(dir, 'db'));
    await writeFile(path.join(dir, 'ad-style.schema'), CUSTOM_SCHEMA);
    const conf = path.join(dir, 'slapd.conf');
    await writeFile(conf, buildConfig(dir, rootDN, rootPassword, options), { mode: 0o600 });
    const ldif = path.join(dir, 'data.ldif');
    await writeFile(ldif, buildLdif(service), { mode: 0o600 });
    await runTool(SLAPADD, ['-q', '-f', conf, '-l', ldif]);

    // The port is probed free then handed to slapd; another process may grab it in between, so retry.
    let lastError: unknown;
    for (let attempt = 0; attempt < 3 && !child; attempt++) {
      port = await unusedPort();
      try {
        child = await launch(conf, port);
      } catch (err) {
        lastError = err;
      }
    }
    if (!child) throw lastError;
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }

  const running = child;
  // Never leave a slapd behind if the test process ends without calling stop().
  const killOnExit = () => running.kill('SIGKILL');
  process.once('exit', killOnExit);
  let stopped: Promise<void> | undefined;
  return {
    url: `ldap://127.0.0.1:${port}`,
    port,
    baseDN: LDAP_BASE_DN,
    bindDN: service.dn,
    bindPassword: service.password,
    rootDN,
    rootPassword,
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
