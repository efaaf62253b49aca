import type { HostServiceDeps } from '../host-service.js';

/** Registers the `dhcp` provider when it is configured (not built yet: registers nothing). */
export function register(_deps: HostServiceDeps): void {}
