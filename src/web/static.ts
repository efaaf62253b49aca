import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { PROJECT_ROOT } from '../version.js';
import type { Context } from 'koa';

/**
 * Static assets: our own from dist/static (src/web/static and the page bundles of
 * src/web/browser, put there by `npm run build`; read once at start), and Swagger UI's from the
 * swagger-ui-dist package (no CDN). Only names from these two folders are served; a name is
 * looked up in a map, never joined into a path from the request.
 */

const TYPES: Record<string, string> = {
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.json': 'application/json',
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

function load(file: string): Asset | null {
  const type = TYPES[path.extname(file)];
  if (!type) return null;
  const body = fs.readFileSync(file);
  return { body, type, etag: `"${crypto.createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
}

/** dist/static of this project (made by `npm run build`), from source or from the build alike */
export const STATIC_DIR = path.join(PROJECT_ROOT, 'dist', 'static');
if (!fs.existsSync(STATIC_DIR)) throw new Error(`${STATIC_DIR} is missing: run npm run build (npm ci runs it)`);

const own = new Map<string, Asset>();
for (const name of fs.readdirSync(STATIC_DIR)) {
  const asset = load(path.join(STATIC_DIR, name));
  if (asset) own.set(name, asset);
}
// the login page's old stylesheet address: the one stylesheet serves it too
if (own.has('app.css')) own.set('login.css', own.get('app.css')!);

const SWAGGER_FILES = ['swagger-ui-bundle.js', 'swagger-ui.css', 'favicon-32x32.png', 'favicon-16x16.png'];
let swaggerDir: string | null = null;
const swagger = new Map<string, Asset>();

function swaggerAsset(name: string): Asset | null {
  if (!SWAGGER_FILES.includes(name)) return null;
  const cached = swagger.get(name);
  if (cached) return cached;
  swaggerDir ??= path.dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
  const asset = load(path.join(swaggerDir, name));
  if (asset) swagger.set(name, asset);
  return asset;
}

function send(ctx: Context, asset: Asset): void {
  ctx.set('ETag', asset.etag);
  // revalidated on every use: a new release shows at once, an unchanged file costs a 304
  ctx.set('Cache-Control', 'no-cache');
  if (ctx.get('if-none-match') === asset.etag) {
    ctx.status = 304;
    return;
  }
  ctx.type = asset.type;
  ctx.body = asset.body;
}

/** Serves /static/<name> and /static/swagger/<name>; false when there is no such asset. */
export function serveStatic(ctx: Context, name: string, area: 'own' | 'swagger' = 'own'): boolean {
  const asset = area === 'own' ? (own.get(name) ?? null) : swaggerAsset(name);
  if (!asset) return false;
  send(ctx, asset);
  return true;
}
