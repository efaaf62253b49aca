import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import type { Config } from '../../../src/config.js';
import type { HostServiceDeps } from '../../../src/sockets/host-service.js';
import { readProvidersFile } from '../../../src/sockets/grpc/config.js';
import { GrpcProvider, register } from '../../../src/sockets/grpc/index.js';
import { SocketRegistry } from '../../../src/sockets/registry.js';
import { CONTAINERD_API, GOCODE } from '../../support/containerd.js';
import request from 'supertest';
import { startService, SYSTEM_KEY } from '../../support/service.js';
import { capturingLogger, quietLogger } from '../helpers.js';
import { containerdEntry, CT_LIST, providersFile, VERSION } from './helpers.js';

const SOCKET = '/tmp/no-such-dir/containerd.sock';

/** The providers file: what is refused and how each problem is named, and what registration makes of it. */
describe('gRPC providers file', function () {
  const files: Array<{ remove(): void }> = [];
  const file = (content: unknown) => {
    const f = providersFile(content);
    files.push(f);
    return f.file;
  };
  afterEach(() => {
    for (const f of files.splice(0)) f.remove();
  });

  it("loads containerd's version, namespaces and containers services with Debian's protos", () => {
    const { specs, problems } = readProvidersFile(file([containerdEntry(SOCKET)]));
    expect(problems).to.deep.equal([]);
    expect(specs).to.have.length(1);
    const spec = specs[0]!;
    expect(spec).to.include({ name: 'containerd', socket: SOCKET, probe: VERSION });
    expect(spec.methods.get(VERSION)!.kind).to.equal('read');
    expect(spec.methods.get(VERSION)!.method.path).to.equal(`/${VERSION}`);
    expect(spec.methods.get(CT_LIST)!.method.requestType.fullName).to.equal('.containerd.services.containers.v1.ListContainersRequest');
    expect([...spec.metadata.keys()]).to.deep.equal(['containerd-namespace']);
  });

  it('resolves gogo.proto when its folder is an include dir too (descriptor.proto is bundled)', () => {
    const gogo = `${GOCODE}/github.com/gogo/protobuf`;
    const { specs, problems } = readProvidersFile(file([containerdEntry(SOCKET, { include_dirs: [GOCODE, gogo] })]));
    expect(problems).to.deep.equal([]);
    expect(specs[0]!.methods.size).to.equal(6);
  });

  it('takes relative proto paths and include dirs from the folder of the file', () => {
    const f = providersFile([containerdEntry(SOCKET, { protos: ['protos/version/v1/version.proto'], include_dirs: ['.'], methods: { [VERSION]: 'read' } })]);
    files.push(f);
    fs.mkdirSync(path.join(f.dir, 'protos/version/v1'), { recursive: true });
    fs.copyFileSync(`${CONTAINERD_API}/version/v1/version.proto`, path.join(f.dir, 'protos/version/v1/version.proto'));
    const { specs, problems } = readProvidersFile(f.file);
    expect(problems).to.deep.equal([]);
    expect([...specs[0]!.methods.keys()]).to.deep.equal([VERSION]);
  });

  it('a file that cannot be read, is not JSON or is not an array: one problem, no daemon', () => {
    expect(readProvidersFile('/nonexistent/grpc.json')).to.deep.equal({ specs: [], problems: ['the file cannot be read (ENOENT): no gRPC daemon is served'] });
    const notJson = readProvidersFile(file('{"name": '));
    expect(notJson.specs).to.deep.equal([]);
    expect(notJson.problems[0]).to.match(/^the file is not JSON \(.+\): no gRPC daemon is served$/);
    expect(readProvidersFile(file({ name: 'containerd' })).problems).to.deep.equal(['the file must hold a JSON array of daemons: no gRPC daemon is served']);
  });

  it('each bad entry is named with every problem and left out; the good ones are kept', () => {
    const { specs, problems } = readProvidersFile(
      file([
        containerdEntry(SOCKET, { name: 'dns' }),
        containerdEntry('relative.sock', { name: 'Bad Name', methods: { Version: 'read', [VERSION]: 'write' }, extra: 1 }),
        containerdEntry(SOCKET, {
          name: 'meta',
          metadata: { 'grpc-timeout': { pattern: '^a$' }, ns: { pattern: '[a-z]+' }, key: { pattern: '^a$', default: 'b' } },
        }),
        containerdEntry(SOCKET, {
          name: 'probe',
          probe: 'containerd.services.namespaces.v1.Namespaces/Create',
          methods: { [VERSION]: 'read', 'containerd.services.namespaces.v1.Namespaces/Create': 'change' },
        }),
        containerdEntry(SOCKET, { name: 'good' }),
        containerdEntry(SOCKET, { name: 'good' }),
      ]),
    );
    expect(specs.map((s) => s.name)).to.deep.equal(['good']);
    expect(problems).to.deep.equal([
      '[0] (dns): name: is the name of a provider of the service itself; this daemon is not served',
      '[1] (Bad Name): name: does not match the provider name format; socket: must be an absolute path; ' +
        `methods.${VERSION}: must be one of [read, change]; methods.Version: is not a method name (package.Service/Method); extra: is not allowed; this daemon is not served`,
      '[2] (meta): metadata.ns.pattern: must be anchored (start with ^ and end with $); metadata.key: its default does not match its pattern; ' +
        'metadata.grpc-timeout: is not a metadata key a caller may send (lower case, not grpc-*, not *-bin, not an HTTP/2 header); this daemon is not served',
      '[3] (probe): probe: must be one of the methods, a read; this daemon is not served',
      '[5] (good): name: good is named twice; this daemon is not served',
    ]);
  });

  it('protos that do not load, a method they lack and a streaming method are named', () => {
    const { specs, problems } = readProvidersFile(
      file([
        containerdEntry(SOCKET, { name: 'missing', protos: ['/nonexistent/api.proto'] }),
        containerdEntry(SOCKET, {
          name: 'methods',
          methods: {
            [VERSION]: 'read',
            'containerd.services.version.v1.Version/Nope': 'read',
            'containerd.services.nope.v1.Nope/List': 'read',
            'containerd.services.containers.v1.Containers/ListStream': 'read',
          },
        }),
      ]),
    );
    expect(specs).to.deep.equal([]);
    expect(problems[0]).to.match(/^\[0\] \(missing\): protos: ENOENT.*\/nonexistent\/api\.proto.*; this daemon is not served$/);
    expect(problems[1]).to.equal(
      '[1] (methods): methods.containerd.services.version.v1.Version/Nope: service containerd.services.version.v1.Version has no method Nope; ' +
        'methods.containerd.services.nope.v1.Nope/List: no service containerd.services.nope.v1.Nope in the loaded protos; ' +
        'methods.containerd.services.containers.v1.Containers/ListStream: containerd.services.containers.v1.Containers/ListStream streams: only unary methods can be called; this daemon is not served',
    );
  });

  describe('register', () => {
    const deps = (grpcProvidersFile: string | null, log = quietLogger()): HostServiceDeps => ({
      config: { hostServices: { grpcProvidersFile, timeoutMs: 1500 } } as unknown as Config,
      db: null as never,
      bus: null as never,
      log,
      registry: new SocketRegistry({ logger: quietLogger() }),
    });

    it('registers nothing without the file', () => {
      const d = deps(null);
      expect(register(d)).to.deep.equal([]);
      expect(d.registry.names()).to.deep.equal([]);
    });

    it('registers one provider per daemon, each its own instance; a bad entry is logged and left out', async () => {
      const { logger, text } = capturingLogger('info');
      const d = deps(file([containerdEntry(SOCKET), containerdEntry(SOCKET, { name: 'init' }), containerdEntry('/tmp/other.sock', { name: 'other' })]), logger);
      expect(register(d)).to.deep.equal(['containerd', 'other']);
      expect(d.registry.names()).to.deep.equal(['containerd', 'other']);
      const a = d.registry.get('containerd')!;
      const b = d.registry.get('other')!;
      expect(a).to.be.instanceOf(GrpcProvider);
      expect(b).to.be.instanceOf(GrpcProvider);
      expect(a.socket_path).to.equal(SOCKET);
      expect(b.socket_path).to.equal('/tmp/other.sock');
      expect(text()).to.contain('[1] (init): name: is the name of a provider of the service itself; this daemon is not served');
      // the registry's own list: away daemons are unavailable, with the reason
      const listed = await d.registry.list();
      expect(listed.map((p) => [p.name, p.available, p.reason])).to.deep.equal([
        ['containerd', false, `no socket at ${SOCKET}`],
        ['other', false, 'no socket at /tmp/other.sock'],
      ]);
      await d.registry.close();
    });

    it('a name another provider holds is logged and left out', async () => {
      const { logger, text } = capturingLogger('info');
      const d = deps(file([containerdEntry(SOCKET)]), logger);
      register(d);
      expect(register(d)).to.deep.equal([]);
      expect(text()).to.contain('containerd could not be registered');
      expect(d.registry.names()).to.deep.equal(['containerd']);
      await d.registry.close();
    });
  });

  it('at boot: the service starts whatever the file holds, a bad entry logged and left out, a daemon away listed as unavailable', async function () {
    this.timeout(60_000);
    const { logger, text } = capturingLogger('info');
    const svc = await startService({
      env: { SERVICE_GRPC_PROVIDERS: file([containerdEntry(SOCKET, { name: 'mounts' }), containerdEntry(SOCKET)]), SERVICE_SYSTEM_API_KEY: SYSTEM_KEY },
      logger,
    });
    try {
      await request(svc.url).get('/readyz').expect(200);
      const listed = (await request(svc.url).get('/api/socket/providers').set('X-API-Key', SYSTEM_KEY).expect(200)).body.providers;
      expect(listed.map((p: { name: string }) => p.name)).to.deep.equal(['container', 'containerd']);
      expect(listed[1]).to.include({ available: false, reason: `no socket at ${SOCKET}` });
      expect(text()).to.contain('[0] (mounts): name: is the name of a provider of the service itself; this daemon is not served');
      // the daemon away: its health says so, a call is 503
      expect((await request(svc.url).get('/api/socket/containerd/health').expect(200)).body.available).to.equal(false);
      const res = await request(svc.url).post('/api/socket/containerd/call').set('X-API-Key', SYSTEM_KEY).send({ method: VERSION }).expect(503);
      expect(res.body.error.code).to.equal('unavailable');
    } finally {
      await svc.destroy();
    }
  });
});
