import type { HostServiceDeps } from '../host-service.js';
import { DnsProvider, type DnsProviderOptions } from './provider.js';

export { DnsProvider } from './provider.js';

/**
 * Registers the `dns` provider when SERVICE_DNS_CONTROL_SOCKET is set. Boot does not wait for
 * Unbound: the first availability check (started here, in the background) puts the records of
 * the table back into Unbound when it has lost them, and later checks do again after a restart.
 */
export function register(deps: HostServiceDeps): void {
  const hs = deps.config.hostServices;
  if (!hs.dnsControlSocket) return;
  const options: DnsProviderOptions = { socketPath: hs.dnsControlSocket, zones: hs.dnsZones, db: deps.db, timeoutMs: hs.timeoutMs };
  const provider = deps.registry.register(DnsProvider, { owner: 'core', options: options as unknown as Record<string, unknown> });
  void provider.isAvailable().catch((err: unknown) => deps.log.warn({ err }, 'dns: first check of Unbound failed'));
}
