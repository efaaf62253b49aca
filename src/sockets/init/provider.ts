import path from 'node:path';
import Joi from 'joi';
import type { Logger } from '../../log.js';
import { operation, SocketProvider, type ProviderCapabilities, type ProviderOperation } from '../base-provider.js';
import { SocketError } from '../errors.js';
import { callFailure, dbusErrorName, JOB, jobFailure, MANAGER, MANAGER_PATH, ManagerBus, UNIT } from './manager.js';
import { ACTIONS, isTemplate, isUnitName, RESULTS, unitArg, UnitAllowList, type UnitAction, type UnitInfo } from './units.js';

export interface InitProviderOptions {
  /** the D-Bus address of systemd's manager; null or absent: the system bus */
  bus?: string | null;
  /** globs of the units it may show and act on (SERVICE_INIT_UNITS): at least one */
  units?: string[];
  /** bound on every call to the manager (SERVICE_HOST_SERVICE_TIMEOUT_MS) */
  timeoutMs?: number;
  /** how long an availability answer is kept (default 1 s) */
  availabilityTtlMs?: number;
}

export const READ_PERMISSION = 'socket:init:read';
export const CONTROL_PERMISSION = 'socket:init:control';

const METHOD: Record<UnitAction, string> = { start: 'StartUnit', stop: 'StopUnit', restart: 'RestartUnit', reload: 'ReloadUnit' };
/** the states a unit passes through while a job runs on it */
const MOVING = new Set(['activating', 'deactivating', 'reloading']);
/** units read at once when listing units the manager has not loaded */
const LOAD_CONCURRENCY = 4;

const NO_ARGS = Joi.object<Record<string, never>, true>({});
const UNIT_ARGS = Joi.object<{ unit: string }, true>({ unit: unitArg.required() });
const ACTION_ARGS = Joi.object<{ unit: string; action: UnitAction }, true>({
  unit: unitArg.required(),
  action: Joi.string()
    .valid(...ACTIONS)
    .required(),
});

const text = (v: unknown): string => (typeof v === 'string' ? v : '');

/**
 * systemd's manager over D-Bus (the system bus, or SERVICE_INIT_BUS), only for the units that
 * SERVICE_INIT_UNITS matches: their states, and start, stop, restart and reload. Nothing else of
 * the manager is reachable through it.
 */
export class InitProvider extends SocketProvider {
  readonly name = 'init';
  readonly socket_path: string;
  readonly capabilities: ProviderCapabilities = { can_verify_mounts: false, can_repair_permissions: false };
  private readonly manager: ManagerBus;
  private readonly allowList: UnitAllowList;
  private readonly availabilityTtlMs: number;
  private readonly timeoutMs: number;
  private version: string | null = null;

  constructor(options: InitProviderOptions = {}, logger?: Logger) {
    super(options as Record<string, unknown>, logger);
    const globs = Array.isArray(options?.units) ? options.units.filter((g): g is string => typeof g === 'string' && g.length > 0) : [];
    if (!globs.length) throw new Error('the init provider needs at least one unit glob');
    this.allowList = new UnitAllowList(globs);
    this.timeoutMs = options.timeoutMs ?? 5000;
    this.manager = new ManagerBus(options.bus ?? null, this.timeoutMs, logger);
    this.socket_path = this.manager.where;
    this.availabilityTtlMs = options.availabilityTtlMs ?? 1000;
  }

  /** As the base's shareProbe says: a manager found away is asked again at once. */
  override isAvailable(): Promise<boolean> {
    return this.shareProbe(this.availabilityTtlMs, () => this.probe());
  }

  /** Asks the manager its version: it answers when the bus and the manager are both there. */
  private async probe(): Promise<void> {
    try {
      this.version = text(await this.manager.property(MANAGER_PATH, MANAGER, 'Version')) || null;
      this.seen(null);
    } catch (err) {
      this.seen(callFailure(err, `systemd's manager on ${this.socket_path}`).message);
    }
  }

  /** A call failed because the manager is away: say so until the next check. */
  private noted(err: SocketError): SocketError {
    if (err.code === 'unavailable') this.seen(err.message);
    return err;
  }

