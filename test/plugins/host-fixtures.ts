import fs from 'node:fs';
import path from 'node:path';
import { writePlugin, PROVIDER_CLASS } from './helpers.js';

/**
 * The plugin host end to end: fixture plugins (plain .mjs) are written into the service's
 * plugins folder before boot; each records what it tried in globalThis.__pluginProbe.
 */
export const probe = () => (globalThis as any).__pluginProbe as Record<string, any>;

const ATTEMPT = `const attempt = (probe, name, fn) => { try { fn(); probe.errors[name] = null; } catch (e) { probe.errors[name] = e.message; } };`;

export function fixtures(pluginsDir: string) {
  writePlugin(
    pluginsDir,
    'good',
    {
      id: 'good',
      name: 'Good',
      version: '1.0.0',
      entry: 'index.mjs',
      permissions: { subscribe: ['system:notify', 'plugin:good:hello'], emit: ['plugin:good:hello'] },
      permissions_declared: [{ id: 'run', description: 'run the good thing' }],
      routes: [
        { path: '/dash', label: 'Dashboard' },
        { path: '/admin', label: 'Administration' },
      ],
      roles: [
        { id: 'operator', label: 'Operator', permissions: ['plugin:good:run'], auto_map_groups: ['INT_USER'] },
        { id: 'dash', permissions: ['plugin:good:route:/dash'], auto_map_groups: ['INT_VIEWER', 'INT_USER'] },
        { id: 'admin-ui', permissions: ['plugin:good:route:/admin'], auto_map_groups: ['INT_ADMIN'] },
      ],
      socket_providers: { provides: ['goodsock'], uses: [] },
    },
    {
      'index.mjs': `${ATTEMPT}
const P = (globalThis.__pluginProbe ??= {});
export async function setup(ctx) {
  const prev = P.good ?? { setups: 0, teardowns: 0, notified: 0, hello: 0 };
  const probe = (P.good = { ...prev, setups: prev.setups + 1, errors: {} });
  attempt(probe, 'subscribe_undeclared', () => ctx.bus.on('user:notify', () => {}));
  attempt(probe, 'emit_undeclared', () => ctx.bus.emit('system:notify', { title: 't', message: 'm' }));
  ctx.bus.on('system:notify', () => { P.good.notified += 1; });
  ctx.bus.on('plugin:good:hello', () => { P.good.hello += 1; });
  ctx.registerSocketProvider(${PROVIDER_CLASS('goodsock')});
  probe.own = await ctx.socketRequest({ operation: 'goodsock:ping' });
  probe.config = ctx.config;
  const { Joi } = ctx.sdk;
  // declared routes: validated input, answers in the API document
  ctx.endpoint({ method: 'GET', path: '/hello', summary: 'greets the caller', responses: { 200: { description: 'the greeting', schema: Joi.object({ hello: Joi.string() }) } } }, (koa) => ({ hello: ctx.sdk.identity(koa).username }));
  ctx.endpoint(
    { method: 'POST', path: '/echo', summary: 'answers its body', body: Joi.object({ a: Joi.number().integer() }), responses: { 200: { description: 'the body', schema: Joi.object({ echo: Joi.object({ a: Joi.number().integer().optional() }) }) } } },
    (_koa, { body }) => { ctx.bus.emit('plugin:good:hello', {}); return { echo: body }; },
  );
  // a route that reads its exact bytes (a signature over them): the parser leaves them alone
  ctx.endpoint(
    { method: 'POST', path: '/raw', summary: 'answers its exact bytes', bodyMode: 'raw', responses: { 200: { description: 'the bytes', schema: Joi.object({ hex: Joi.string() }) } } },
    (koa) => ({ hex: koa.request.rawBody.toString('hex') }),
  );
  // a plain route with a guard of its own: the document names the guard's permission
  ctx.router.get('/run', ctx.requirePermission('plugin:good:run'), (koa) => { koa.body = { ran: true }; });
}
export function teardown() { P.good.teardowns += 1; }
`,
    },
  );

  writePlugin(
    pluginsDir,
    'sneaky',
    {
      id: 'sneaky',
      name: 'Sneaky',
      version: '0.1.0',
      entry: 'index.mjs',
      permissions: { subscribe: ['socket:response'], emit: ['socket:request', 'socket:provider:register'] },
      socket_providers: { provides: ['sneakysock'], uses: ['container'] },
      auth_providers: ['sneaky-auth'],
    },
    {
      'index.mjs': `${ATTEMPT}
const P = (globalThis.__pluginProbe ??= {});
export async function setup(ctx) {
  const probe = (P.sneaky = { errors: {}, responses: [] });
  attempt(probe, 'undeclared_provider', () => ctx.registerSocketProvider(${PROVIDER_CLASS('rogue')}));
  attempt(probe, 'spoofed_owner', () => ctx.bus.emit('socket:provider:register', { provider_class: ${PROVIDER_CLASS('rogue2')}, plugin_name: 'good' }));
  // own name, undeclared provider: the registry policy refuses it (logged, never registered)
  attempt(probe, 'bus_undeclared_provider', () => ctx.bus.emit('socket:provider:register', { provider_class: ${PROVIDER_CLASS('rogue3')}, plugin_name: 'sneaky' }));
  attempt(probe, 'undeclared_auth', () => ctx.registerAuthProvider({ id: 'other-auth', kind: 'credentials', label: 'Other', authenticate: async () => null }));
  ctx.registerAuthProvider({ id: 'sneaky-auth', kind: 'credentials', label: 'Sneaky', authenticate: async () => null });
  ctx.registerSocketProvider(${PROVIDER_CLASS('sneakysock')});
  probe.cross = await ctx.socketRequest({ operation: 'goodsock:ping' });
  probe.crossExplicit = await ctx.socketRequest({ operation: 'sneakysock:ping', provider: 'goodsock' });
  probe.undeclaredUse = await ctx.socketRequest({ operation: 'pgsql:health' });
  probe.ownRequest = await ctx.socketRequest({ operation: 'sneakysock:ping' });
  probe.container = await ctx.socketRequest({ operation: 'container:health' });
  probe.cleanup = await ctx.socketRequest({ operation: 'container:cleanup', args: {} });
  probe.list = await ctx.socketRequest({ operation: 'provider:list' });
  probe.errors.fake_identity = await ctx.socketRequest({ operation: 'container:cleanup' }, { identity: { allows: () => true } }).then(() => null, (e) => e.message);
  ctx.bus.on('socket:response', (r) => { probe.responses.push(r); });
  ctx.bus.emit('socket:request', { request_id: 'sneaky-bus-1', operation: 'goodsock:ping' });
  ctx.bus.emit('socket:request', { request_id: 'sneaky-bus-2', operation: 'sneakysock:ping' });
}
`,
    },
  );

  writePlugin(
    pluginsDir,
    'thrower',
    { id: 'thrower', name: 'Thrower', version: '1.0.0', entry: 'index.mjs', permissions: { subscribe: ['system:notify'] } },
    {
      'index.mjs': `const P = (globalThis.__pluginProbe ??= {});
export function setup(ctx) {
  P.thrower = { notified: 0, teardowns: 0 };
  ctx.bus.on('system:notify', () => { P.thrower.notified += 1; });
  ctx.router.get('/alive', (koa) => { koa.body = { alive: true }; });
  throw new Error('boom at setup');
}
export function teardown() { P.thrower.teardowns += 1; }
`,
    },
  );

  // its setup fails with words that quote its secret setting (what a careless plugin writes)
  writePlugin(
    pluginsDir,
    'leaky',
    {
      id: 'leaky',
      name: 'Leaky',
      version: '1.0.0',
      entry: 'index.mjs',
      permissions: { subscribe: [] },
      settings: { region: { description: 'where', default: 'eu' }, api_key: { description: 'the key', secret: true, default: 'leaky-key-0123456789' } },
    },
    {
      'index.mjs': `export function setup(ctx) {
  throw new Error('cannot reach ' + ctx.config.region + ' with key=' + ctx.config.api_key);
}
`,
    },
  );

  // sends its token to its endpoint: the token must be typed again when the endpoint changes
  writePlugin(
    pluginsDir,
    'relay',
    {
      id: 'relay',
      name: 'Relay',
      version: '1.0.0',
      entry: 'index.mjs',
      settings: { endpoint: { description: 'where to send' }, token: { description: 'bearer token sent there', secret: true, sent_to: ['endpoint'] } },
    },
    {
      // the settings' rules, declared once: the host checks changes against them, setup gets the values
      'index.mjs': `const P = (globalThis.__pluginProbe ??= {});
export function settingsSchema({ Joi }) {
  return Joi.object({ endpoint: Joi.string().uri({ scheme: ['https'] }).allow(null), token: Joi.string().min(16).allow(null) });
}
export function setup(ctx) { P.relay = { settings: ctx.settings }; }
`,
    },
  );

  writePlugin(pluginsDir, 'broken', {
    id: 'broken',
    name: '',
    version: 'one',
    entry: 'index.mjs',
    permissions: { subscribe: ['bad topic'], emit: ['db:connected'] },
    extra: 1,
  });
  writePlugin(pluginsDir, 'notjson', '{ "id": "notjson", ');
  writePlugin(
    pluginsDir,
    'liar',
    { id: 'liar', name: 'Liar', version: '1.0.0', entry: 'index.mjs', socket_providers: { provides: ['ghost'], uses: ['nosuch'] } },
    { 'index.mjs': 'export function setup() {}\n' },
  );
  writePlugin(pluginsDir, 'noexport', { id: 'noexport', name: 'No export', version: '1.0.0', entry: 'index.mjs' }, { 'index.mjs': 'export const x = 1;\n' });
  fs.writeFileSync(path.join(pluginsDir, 'outside.mjs'), 'export function setup() { globalThis.__pluginProbe.escaped = true; }\n');
  writePlugin(pluginsDir, 'escaper', { id: 'escaper', name: 'Escaper', version: '1.0.0', entry: '../outside.mjs' });
  const linker = writePlugin(pluginsDir, 'linker', { id: 'linker', name: 'Linker', version: '1.0.0', entry: 'link.mjs' });
  fs.symlinkSync(path.join(pluginsDir, 'outside.mjs'), path.join(linker, 'link.mjs'));
  fs.mkdirSync(path.join(pluginsDir, 'not-a-plugin'));
}
