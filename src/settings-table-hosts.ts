import path from 'node:path';
import Joi from 'joi';
import type { SettingDef } from './settings-kinds.js';

/**
 * The settings of the host services the socket registry mediates besides the container daemon
 * (docs/sockets.md): Unbound, Kea DHCPv4, systemd and gRPC daemons. Each provider is registered
 * only when its socket (or bus, or file) is set.
 */

/** a DNS zone as written in SERVICE_DNS_ZONES: labels of letters, digits and hyphens, a trailing dot added when missing */
const ZONE = /^(?=.{1,253}\.?$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$/;

export const HOST_SETTINGS: readonly SettingDef[] = [
  {
    env: 'SERVICE_DNS_CONTROL_SOCKET',
    kind: 'string',
    rule: Joi.string().min(1),
    about: "Unbound's remote-control UNIX socket (`control-interface: /path`, `control-use-cert: no`); unset: no `dns` provider",
  },
  {
    env: 'SERVICE_DNS_ZONES',
    kind: 'list',
    rule: Joi.array().items(Joi.string().pattern(ZONE).messages({ 'string.pattern.base': '{{#label}} must be a DNS zone like home.arpa.' })),
    default: 'home.arpa.',
    about: "the only zones `dns` writes in (a reservation's PTR record may also go to its subnet's reverse zone)",
  },
  {
    env: 'SERVICE_DHCP_CONTROL_SOCKET',
    kind: 'string',
    rule: Joi.string().min(1),
    about: "Kea DHCPv4's control socket (`control-socket: {socket-type: unix, socket-name: /path}`, with the `lease_cmds` hook); unset: no `dhcp` provider",
  },
  {
    env: 'SERVICE_INIT_BUS',
    kind: 'string',
    rule: Joi.string().min(1),
    defaultText: 'the system bus',
    about: "the D-Bus address of systemd's manager (`unix:path=/run/dbus/system_bus_socket`); the `init` provider is registered when SERVICE_INIT_UNITS is set",
  },
  {
    env: 'SERVICE_INIT_UNITS',
    kind: 'list',
    rule: Joi.array().items(Joi.string().pattern(/^[A-Za-z0-9@:._*?\\[\]!^-]{1,256}$/)),
    about: 'the units `init` may show and act on, as globs with `*`, `?` and `[...]` (`nginx.service,app-*.service`); unset: no `init` provider',
  },
  {
    env: 'SERVICE_GRPC_PROVIDERS',
    kind: 'string',
    rule: Joi.string().min(1),
    about:
      'a JSON file naming gRPC daemons on UNIX sockets, their service definitions and the methods allowed ([docs/sockets/grpc.md](docs/sockets/grpc.md)); unset: none',
  },
  {
    env: 'SERVICE_HOST_SERVICE_TIMEOUT_MS',
    kind: 'string',
    rule: Joi.number().integer().min(100).max(120_000),
    default: '5000',
    about: 'how long a call to a host service (Unbound, Kea, systemd, a gRPC daemon) may take before it answers `unavailable`',
  },
];

export interface HostServicesConfig {
  /** Unbound's remote-control socket (null: no dns provider) */
  dnsControlSocket: string | null;
  /** the zones dns writes in, each ending in a dot, lower case */
  dnsZones: string[];
  /** Kea DHCPv4's control socket (null: no dhcp provider) */
  dhcpControlSocket: string | null;
  /** the D-Bus address of systemd's manager (null: the system bus) */
  initBus: string | null;
  /** unit globs the init provider may show and act on (empty: no init provider) */
  initUnits: string[];
  /** the JSON file of gRPC daemons (null: none) */
  grpcProvidersFile: string | null;
  /** every call to a host service is bounded by this */
  timeoutMs: number;
}

/** The variables of HOST_SETTINGS as the environment parse gives them back (checked, defaults applied). */
export interface HostEnv {
  SERVICE_DNS_CONTROL_SOCKET?: string;
  SERVICE_DNS_ZONES?: string[];
  SERVICE_DHCP_CONTROL_SOCKET?: string;
  SERVICE_INIT_BUS?: string;
  SERVICE_INIT_UNITS?: string[];
  SERVICE_GRPC_PROVIDERS?: string;
  SERVICE_HOST_SERVICE_TIMEOUT_MS: number;
}

export function hostServicesFrom(v: HostEnv): HostServicesConfig {
  return {
    dnsControlSocket: v.SERVICE_DNS_CONTROL_SOCKET ?? null,
    dnsZones: (v.SERVICE_DNS_ZONES ?? []).map((z) => (z.endsWith('.') ? z : `${z}.`).toLowerCase()),
    dhcpControlSocket: v.SERVICE_DHCP_CONTROL_SOCKET ?? null,
    initBus: v.SERVICE_INIT_BUS ?? null,
    initUnits: v.SERVICE_INIT_UNITS ?? [],
    grpcProvidersFile: v.SERVICE_GRPC_PROVIDERS ? path.resolve(v.SERVICE_GRPC_PROVIDERS) : null,
    timeoutMs: v.SERVICE_HOST_SERVICE_TIMEOUT_MS,
  };
}
