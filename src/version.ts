import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** This project's package.json, found from this module (in src/ or in a build), and its folder. */
const PACKAGE = (() => {
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string; version: string };
      if (pkg.name === 'service-core') return { dir, version: pkg.version };
    } catch {
      /* not here: one folder up */
    }
    if (path.dirname(dir) === dir) throw new Error('the package.json of service-core was not found above this module');
  }
})();

/** The folder of this project's package.json. */
export const PROJECT_ROOT: string = PACKAGE.dir;

/** The release: `version` of package.json. */
export const VERSION: string = PACKAGE.version;
