// The types of scripts/bundle-server.mjs for the TypeScript that imports it (test/deploy/bundle.test.ts).
import type { Metafile } from 'esbuild';

/** the packages the sources load with createRequire that the bundle takes in (loaded at every start) */
export const AT_START: ReadonlySet<string>;
/** the packages the sources load with createRequire that stay in node_modules (loaded at a feature's first use) */
export function loadedAtFirstUse(srcDir: string): string[];
/** bundles `<dist>/src/main.js` into `<dist>/server/` */
export function bundleServer(root: string, dist: string): Promise<Metafile>;