  private async ask<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw this.noted(callFailure(err, what));
    }
  }

  override async health_check(): Promise<Record<string, unknown>> {
    const available = await this.isAvailable();
    return { available, version: available ? this.version : null, units_allowed: [...this.allowList.globs] };
  }

  /** A valid name off the allow-list is refused before the manager is asked anything about it. */
  private checkAllowed(unit: string): void {
    if (!this.allowList.allows(unit)) throw new SocketError('not_allowed', `${unit} is not one of the units this service may manage (SERVICE_INIT_UNITS)`);
  }

  /**
   * The unit as the manager has it (loaded now if it was not), with its object path. An alias
   * resolves to the unit it names, which must be allowed as well: an allowed name cannot lead to
   * another unit.
   */
  private async load(unit: string): Promise<{ info: UnitInfo; path: string }> {
    this.checkAllowed(unit);
    const [objectPath] = await this.ask(`load ${unit}`, () => this.manager.call(MANAGER_PATH, MANAGER, 'LoadUnit', 's', [unit]));
    const p = text(objectPath);
    const props = await this.ask(`read ${unit}`, () => this.manager.properties(p, UNIT));
    const id = text(props.Id) || unit;
    if (id !== unit && !this.allowList.allows(id)) {
      throw new SocketError('not_allowed', `${unit} is another name of ${id}, which is not one of the units this service may manage (SERVICE_INIT_UNITS)`);
    }
    const info: UnitInfo = {
      unit: id,
      description: text(props.Description),
      load_state: text(props.LoadState),
      active_state: text(props.ActiveState),
      sub_state: text(props.SubState),
      unit_file_state: text(props.UnitFileState) || null,
    };
    if (info.load_state === 'not-found') throw new SocketError('not_found', `no unit ${unit}`);
    return { info, path: p };
  }

  async unitStatus(unit: string): Promise<{ unit: UnitInfo }> {
    return { unit: (await this.load(unit)).info };
  }

  /** Every unit the allow-list matches: those loaded now and those with a unit file (loaded to be read), by name. */
  async units(): Promise<{ units: UnitInfo[] }> {
    const globs = [...this.allowList.globs];
    // the manager filters by the same globs; the allow-list decides all the same
    const [loaded, files] = await Promise.all([
      this.ask('list units', () => this.manager.call(MANAGER_PATH, MANAGER, 'ListUnitsByPatterns', 'asas', [[], globs])),
      this.ask('list unit files', () => this.manager.call(MANAGER_PATH, MANAGER, 'ListUnitFilesByPatterns', 'asas', [[], globs])),
    ]);
    const fileStates = new Map<string, string>();
    for (const row of (files[0] ?? []) as unknown[][]) {
      const name = path.basename(text(row[0]));
      if (!fileStates.has(name)) fileStates.set(name, text(row[1]));
    }
    const found = new Map<string, UnitInfo>();
    for (const row of (loaded[0] ?? []) as unknown[][]) {
      const unit = text(row[0]);
      // a name something referred to, with no unit behind it: unit_status answers not_found for it
      if (!this.allowList.allows(unit) || text(row[2]) === 'not-found') continue;
      found.set(unit, {
        unit,
        description: text(row[1]),
        load_state: text(row[2]),
        active_state: text(row[3]),
        sub_state: text(row[4]),
        unit_file_state: fileStates.get(unit) || null,
      });
    }
    // a template names no unit; an alias's file is read as the unit it names
    const unloaded = [...fileStates.keys()].filter((u) => !found.has(u) && !isTemplate(u) && isUnitName(u) && this.allowList.allows(u));
    for (let i = 0; i < unloaded.length; i += LOAD_CONCURRENCY) {
      const batch = await Promise.all(
        unloaded.slice(i, i + LOAD_CONCURRENCY).map((u) =>
          this.load(u).then(
            ({ info }) => info,
            (err) => this.skipped(u, err),
          ),
        ),
      );
      for (const info of batch) if (info) found.set(info.unit, info);
    }
    return { units: [...found.values()].sort((a, b) => (a.unit < b.unit ? -1 : a.unit > b.unit ? 1 : 0)) };
  }

  /** A unit file that could not be read as an allowed unit (an alias off the list, gone meanwhile) is left out; the manager away is not. */
  private skipped(unit: string, err: unknown): null {
    if (err instanceof SocketError && err.code === 'unavailable') throw err;
    this.log?.debug({ unit, reason: (err as Error).message }, 'unit file left out of the list');
    return null;
  }

  /** Queues the job (mode "replace") and waits, within the timeout, for it to finish; answers the unit's state then. */
  async unitAction(unit: string, action: UnitAction): Promise<{ unit: string; action: UnitAction; job: string; active_state: string }> {
    const { info, path: unitPath } = await this.load(unit);
    const [job] = await this.ask(`${action} ${info.unit}`, () => this.manager.call(MANAGER_PATH, MANAGER, METHOD[action], 'ss', [info.unit, 'replace']));
    const jobPath = text(job);
    this.log?.info({ unit: info.unit, action, job: jobPath }, 'unit job queued');
    const state = await this.settle(jobPath, unitPath);
    const ended = jobFailure(this.manager.jobResult(jobPath), `${action} ${info.unit}`, state);
    if (ended) throw this.noted(ended);
    return { unit: info.unit, action, job: jobPath, active_state: state };
  }

  /** Waits until the job is gone (done, failed or replaced) and the unit is not between states, or the timeout ran out. */
  private async settle(jobPath: string, unitPath: string): Promise<string> {
    const deadline = Date.now() + this.timeoutMs;
    const activeState = async () => text(await this.ask('read the unit', () => this.manager.property(unitPath, UNIT, 'ActiveState')));
    let jobDone = false;
    for (;;) {
      if (!jobDone) {
        try {
          await this.manager.property(jobPath, JOB, 'State');
        } catch (err) {
          const name = dbusErrorName(err);
          if (name === 'org.freedesktop.DBus.Error.UnknownObject' || name === 'org.freedesktop.systemd1.NoSuchJob') jobDone = true;
          else throw this.noted(callFailure(err, 'follow the job'));
        }
      }
      const state = await activeState();
      if ((jobDone && !MOVING.has(state)) || Date.now() >= deadline) return state;
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  override operations(): Record<string, ProviderOperation> {
    return {
      health: operation({
        schema: NO_ARGS,
        permission: null,
        requires_available: false,
        run: () => this.health_check(),
        result: RESULTS.health,
        http: {
          method: 'GET',
          summary: "systemd's manager: reachable, its version and the units allowed",
          response: 'a manager that does not answer is available: false, not an error',
        },
      }),
      units: operation({
        schema: NO_ARGS,
        permission: READ_PERMISSION,
        run: () => this.units(),
        result: RESULTS.units,
        http: {
          method: 'GET',
          summary: 'The units SERVICE_INIT_UNITS allows, loaded or not',
          description: 'Units the manager has loaded and units with a unit file, each matched against the globs of SERVICE_INIT_UNITS; templates are left out.',
          response: 'the units, by name',
        },
      }),
      unit_status: operation({
        schema: UNIT_ARGS,
        permission: READ_PERMISSION,
        run: (a) => this.unitStatus(a.unit),
        result: RESULTS.unit_status,
        http: {
          method: 'GET',
          summary: 'The state of one allowed unit',
          response: 'the unit',
          responses: {
            403: `forbidden: the caller lacks ${READ_PERMISSION}; or not_allowed: the unit (or the unit an alias names) is off SERVICE_INIT_UNITS`,
            404: 'not_found: the manager knows no such unit',
          },
        },
      }),
      unit_action: operation({
        schema: ACTION_ARGS,
        permission: CONTROL_PERMISSION,
        run: (a) => this.unitAction(a.unit, a.action),
        // a unit name and a verb: nothing secret
        audited: (a) => ({ unit: a.unit, action: a.action }),
        result: RESULTS.unit_action,
        http: {
          method: 'POST',
          summary: 'Start, stop, restart or reload one allowed unit',
          description:
            'Queues the job with mode "replace" and waits (within SERVICE_HOST_SERVICE_TIMEOUT_MS) for it to finish. A reload of a unit that cannot reload is a conflict (409).',
          response: 'the job and the active state the unit reached',
          responses: {
            403: `forbidden: the caller lacks ${CONTROL_PERMISSION}; or step_up_required: verify the second factor again; or not_allowed: the unit (or the unit an alias names) is off SERVICE_INIT_UNITS`,
            404: 'not_found: the manager knows no such unit',
            409: 'conflict: the manager refused the job for this unit as it is (e.g. a reload of a unit without ExecReload, a masked unit, a conflicting transaction)',
          },
        },
      }),
    };
  }

  override permissions(): Array<{ id: string; description: string }> {
    return [
      { id: READ_PERMISSION, description: 'see the systemd units SERVICE_INIT_UNITS allows and their states' },
      { id: CONTROL_PERMISSION, description: 'start, stop, restart and reload the systemd units SERVICE_INIT_UNITS allows' },
    ];
  }

  override async close(): Promise<void> {
    this.manager.close();
  }
}
