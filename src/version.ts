import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The folder of this project's package.json, found from this module (in src/ or in a build). */
export const PROJECT_ROOT: string = (() => {
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string };
      if (pkg.name === 'service-core') return dir;
    } catch {
      /* not here: one folder up */
    }
    if (path.dirname(dir) === dir) throw new Error('the package.json of service-core was not found above this module');
  }
})();

/** The release: `version` of package.json. */
export const VERSION: string = (JSON.parse(fs.readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
