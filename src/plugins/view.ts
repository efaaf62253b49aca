import path from 'node:path';
import type { PluginManifest } from './manifest.js';
import type { PluginState, PluginView } from './types.js';
import type { SocketRegistry } from '../sockets/registry.js';

/** What the admin API shows of a plugin; `registered`: the socket providers it registered. */
export function pluginView(
  rec: { key: string; folder: string; manifest: PluginManifest | null; enabled: boolean; state: PluginState; error: string | null; updatedAt: number },
  registered: string[],
): PluginView {
  const m = rec.manifest;
  return {
    id: rec.key,
    folder: path.basename(rec.folder),
    name: m?.name ?? null,
    version: m?.version ?? null,
    description: m?.description ?? null,
    enabled: rec.enabled,
    state: rec.state,
    error: rec.error,
    permissions: m ? { subscribe: [...m.permissions.subscribe], emit: [...m.permissions.emit] } : { subscribe: [], emit: [] },
    permissions_declared: m ? m.permissions_declared.map((d) => ({ id: `plugin:${m.id}:${d.id}`, description: d.description })) : [],
    roles: m ? m.roles.map((r) => ({ ...r })) : [],
    routes: m ? m.routes.map((r) => ({ ...r })) : [],
    socket_providers: {
      provides: m ? [...m.socket_providers.provides] : [],
      uses: m ? [...m.socket_providers.uses] : [],
      registered,
    },
    auth_providers: m ? [...m.auth_providers] : [],
    updated_at: new Date(rec.updatedAt).toISOString(),
  };
}

/** A plugin's declared socket providers against the registry: it provides only what it declared, and uses only core ones. */
export function providerProblems(registry: Pick<SocketRegistry, 'ownerOf'>, m: PluginManifest): string[] {
  const problems: string[] = [];
  for (const name of m.socket_providers.provides) {
    const owner = registry.ownerOf(name);
    if (owner === undefined) problems.push(`declared socket provider ${name} was not registered`);
    else if (owner !== m.id) problems.push(`declared socket provider ${name} is registered by ${owner === 'core' ? 'the core' : `plugin ${owner}`}`);
  }
  for (const name of m.socket_providers.uses) {
    const owner = registry.ownerOf(name);
    if (owner === undefined) problems.push(`used socket provider ${name} is not registered`);
    else if (owner !== 'core') problems.push(`used socket provider ${name} belongs to plugin ${owner}; plugins cannot use another plugin's provider`);
  }
  return problems;
}
