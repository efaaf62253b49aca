import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import request from 'supertest';
import { createLogger, concealingLogger } from '../../src/log.js';
import { TRUSTED_CALLER } from '../../src/sockets/bus-handler.js';
import { startService, adminAuth, type TestService } from '../support/service.js';
import { eventually, writePlugin } from './helpers.js';

const SECRET = 'chatty-key-0123456789';

/** Lines written by a real pino logger, as text. */
function sink() {
  const lines: string[] = [];
  return { lines, stream: { write: (line: string) => void lines.push(line) } as never };
}

describe('plugins: no secret setting in a log line', () => {
  it('a concealing logger conceals the message, its arguments, nested fields, an error and its children', () => {
    const out = sink();
    const log = concealingLogger(createLogger('debug', out.stream), (text) => text.split('s3cret-value').join('[secret key]'));
    log.info('connecting with s3cret-value');
    log.info('%s is the key', 's3cret-value');
    const err = Object.assign(new Error('refused s3cret-value'), { code: 'E_AUTH', cause: new Error('because s3cret-value') });
    log.error({ err, nested: { deep: ['s3cret-value', 1, null] } }, 'failed');
    log.child({ part: 'sub' }).warn({ url: 'https://x.example/?k=s3cret-value' }, 'sub');
    // what a child is made with, and an instance of a class (written as JSON.stringify writes it)
    class Settings {
      constructor(readonly apiKey: string) {}
    }
    log.child({ endpoint: 'https://u:s3cret-value@h.example/' }, { msgPrefix: 's3cret-value: ' }).info({ cfg: new Settings('s3cret-value') }, 'made');
    expect(out.lines).to.have.length(5);
    for (const line of out.lines) expect(line).not.to.contain('s3cret-value');
    const [first, second, third, fourth, fifth] = out.lines.map((l) => JSON.parse(l));
    expect(fifth).to.deep.include({ endpoint: 'https://u:[secret key]@h.example/', msg: '[secret key]: made', cfg: { apiKey: '[secret key]' } });
    expect(first.msg).to.equal('connecting with [secret key]');
    expect(second.msg).to.equal('[secret key] is the key');
    // an error stays an error to the log's serializer: its type, code and stack are kept
    expect(third.err).to.include({ type: 'Error', message: 'refused [secret key]: because [secret key]', code: 'E_AUTH' });
    expect(third.err.stack).to.match(/^Error: refused \[secret key\]\n\s+at /);
    expect(third.nested.deep).to.deep.equal(['[secret key]', 1, null]);
    expect(fourth).to.include({ part: 'sub', url: 'https://x.example/?k=[secret key]' });
    // what is not a log call passes through
    expect(log.isLevelEnabled('debug')).to.equal(true);
    expect(log.level).to.equal('debug');
  });

  describe('a plugin that quotes its secret setting everywhere', () => {
    let svc: TestService;
    const out = sink();

    before(async () => {
      const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-plugin-logs-'));
      writePlugin(
        path.join(dataDir, 'plugins'),
        'chatty',
        {
          id: 'chatty',
          name: 'Chatty',
          version: '1.0.0',
          entry: 'index.mjs',
          permissions: { subscribe: ['plugin:chatty:poke'], emit: ['plugin:chatty:poke', 'socket:provider:register'] },
          socket_providers: { provides: ['chattysock'], uses: [] },
          settings: { api_key: { description: 'the key', secret: true, default: SECRET } },
        },
        {
          'index.mjs': `export function setup(ctx) {
  const key = ctx.config.api_key;
  ctx.log.info({ key_copy: key, url: 'https://api.example/?k=' + encodeURIComponent(key) }, 'connecting with ' + key);
  ctx.log.child({ part: 'sub' }).warn('%s is the key', key);
  ctx.bus.on('plugin:chatty:poke', () => { throw new Error('poke failed with ' + key); });
  ctx.router.get('/boom', () => { throw new Error('route failed with ' + key); });
  ctx.bus.emit('socket:provider:register', { plugin_name: 'chatty', provider_class: class extends ctx.sdk.SocketProvider {
    name = 'chattysock';
    socket_path = '/nonexistent/chattysock.sock';
    capabilities = { can_verify_mounts: false, can_repair_permissions: false };
    constructor(options, logger) { super(options, logger); logger.info('provider made with ' + key); }
    async isAvailable() { return true; }
    async health_check() { return { healthy: true }; }
    operations() { return { explode: { schema: ctx.sdk.Joi.object({}), permission: null, run: async () => { throw new Error('provider failed with ' + key); }, result: ctx.sdk.Joi.object({}) } }; }
  } });
}
export function teardown() { throw new Error('teardown failed with ${SECRET}'); }
`,
        },
      );
      svc = await startService({ dataDir, logger: createLogger('debug', out.stream) });
    });
    after(async () => {
      await svc?.destroy();
    });

    it('its own lines, its failing handler, route, provider and teardown show the name, never the value', async () => {
      const list = await request(svc.url).get('/api/plugins').set('Authorization', adminAuth()).expect(200);
      expect(list.body.plugins.find((p: { id: string }) => p.id === 'chatty')).to.deep.include({ error: null, state: 'loaded' });
      svc.service.bus.emit('plugin:chatty:poke' as never, {} as never);
      const boom = await request(svc.url).get('/api/plugins/chatty/boom').set('Authorization', adminAuth()).expect(500);
      expect(JSON.stringify(boom.body)).not.to.contain(SECRET);
      const explode = await svc.service.sockets.requests.handle({ request_id: 'r1', operation: 'chattysock:explode', args: {} }, TRUSTED_CALLER);
      expect(explode).to.include({ ok: false });
      await request(svc.url).post('/api/plugins/chatty/disable').set('Authorization', adminAuth()).expect(200);

      const text = () => out.lines.join('');
      await eventually(() => expect(text()).to.contain('plugin teardown failed'));
      for (const words of [
        'connecting with [secret api_key]',
        '[secret api_key] is the key',
        'poke failed with [secret api_key]',
        'route failed with [secret api_key]',
        'provider made with [secret api_key]',
        'provider failed with [secret api_key]',
        'teardown failed with [secret api_key]',
      ])
        expect(text()).to.contain(words);
      expect(text()).to.contain('https://api.example/?k=[secret api_key]');
      expect(text()).not.to.contain(SECRET);
    });
  });
});
