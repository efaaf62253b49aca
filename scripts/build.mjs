// The build that `npm ci` runs (prepare) and `npm start` uses: the server compiled by tsc into
// dist/, the browser's static assets into dist/static/.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const out = path.join(root, 'dist');

fs.rmSync(out, { recursive: true, force: true });
execFileSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', path.join(root, 'tsconfig.build.json')], { stdio: 'inherit' });
fs.cpSync(path.join(root, 'src/web/static'), path.join(out, 'static'), { recursive: true });
