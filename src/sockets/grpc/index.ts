import type { HostServiceDeps } from '../host-service.js';
import { readProvidersFile } from './config.js';
import { GrpcProvider, type GrpcProviderOptions } from './provider.js';

export { GrpcProvider, methodPermission, type CallArgs, type GrpcProviderOptions } from './provider.js';
export { readProvidersFile, RESERVED_NAMES, type GrpcSpec } from './config.js';

/**
 * Registers one provider per daemon of the file SERVICE_GRPC_PROVIDERS names (none when unset).
 * The service starts whatever the file holds: a file that cannot be read is one error line and
 * no gRPC provider; an entry with problems is one error line naming each (`[1] (etcd): methods.x:
 * ...`) and is left out, the others are served. Returns the names registered.
 */
export function register(deps: HostServiceDeps): string[] {
  const file = deps.config.hostServices.grpcProvidersFile;
  if (!file) return [];
  const log = deps.log.child({ area: 'grpc', file });
  const { specs, problems } = readProvidersFile(file);
  for (const problem of problems) log.error({ problem }, `SERVICE_GRPC_PROVIDERS ${file}: ${problem}`);
  const registered: string[] = [];
  for (const spec of specs) {
    // the registry keeps one instance per class: each daemon gets a class of its own
    const Daemon = class extends GrpcProvider {};
    const options: GrpcProviderOptions = { spec, timeoutMs: deps.config.hostServices.timeoutMs };
    try {
      deps.registry.register(Daemon, { owner: 'core', options: options as unknown as Record<string, unknown> });
      registered.push(spec.name);
    } catch (err) {
      log.error({ provider: spec.name, reason: (err as Error).message }, `SERVICE_GRPC_PROVIDERS: ${spec.name} could not be registered; it is not served`);
    }
  }
  return registered;
}
