import fs from 'node:fs';
import path from 'node:path';

/** Writes one plugin folder: plugin.json (object or raw text) and its entry files. */
export function writePlugin(pluginsDir: string, folder: string, manifest: unknown, files: Record<string, string> = {}): string {
  const dir = path.join(pluginsDir, folder);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'plugin.json'), typeof manifest === 'string' ? manifest : JSON.stringify(manifest, null, 2));
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
  return dir;
}

/** Retries `check` until it stops throwing (grants and bus handlers settle asynchronously). */
export async function eventually<T>(check: () => Promise<T> | T, timeoutMs = 5000, stepMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, stepMs));
    }
  }
}

/** A provider class body shared by fixture plugins (plain JS, run inside setup). */
export const PROVIDER_CLASS = (name: string) => `class extends ctx.sdk.SocketProvider {
    name = ${JSON.stringify(name)};
    socket_path = '/nonexistent/${name}.sock';
    capabilities = { can_verify_mounts: false, can_repair_permissions: false };
    async isAvailable() { return true; }
    async health_check() { return { healthy: true }; }
    operations() { return { ping: { schema: ctx.sdk.Joi.object({}), permission: null, run: async () => ({ pong: ${JSON.stringify(name)} }), result: ctx.sdk.Joi.object({ pong: ctx.sdk.Joi.string() }) } }; }
  }`;

/**
 * Waits until the service's database pool is idle. Every plugin:state_changed starts a ledger
 * pass in the background; stopping in the middle of one aborts its queries.
 */
export async function dbIdle(db: { client: any }, timeoutMs = 10_000): Promise<void> {
  const pool = db.client.pool;
  let quiet = 0;
  await eventually(
    async () => {
      quiet = pool && (pool.numUsed() > 0 || pool.numPendingAcquires() > 0) ? 0 : quiet + 1;
      if (quiet < 3) throw new Error('database pool still busy');
    },
    timeoutMs,
    30,
  );
}
