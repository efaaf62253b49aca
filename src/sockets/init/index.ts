import type { HostServiceDeps } from '../host-service.js';
import { InitProvider, type InitProviderOptions } from './provider.js';

export { InitProvider, READ_PERMISSION, CONTROL_PERMISSION, type InitProviderOptions } from './provider.js';

/**
 * Registers the `init` provider when SERVICE_INIT_UNITS names units: systemd's manager on
 * SERVICE_INIT_BUS (unset: the system bus), every call bounded by SERVICE_HOST_SERVICE_TIMEOUT_MS.
 */
export function register(deps: HostServiceDeps): void {
  const { initUnits, initBus, timeoutMs } = deps.config.hostServices;
  if (!initUnits.length) return;
  const options: InitProviderOptions = { bus: initBus, units: initUnits, timeoutMs };
  deps.registry.register(InitProvider, { owner: 'core', options: options as Record<string, unknown> });
}
