import type { Knex } from 'knex';
import type { EventBus } from '../bus/bus.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { SocketRegistry } from './registry.js';

/**
 * What a built-in host-service provider (dns, dhcp, init, grpc) is registered with: the
 * configuration, the database (what a provider must keep across restarts and instances), the
 * bus, a logger and the registry (where dhcp finds dns). Each area's `register(deps)` registers
 * its provider when its setting is present and does nothing otherwise. A daemon's client library
 * (dbus-next, @grpc/grpc-js) is loaded at the provider's first call, so a start without the
 * provider does not pay for it.
 */
export interface HostServiceDeps {
  config: Config;
  db: Knex;
  bus: EventBus;
  log: Logger;
  registry: SocketRegistry;
}

export type RegisterHostService = (deps: HostServiceDeps) => void;
