import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The release: `version` of the package.json above this module (the same whether run from src/ or a build). */
export const VERSION: string = (() => {
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'service-core' && pkg.version) return pkg.version;
    } catch {
      /* not here: one folder up */
    }
    if (path.dirname(dir) === dir) return '0.0.0';
  }
})();
