// `npx knex migrate:latest` / `npx knex seed:run` read this file: knex looks for knexfile.js
// before knexfile.ts, and this package is "type": "module", so knex imports it as ES module
// without announcing a loader (a knexfile.mjs makes it print "Requiring external module
// …/interpret/mjs-stub" at every command). The settings (knexfile.ts) and the migrations are
// TypeScript: tsx's loader is registered here, for the knex CLI only (the service's build does
// not run under tsx).
import { register } from 'tsx/esm/api';

register();
export default (await import('./knexfile.ts')).default;
