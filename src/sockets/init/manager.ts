import type { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import type * as DbusNext from 'dbus-next';
import type { DBusError as DBusErrorType, Message as MessageType, MessageBus } from 'dbus-next';
import type { Logger } from '../../log.js';
import { SocketError } from '../errors.js';

/**
 * The few calls the `init` provider makes to systemd's manager over D-Bus, each bounded by the
 * host-service timeout. One connection, made on the first call; a connection that fails (the bus
 * hangs up, does not answer in time, or cannot be reached) is dropped, and the next call makes a
 * new one: a bus or manager that comes back is used again without a restart.
 */

export const SYSTEMD = 'org.freedesktop.systemd1';
export const MANAGER_PATH = '/org/freedesktop/systemd1';
export const MANAGER = 'org.freedesktop.systemd1.Manager';
export const UNIT = 'org.freedesktop.systemd1.Unit';
export const JOB = 'org.freedesktop.systemd1.Job';
const PROPERTIES = 'org.freedesktop.DBus.Properties';

/** the system bus when no address is configured (libdbus' default, or the variable it reads) */
export function systemBusAddress(): string {
  return process.env.DBUS_SYSTEM_BUS_ADDRESS || 'unix:path=/run/dbus/system_bus_socket';
}

type DbusModule = typeof DbusNext;
let dbusModule: Promise<DbusModule> | null = null;

/** dbus-next, loaded on the first call (a service without the provider never loads it) */
function dbus(): Promise<DbusModule> {
  dbusModule ??= import('dbus-next').then((m) => ((m as unknown as { default?: DbusModule }).default ?? m) as DbusModule);
  return dbusModule;
}

type BusClass = new (connection: unknown) => MessageBus;
let guardedBus: BusClass | null = null;

/**
 * A bus connection to `address`. dbus-next's own constructor sends Hello and, when the peer
 * answers it with an error (an address that leads to a D-Bus peer that is not a bus), rethrows
 * it from a promise nobody holds: an unhandled rejection, the end of the process. This subclass
 * turns that answer into the connection's 'error' event, like every other failure of it.
 */
function openBus(address: string): MessageBus {
  if (!guardedBus) {
    const Base = createRequire(import.meta.url)('dbus-next/lib/bus.js') as BusClass;
    guardedBus = class extends Base {
      override call(msg: MessageType): Promise<MessageType | null> {
        const reply = super.call(msg);
        if (msg.member !== 'Hello' || msg.interface !== 'org.freedesktop.DBus') return reply;
        return reply.catch((err: unknown) => {
          this.emit('error', err instanceof Error ? err : new Error(String(err)));
          return new Promise<never>(() => undefined);
        });
      }
    };
  }
  const createConnection = createRequire(import.meta.url)('dbus-next/lib/connection.js') as (opts: { busAddress: string }) => unknown;
  return new guardedBus(createConnection({ busAddress: address }));
}

interface Connection {
  bus: MessageBus;
  /** resolves once the bus said Hello back */
  ready: Promise<void>;
  /** rejects when the connection fails: every call waiting on it fails at once, not at its timeout */
  broken: Promise<never>;
  fail(err: Error): void;
  /** the manager's unique name on the bus (the sender of its signals), once known */
  managerName?: string;
}

/** dbus-next's message type of a signal (MessageType.SIGNAL) */
const SIGNAL_TYPE = 4;
/** the bus daemon's own name: what it alone sends as */
const BUS_DAEMON = 'org.freedesktop.DBus';

/** errors of the bus itself, not of the manager's: the manager (or the bus) is away */
const AWAY = new Set([
  'org.freedesktop.DBus.Error.ServiceUnknown',
  'org.freedesktop.DBus.Error.NameHasNoOwner',
  'org.freedesktop.DBus.Error.NoReply',
  'org.freedesktop.DBus.Error.Disconnected',
  'org.freedesktop.DBus.Error.Timeout',
  'org.freedesktop.DBus.Error.TimedOut',
  'org.freedesktop.DBus.Error.NoServer',
  'org.freedesktop.DBus.Error.LimitsExceeded',
]);

/** the manager refused what was asked of this unit as it is now (masked, not reloadable, a conflicting job...) */
const REFUSED = new Set([
  'org.freedesktop.systemd1.JobTypeNotApplicable',
  'org.freedesktop.systemd1.UnitMasked',
  'org.freedesktop.systemd1.UnitInactive',
  'org.freedesktop.systemd1.OnlyByDependency',
  'org.freedesktop.systemd1.TransactionIsDestructive',
  'org.freedesktop.systemd1.TransactionJobsConflicting',
  'org.freedesktop.systemd1.TransactionOrderIsCyclic',
  'org.freedesktop.systemd1.LoadFailed',
  'org.freedesktop.systemd1.BadUnitSetting',
  'org.freedesktop.systemd1.ShuttingDown',
  'org.freedesktop.systemd1.UnitGenerated',
  'org.freedesktop.systemd1.UnitLinked',
]);

/** the manager does not let this service's user do it: the host's polkit rules (docs/sockets/init.md) */
const DENIED = new Set(['org.freedesktop.DBus.Error.AccessDenied', 'org.freedesktop.DBus.Error.InteractiveAuthorizationRequired']);

/** how many finished jobs' results are kept: a job's caller reads its own within moments */
const JOB_RESULTS_KEPT = 256;

export class ManagerBus {
  private connection: Connection | null = null;
  /** the result the manager gave each job as it removed it (JobRemoved), by job path, the last few */
  private readonly jobResults = new Map<string, string>();

  constructor(
    /** the bus address; null: the system bus */
    private readonly address: string | null,
    private readonly timeoutMs: number,
    private readonly log?: Logger,
  ) {}

  /** the address connected to, as an administrator would write it */
  get where(): string {
    return this.address ?? systemBusAddress();
  }

  /** Calls a method of the manager's bus name; resolves with the reply's body. */
  async call(path: string, iface: string, member: string, signature = '', body: unknown[] = []): Promise<unknown[]> {
    const { Message, MessageFlag } = await dbus();
    const deadline = Date.now() + this.timeoutMs;
    const conn = this.connect();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${this.timeoutMs} ms`)), Math.max(1, deadline - Date.now()));
    });
    try {
      await Promise.race([conn.ready, conn.broken, timeout]);
      const msg: MessageType = new Message({
        destination: SYSTEMD,
        path,
        interface: iface,
        member,
        signature,
        body,
        // never start a manager through bus activation: a manager that is away is unavailable
        flags: MessageFlag.NO_AUTO_START,
      });
      const reply = await Promise.race([conn.bus.call(msg), conn.broken, timeout]);
      return reply?.body ?? [];
    } catch (err) {
      if (isDbusError(err)) throw err;
      this.drop(conn, err as Error);
      throw new SocketError('unavailable', `systemd's manager on ${this.where} is unavailable: ${(err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Reads one property of an object of the manager. */
  async property(path: string, iface: string, name: string): Promise<unknown> {
    const [variant] = await this.call(path, PROPERTIES, 'Get', 'ss', [iface, name]);
    return (variant as { value?: unknown } | undefined)?.value;
  }

  /** Reads every property of an interface of an object of the manager. */
  async properties(path: string, iface: string): Promise<Record<string, unknown>> {
    const [all] = await this.call(path, PROPERTIES, 'GetAll', 's', [iface]);
    const out: Record<string, unknown> = {};
    for (const [key, variant] of Object.entries((all ?? {}) as Record<string, { value?: unknown }>)) out[key] = variant?.value;
    return out;
  }

  /**
   * How the manager ended a job: "done", "skipped", "failed", "canceled", "timeout", "dependency",
   * "invalid", ... (its JobRemoved signal, read before the job's object is gone); null when not
   * heard (the connection could not listen for it).
   */
  jobResult(jobPath: string): string | null {
    return this.jobResults.get(jobPath) ?? null;
  }

  /** Closes the connection (the next call makes a new one). */
  close(): void {
    if (this.connection) this.drop(this.connection, new Error('closed'));
  }

  private connect(): Connection {
    if (this.connection) return this.connection;
    let fail!: (err: Error) => void;
    const broken = new Promise<never>((_, reject) => (fail = reject));
    broken.catch(() => undefined);
    let bus: MessageBus;
    try {
      bus = openBus(this.where);
    } catch (err) {
      // an address dbus-next cannot use: no connection to keep
      const failed = Promise.reject(err as Error);
      failed.catch(() => undefined);
      return { bus: null as unknown as MessageBus, ready: failed, broken: failed, fail: () => undefined };
    }
    // the manager's JobRemoved signals, asked for before any job is queued on this connection
    const ready = new Promise<void>((resolve) => bus.once('connect', () => resolve())).then(() => this.listenForJobs(conn));
    const conn: Connection = { bus, ready, broken, fail };
    bus.on('message', (msg: MessageType) => {
      if (msg.type !== SIGNAL_TYPE) return;
      // the manager re-executed (an upgrade) or restarted under a new unique name: its signals
      // come from that one now (only the bus itself sends as org.freedesktop.DBus)
      if (msg.sender === BUS_DAEMON && msg.member === 'NameOwnerChanged' && Array.isArray(msg.body) && msg.body[0] === SYSTEMD) {
        conn.managerName = String(msg.body[2] ?? '');
        if (conn.managerName) void this.subscribe(conn);
        return;
      }
      // the manager's own signal only: anyone on the bus may send a signal to this connection
      // directly, whatever its match rules, and a forged result would pass for the job's
      if (!conn.managerName || msg.sender !== conn.managerName || msg.path !== MANAGER_PATH) return;
      if (msg.interface !== MANAGER || msg.member !== 'JobRemoved' || !Array.isArray(msg.body)) return;
      // (id, job path, unit, result)
      this.jobResults.set(String(msg.body[1]), String(msg.body[3]));
      if (this.jobResults.size > JOB_RESULTS_KEPT) this.jobResults.delete(this.jobResults.keys().next().value!);
    });
    // an emitter without an 'error' listener throws: every failure of the connection lands here
    bus.on('error', (err: unknown) => this.drop(conn, err instanceof Error ? err : new Error(String(err))));
    // the bus hanging up ends the stream without an error: calls waiting for a reply fail now
    (bus as unknown as { _connection?: EventEmitter })._connection?.on('end', () => this.drop(conn, new Error('the bus closed the connection')));
    this.connection = conn;
    return conn;
  }

  /**
   * A match for the manager's JobRemoved and its Subscribe (signals go out to subscribers only).
   * Without them a job's end is still seen, by its object going, but not its result: said, not fatal.
   */
  private async listenForJobs(conn: Connection): Promise<void> {
    const { Message } = await dbus();
    const bus = conn.bus;
    const jobs = `type='signal',sender='${SYSTEMD}',path='${MANAGER_PATH}',interface='${MANAGER}',member='JobRemoved'`;
    const owner = `type='signal',sender='${BUS_DAEMON}',interface='${BUS_DAEMON}',member='NameOwnerChanged',arg0='${SYSTEMD}'`;
    const daemon = { destination: BUS_DAEMON, path: '/org/freedesktop/DBus', interface: BUS_DAEMON };
    try {
      for (const rule of [jobs, owner]) await bus.call(new Message({ ...daemon, member: 'AddMatch', signature: 's', body: [rule] }));
      // signals carry the sender's unique name: the manager's, to tell its own from forged ones
      const reply = await bus.call(new Message({ ...daemon, member: 'GetNameOwner', signature: 's', body: [SYSTEMD] }));
      conn.managerName = String(reply?.body?.[0] ?? '');
    } catch (err) {
      // the manager not on the bus yet: NameOwnerChanged names it when it comes
      this.log?.debug({ bus: this.where, reason: (err as Error).message }, "not listening for systemd's job results yet");
      return;
    }
    await this.subscribe(conn);
  }

  /** The manager's Subscribe: it sends its signals to subscribers only. */
  private async subscribe(conn: Connection): Promise<void> {
    const { Message, MessageFlag } = await dbus();
    try {
      await conn.bus.call(new Message({ destination: SYSTEMD, path: MANAGER_PATH, interface: MANAGER, member: 'Subscribe', flags: MessageFlag.NO_AUTO_START }));
    } catch (err) {
      this.log?.debug({ bus: this.where, reason: (err as Error).message }, "not listening for systemd's job results");
    }
  }

  private drop(conn: Connection, err: Error): void {
    conn.fail(err);
    if (this.connection !== conn) return;
    this.connection = null;
    // a manager met on the next connection may number its jobs anew
    this.jobResults.clear();
    this.log?.debug({ bus: this.where, reason: err.message }, 'D-Bus connection to systemd dropped');
    try {
      conn.bus?.disconnect();
      (conn.bus as unknown as { _connection?: { stream?: { destroy?: () => void } } })?._connection?.stream?.destroy?.();
    } catch {
      // already gone
    }
  }
}

export function isDbusError(err: unknown): err is DBusErrorType {
  return err instanceof Error && err.name === 'DBusError' && typeof (err as DBusErrorType).type === 'string';
}

/** The error name of a failed call (null: not an answer of the bus or the manager). */
export function dbusErrorName(err: unknown): string | null {
  return isDbusError(err) ? err.type : null;
}

/**
 * What a failed call means to the caller: the manager away is `unavailable`, a unit it does not
 * know `not_found`, a refusal of the unit's state or settings `conflict`, anything else `failed`
 * (with the manager's own words, which name units and job types, never a secret).
 */
export function callFailure(err: unknown, what: string): SocketError {
  if (err instanceof SocketError) return err;
  if (!isDbusError(err)) return new SocketError('failed', `${what}: ${(err as Error)?.message ?? String(err)}`);
  const text = err.text || err.type;
  if (AWAY.has(err.type) || err.type.startsWith('org.freedesktop.DBus.Error.Spawn.')) {
    return new SocketError('unavailable', `systemd's manager is not on the bus (${err.type.replace(/^org\.freedesktop\.DBus\.Error\./, '')})`);
  }
  if (err.type === 'org.freedesktop.systemd1.NoSuchUnit' || err.type === 'org.freedesktop.DBus.Error.UnknownObject') {
    return new SocketError('not_found', `${what}: ${text}`);
  }
  if (REFUSED.has(err.type)) return new SocketError('conflict', `${what}: ${text}`);
  if (DENIED.has(err.type)) {
    return new SocketError(
      'failed',
      `${what}: systemd does not let this service's user do it (a polkit rule must allow it, see the init provider's documentation)`,
    );
  }
  return new SocketError('failed', `${what}: ${text} (${err.type})`);
}

/** job results that refuse the job for the unit as it is (systemctl: "is not active, cannot reload") */
const JOB_REFUSED: Record<string, string> = {
  invalid: 'the unit is not active, so it cannot reload',
  once: 'the unit was started once already and cannot be started again',
  unsupported: 'this operation is not supported for the unit (or its type) on this system',
};

/** job results that mean it did not get done (systemctl's own words, without its advice to read the journal) */
const JOB_FAILED: Record<string, string> = {
  failed: 'the job failed',
  dependency: 'a job of a unit it depends on failed',
  timeout: 'the job timed out',
  canceled: 'the job was canceled (another job replaced it)',
  assert: 'an assertion of the unit failed',
  collected: 'the queued job was garbage collected',
};

/**
 * What a finished job's result means to its caller, as systemctl reads it: "done" and "skipped"
 * (a condition of the unit was not met) are success (null); a job the unit as it is refuses is
 * `conflict`; any other result is `failed`, with the state the unit is in. An unknown result
 * (a newer systemd's) is `failed` with its name; no result heard is success, as before listening.
 */
export function jobFailure(result: string | null, what: string, activeState: string): SocketError | null {
  if (result === null || result === 'done' || result === 'skipped') return null;
  if (JOB_REFUSED[result]) return new SocketError('conflict', `${what}: ${JOB_REFUSED[result]} (job result "${result}", the unit is ${activeState})`);
  return new SocketError('failed', `${what}: ${JOB_FAILED[result] ?? 'the job ended'} (job result "${result}", the unit is ${activeState})`);
}
