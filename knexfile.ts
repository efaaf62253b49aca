import fs from 'node:fs';
import path from 'node:path';
import { loadConfig } from './src/config.js';
import { dialectOf, knexConfig, sqliteFile } from './src/db/knex.js';

// `npx knex migrate:latest` / `npx knex seed:run` use the same settings as the service. Neither
// needs the master key, so none is written; the SQLite file's folder is made if missing.
const config = loadConfig(process.env, { writeFiles: false });
for (const warning of config.warnings) process.stderr.write(`warning: ${warning}\n`);
if (dialectOf(config) === 'sqlite') fs.mkdirSync(path.dirname(sqliteFile(config)), { recursive: true });
export default knexConfig(config);
