import type { HostServiceDeps } from '../host-service.js';

/** Registers the `init` provider when it is configured (not built yet: registers nothing). */
export function register(_deps: HostServiceDeps): void {}
