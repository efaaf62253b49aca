import { loadConfig } from './src/config.js';
import { knexConfig } from './src/db/knex.js';

// `npx knex migrate:latest` / `npx knex seed:run` use the same settings as the service
const config = loadConfig(process.env);
export default knexConfig(config);
