import { dialectOf } from '../../db/knex.js';
import type { HostServiceDeps } from '../host-service.js';
import { DhcpProvider, type DhcpProviderOptions } from './provider.js';

export { DhcpProvider };

/** Registers the `dhcp` provider when Kea's control socket is configured (SERVICE_DHCP_CONTROL_SOCKET). */
export function register(deps: HostServiceDeps): void {
  const host = deps.config.hostServices;
  if (!host.dhcpControlSocket) return;
  const options: DhcpProviderOptions = {
    socketPath: host.dhcpControlSocket,
    timeoutMs: host.timeoutMs,
    dnsZones: host.dnsZones,
    db: deps.db,
    postgres: dialectOf(deps.config) === 'postgres',
    // looked up at each reservation: the dns provider may come or go after this one
    dnsProvider: () => deps.registry.get('dns'),
  };
  deps.registry.register(DhcpProvider, { owner: 'core', options: { ...options } });
}
