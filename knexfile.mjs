// `npx knex migrate:latest` / `npx knex seed:run` read this file. The settings and the migrations
// are TypeScript: tsx's loader is registered here, for the knex CLI only (the service's build
// does not run under tsx).
import { register } from 'tsx/esm/api';

register();
export default (await import('./knexfile.config.ts')).default;
