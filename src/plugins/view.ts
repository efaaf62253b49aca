import path from 'node:path';
import type { PluginManifest } from './manifest.js';
import type { PluginState, PluginView } from './types.js';

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
