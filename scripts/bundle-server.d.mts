// The types of scripts/bundle-server.mjs for the TypeScript that imports it (test/deploy/bundle.test.ts).
import type { Metafile } from 'esbuild';

/** the packages the sources load with createRequire that the bundle takes in (loaded at every start) */
export const AT_START: ReadonlySet<string>;
/** the packages the sources load with createRequire that stay in node_modules (loaded at a feature's first use) */
export function loadedAtFirstUse(srcDir: string): string[];
/** bundles `<dist>/src/main.js` into `<dist>/server/` */
export function bundleServer(root: string, dist: string): Promise<Metafile>;
/** dependencies never bundled (they run or read files of their own at run time), and why */
export const KEPT_OUTSIDE: Readonly<Record<string, string>>;
/** throws naming every external of `metafile` the bundle would not find at run time as its importer does */
export function checkOutside(metafile: Pick<Metafile, 'inputs'>, root: string, dependencies: Record<string, string>): void;
