import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { isInside } from '../sockets/paths.js';
import type { PluginModule } from './types.js';
import { ManifestError, parseManifest, PLUGIN_ID, type PluginManifest } from './manifest.js';

export type ManifestRead =
  | { kind: 'none' }
  | { kind: 'ok'; manifest: PluginManifest }
  /** `rawId`: the manifest's id when it is a usable one; undefined when the file was not even JSON */
  | { kind: 'invalid'; error: string; rawId?: string | null };

/** Reads and validates a folder's plugin.json (kind none: the folder holds no plugin). */
export async function readManifest(folder: string): Promise<ManifestRead> {
  let text: string;
  try {
    text = await fsp.readFile(path.join(folder, 'plugin.json'), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { kind: 'none' };
    return { kind: 'invalid', error: `plugin.json: ${(err as Error).message}` };
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { kind: 'invalid', error: `plugin.json is not valid JSON: ${(err as Error).message}` };
  }
  try {
    return { kind: 'ok', manifest: parseManifest(raw) };
  } catch (err) {
    const rawId = (raw as { id?: unknown })?.id;
    return {
      kind: 'invalid',
      error: err instanceof ManifestError ? err.message : `invalid manifest: ${(err as Error).message}`,
      rawId: typeof rawId === 'string' && PLUGIN_ID.test(rawId) ? rawId : null,
    };
  }
}

/** bumped on every import: a restarted plugin runs its files as they are now, not a cached copy */
let importGeneration = 0;

/**
 * Imports a plugin's entry module: `entry` must resolve (symlinks included) inside the plugin's
 * own folder, and export setup(ctx) (and optionally teardown and settingsSchema), by name or as
 * its default.
 */
export async function importPluginModule(pluginFolder: string, entry: string): Promise<PluginModule> {
  const folder = await fsp.realpath(pluginFolder);
  let file: string;
  try {
    file = await fsp.realpath(path.resolve(folder, entry));
  } catch {
    throw new Error(`entry ${entry} not found`);
  }
  if (!isInside(file, folder) || file === folder) throw new Error(`entry ${entry} resolves outside the plugin folder`);
  if (/\.[cm]?ts$/.test(file)) await typeScriptLoader();
  const ns = await import(`${pathToFileURL(file).href}?generation=${++importGeneration}`);
  const source = typeof ns.setup === 'function' ? ns : ns.default;
  if (!source || typeof source.setup !== 'function') throw new Error(`entry ${entry} does not export setup(ctx)`);
  return {
    setup: source.setup.bind(source),
    teardown: typeof source.teardown === 'function' ? source.teardown.bind(source) : undefined,
    settingsSchema: typeof source.settingsSchema === 'function' ? source.settingsSchema.bind(source) : undefined,
  };
}

let tsLoader: Promise<unknown> | null = null;

/**
 * A plugin written in TypeScript is loaded through tsx. From source the service runs under tsx
 * already; the build registers tsx's loader the first time such a plugin is loaded (and only then).
 */
function typeScriptLoader(): Promise<unknown> {
  if (import.meta.url.endsWith('.ts')) return Promise.resolve();
  tsLoader ??= import('tsx/esm/api').then((tsx) => tsx.register());
  return tsLoader;
}
