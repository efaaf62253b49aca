import { expect } from 'chai';
import { isChange, servedOperations, type ProviderOperation } from '../../../src/sockets/base-provider.js';
import { readProvidersFile } from '../../../src/sockets/grpc/config.js';
import { GrpcProvider, methodPermission, type CallArgs } from '../../../src/sockets/grpc/provider.js';
import { startContainerd, type TestContainerd } from '../../support/containerd.js';
import { eventually, expectSocketError, quietLogger } from '../helpers.js';
import { containerdEntry, CT_CREATE, CT_DELETE, CT_LIST, NS_CREATE, NS_DELETE, NS_LIST, providersFile, specAny, VERSION } from './helpers.js';

const NS = { 'containerd-namespace': 'test-ns' };

/** The gRPC provider against a real, private containerd, called directly (the service's paths: service.test.ts). */
describe('gRPC provider (containerd)', function () {
  this.timeout(30_000);
  let containerd: TestContainerd;
  let provider: GrpcProvider;
  let cfg: ReturnType<typeof providersFile>;
  let call: ProviderOperation<CallArgs>;

  before(async () => {
    containerd = await startContainerd();
    cfg = providersFile([containerdEntry(containerd.socketPath)]);
    const { specs, problems } = readProvidersFile(cfg.file);
    expect(problems).to.deep.equal([]);
    provider = new GrpcProvider({ spec: specs[0], timeoutMs: 2000, availabilityTtlMs: 0 }, quietLogger());
    call = provider.operations().call as ProviderOperation<CallArgs>;
  });
  after(async () => {
    await provider?.close();
    cfg?.remove();
    await containerd?.stop();
  });

  /** the args as the bus handler gives them to run: validated by the operation's schema (no conversion) */
  const args = (raw: Record<string, unknown>): CallArgs => {
    const { value, error } = call.schema.validate(raw, { abortEarly: false, convert: false });
    if (error) throw error;
    return value;
  };

  it('is named as configured, with health and call besides the base operations', () => {
    expect(provider.name).to.equal('containerd');
    expect(provider.socket_path).to.equal(containerd.socketPath);
    expect(provider.capabilities).to.deep.equal({ can_verify_mounts: false, can_repair_permissions: false });
    const ops = servedOperations(provider);
    expect(ops).to.include.keys('health', 'call', 'cleanup', 'mounts', 'storage_root');
    expect(ops.health!.permission).to.equal(null);
    expect(ops.health!.requires_available).to.equal(false);
    expect(ops.health!.http!.method).to.equal('GET');
    expect(ops.call!.http!.method).to.equal('POST');
  });

  it('health: available, and the methods callers may call', async () => {
    expect(await provider.health_check()).to.deep.equal({
      available: true,
      methods: [VERSION, NS_LIST, NS_CREATE, NS_DELETE, CT_LIST, CT_CREATE],
    });
    expect(await provider.isAvailable()).to.equal(true);
  });

  it("reads containerd's version, the same as containerd --version says", async () => {
    const { response } = await provider.call(args({ method: VERSION }));
    expect(response).to.deep.equal({ version: containerd.version.version, revision: containerd.version.revision });
    expect(containerd.version.version).to.match(/^1\.6\./);
  });

  it("lists the namespaces, one made with containerd's own ctr among them", async () => {
    await containerd.ctr('namespaces', 'create', 'test-ns');
    await containerd.ctr('namespaces', 'label', 'test-ns', 'purpose=grpc-test');
    const { response } = await provider.call(args({ method: NS_LIST, request: {} }));
    const names = (response.namespaces as Array<{ name: string; labels: Record<string, string> }>).map((n) => n.name);
    expect(names).to.include('test-ns');
    const ns = (response.namespaces as Array<{ name: string; labels: Record<string, string> }>).find((n) => n.name === 'test-ns');
    expect(ns!.labels).to.deep.equal({ purpose: 'grpc-test' });
  });

  it('creates a container in a namespace given as metadata and lists the containers of that namespace only', async () => {
    const created = await provider.call(
      args({
        method: CT_CREATE,
        request: { container: { id: 'grpc-c1', labels: { app: 'demo' }, runtime: { name: 'io.containerd.runc.v2' }, spec: specAny() } },
        metadata: NS,
      }),
    );
    const c = created.response.container as Record<string, unknown>;
    expect(c.id).to.equal('grpc-c1');
    // the answer as JSON: bytes in base64, 64-bit integers as strings, every field present (unset messages null)
    expect(c.spec).to.deep.equal(specAny());
    expect((c.created_at as { seconds: unknown }).seconds)
      .to.be.a('string')
      .and.match(/^\d+$/);
    expect(c).to.include({ image: '', snapshotter: '', snapshot_key: '' });
    expect(c.runtime).to.deep.equal({ name: 'io.containerd.runc.v2', options: null });
    expect(await containerd.ctr('--namespace', 'test-ns', 'containers', 'ls', '-q')).to.equal('grpc-c1\n');

    const listed = await provider.call(args({ method: CT_LIST, request: { filters: ['labels.app==demo'] }, metadata: NS }));
    expect((listed.response.containers as Array<{ id: string }>).map((x) => x.id)).to.deep.equal(['grpc-c1']);
    await containerd.ctr('namespaces', 'create', 'other-ns');
    const other = await provider.call(args({ method: CT_LIST, request: {}, metadata: { 'containerd-namespace': 'other-ns' } }));
    expect(other.response).to.deep.equal({ containers: [] });
  });

  it("a daemon's refusal: the code that fits its status, its words in the details and never in the message", async () => {
    // a namespace that still holds a container cannot go (FAILED_PRECONDITION: gRPC's 400)
    const busy = await expectSocketError(provider.call(args({ method: NS_DELETE, request: { name: 'test-ns' } })), 'invalid_args');
    expect(busy.message).to.equal(`containerd refused the request of ${NS_DELETE} (FAILED_PRECONDITION)`);
    expect(busy.details).to.have.length(1);
    expect((busy.details as Array<{ field: string; message: string }>)[0]).to.include({ field: 'request' });
    expect((busy.details as Array<{ field: string; message: string }>)[0]!.message).to.contain('must be empty');
    const gone = await expectSocketError(provider.call(args({ method: NS_DELETE, request: { name: 'never-made' } })), 'not_found');
    expect(gone.message).to.equal(`containerd answered ${NS_DELETE} with NOT_FOUND`);
    expect(gone.details).to.have.property('grpc_status', 'NOT_FOUND');
    const dup = await expectSocketError(provider.call(args({ method: NS_CREATE, request: { namespace: { name: 'test-ns' } } })), 'conflict');
    expect(dup.message).to.equal(`containerd answered ${NS_CREATE} with ALREADY_EXISTS`);
    expect(dup.details).to.have.property('grpc_status', 'ALREADY_EXISTS');
  });

  it('the default of a metadata key is sent when the caller gives none', async () => {
    // containerd publishes an event for a namespace made, in the namespace the request names
    const made = await provider.call(args({ method: NS_CREATE, request: { namespace: { name: 'made-here', labels: { a: 'b' } } } }));
    expect(made.response).to.deep.equal({ namespace: { name: 'made-here', labels: { a: 'b' } } });
    const listed = await provider.call(args({ method: CT_LIST }));
    expect(listed.response).to.deep.equal({ containers: [] });
  });

  it('a method off the list is not_allowed, even one the protos hold', async () => {
    const err = await expectSocketError(provider.call(args({ method: CT_DELETE, request: { id: 'grpc-c1' }, metadata: NS })), 'not_allowed');
    expect(err.message).to.contain(CT_DELETE);
    await expectSocketError(provider.call(args({ method: 'nope.Service/Method' })), 'not_allowed');
    // nothing was deleted
    expect(await containerd.ctr('--namespace', 'test-ns', 'containers', 'ls', '-q')).to.equal('grpc-c1\n');
  });

  it('a malformed method name is refused by the schema, naming method', () => {
    for (const method of ['Version', 'containerd.services.version.v1.Version', '/a.B/C', 'a.B/C/D', 'a b/C', 7]) {
      const { error } = call.schema.validate({ method }, { convert: false });
      expect(error, String(method)).to.not.equal(undefined);
      expect(error!.details[0]!.path).to.deep.equal(['method']);
    }
  });

  it('a request is checked against its message type: unknown and mistyped fields named, nothing sent', async () => {
    const err = await expectSocketError(
      provider.call(args({ method: CT_CREATE, request: { container: { id: 'grpc-c2', runtime: { name: 1 }, secret_field: 'x' }, bogus: true }, metadata: NS })),
      'invalid_args',
    );
    expect(err.details).to.deep.equal([
      { field: 'request.container.runtime.name', message: 'must be a string' },
      { field: 'request.container.secret_field', message: 'is not a field of containerd.services.containers.v1.Container' },
      { field: 'request.bogus', message: 'is not a field of containerd.services.containers.v1.CreateContainerRequest' },
    ]);
    expect(err.message).to.contain('request.bogus: is not a field of');
    const more = await expectSocketError(
      provider.call(
        args({
          method: CT_CREATE,
          request: { container: { id: 'grpc-c2', labels: { a: 1 }, spec: { type_url: 'x', value: 'not base64!' }, created_at: { seconds: '1e3' } } },
          metadata: NS,
        }),
      ),
      'invalid_args',
    );
    expect(more.details).to.deep.equal([
      { field: 'request.container.labels.a', message: 'must be a string' },
      { field: 'request.container.spec.value', message: 'must be a base64 string' },
      { field: 'request.container.created_at.seconds', message: 'must be a 64-bit integer (a decimal string or a safe integer)' },
    ]);
    await expectSocketError(provider.call(args({ method: NS_LIST, request: { filters: ['x'] } })), 'invalid_args');
    expect(await containerd.ctr('--namespace', 'test-ns', 'containers', 'ls', '-q')).to.equal('grpc-c1\n');
  });

  it('metadata: only the configured keys, each matching its pattern', () => {
    for (const metadata of [{ 'containerd-namespace': 'Bad Namespace!' }, { 'containerd-namespace': '' }, { 'x-other': 'a' }, { 'containerd-namespace': 5 }]) {
      const { error } = call.schema.validate({ method: CT_LIST, metadata }, { convert: false });
      expect(error, JSON.stringify(metadata)).to.not.equal(undefined);
      expect(error!.details[0]!.path.join('.'), JSON.stringify(metadata)).to.equal(`metadata.${Object.keys(metadata)[0]}`);
    }
    expect(call.schema.validate({ method: CT_LIST, metadata: NS }, { convert: false }).error).to.equal(undefined);
  });

  it('permissions: one per method, asked for by the method called; a change method is a change, a read is not', () => {
    expect(provider.permissions().map((p) => p.id)).to.deep.equal(
      [VERSION, NS_LIST, NS_CREATE, NS_DELETE, CT_LIST, CT_CREATE].map((m) => `socket:grpc:containerd:${m}`),
    );
    expect(provider.permissions()[0]!.description).to.contain(VERSION);
    expect(call.permission).to.equal(null);
    expect(call.permissionsFor!(args({ method: VERSION }))).to.deep.equal([methodPermission('containerd', VERSION)]);
    expect(call.permissionsFor!(args({ method: CT_DELETE }))).to.deep.equal([]);
    expect(isChange(call, args({ method: VERSION }))).to.equal(false);
    expect(isChange(call, args({ method: NS_CREATE }))).to.equal(true);
    expect(isChange(call, args({ method: CT_DELETE }))).to.equal(false);
  });

  it('the audit trail gets the method and the names of the fields and metadata, never their values', () => {
    const audited = call.audited!(args({ method: NS_CREATE, request: { namespace: { name: 'hidden-value', labels: { token: 's3cret' } } }, metadata: NS }));
    expect(audited).to.deep.equal({ method: NS_CREATE, request_fields: ['namespace'], metadata: ['containerd-namespace'] });
    expect(JSON.stringify(audited)).to.not.contain('hidden-value').and.not.contain('s3cret').and.not.contain('test-ns');
  });

  it('containerd stopped: unavailable at once; served again as soon as it is back', async () => {
    await containerd.halt();
    try {
      const started = Date.now();
      const err = await expectSocketError(provider.call(args({ method: VERSION })), 'unavailable');
      expect(err.message).to.equal(`containerd did not answer ${VERSION} (UNAVAILABLE)`);
      expect(Date.now() - started).to.be.below(1000);
      expect(provider.is_available).to.equal(false);
      expect(await provider.health_check()).to.include({ available: false });
      expect(provider.unavailable_reason).to.contain(containerd.socketPath);
      // the next call fails as fast: no channel waits out a backoff
      const again = Date.now();
      await expectSocketError(provider.call(args({ method: NS_LIST })), 'unavailable');
      expect(Date.now() - again).to.be.below(1000);
    } finally {
      await containerd.start();
    }
    // the very next call reaches it: nothing stays stuck on the old channel
    const back = Date.now();
    const { response } = await provider.call(args({ method: VERSION }));
    expect(response.version).to.equal(containerd.version.version);
    expect(Date.now() - back).to.be.below(2000);
    expect(provider.is_available).to.equal(true);
    await eventually(async () => (await provider.health_check()).available === true, 5000);
    // what it holds survived the restart
    const listed = await provider.call(args({ method: CT_LIST, metadata: NS }));
    expect((listed.response.containers as Array<{ id: string }>).map((x) => x.id)).to.deep.equal(['grpc-c1']);
  });

  it('a restart no call saw: the next call reaches the new daemon', async () => {
    await provider.call(args({ method: VERSION }));
    await containerd.halt();
    await containerd.start();
    const started = Date.now();
    expect((await provider.call(args({ method: VERSION }))).response.version).to.equal(containerd.version.version);
    expect(Date.now() - started).to.be.below(1000);
  });

  it('containerd frozen: a call ends at its deadline as unavailable, and the next one after it thaws is answered', async () => {
    const quick = new GrpcProvider({ spec: readProvidersFile(cfg.file).specs[0], timeoutMs: 600, availabilityTtlMs: 0 }, quietLogger());
    try {
      await quick.call(args({ method: VERSION }));
      await containerd.pause();
      try {
        const started = Date.now();
        const err = await expectSocketError(quick.call(args({ method: VERSION })), 'unavailable');
        const took = Date.now() - started;
        expect(err.message).to.equal(`containerd did not answer ${VERSION} (DEADLINE_EXCEEDED)`);
        expect(took).to.be.within(550, 2500);
        expect(await quick.isAvailable()).to.equal(false);
      } finally {
        containerd.resume();
      }
      expect((await quick.call(args({ method: VERSION }))).response.version).to.equal(containerd.version.version);
      expect(await quick.isAvailable()).to.equal(true);
    } finally {
      await quick.close();
    }
  });

  it("a request whose refusal never arrives (containerd quotes a 100 000-character name: trailers over HTTP/2's limit) is failed, and the daemon stays available", async () => {
    const quick = new GrpcProvider({ spec: readProvidersFile(cfg.file).specs[0], timeoutMs: 600, availabilityTtlMs: 60_000 }, quietLogger());
    try {
      expect(await quick.isAvailable()).to.equal(true);
      const started = Date.now();
      const err = await expectSocketError(quick.call(args({ method: NS_CREATE, request: { namespace: { name: 'x'.repeat(100_000) } } })), 'failed');
      expect(err.message).to.equal(`containerd gave no answer to ${NS_CREATE} that could be read within the deadline, though it answers other calls`);
      expect(Date.now() - started).to.be.below(2500);
      // one caller's request does not make the daemon unavailable for the others
      expect(await quick.isAvailable()).to.equal(true);
      expect((await quick.call(args({ method: VERSION }))).response.version).to.equal(containerd.version.version);
      expect(await containerd.ctr('namespaces', 'ls', '-q')).to.not.contain('xxxx');
    } finally {
      await quick.close();
    }
  });

  it('a required metadata key without a default: invalid_args naming it, nothing sent', async () => {
    const strict = providersFile([
      containerdEntry(containerd.socketPath, { name: 'strict', metadata: { 'containerd-namespace': { pattern: '^[a-z0-9._-]{1,76}$', required: true } } }),
    ]);
    const p = new GrpcProvider({ spec: readProvidersFile(strict.file).specs[0], timeoutMs: 2000 }, quietLogger());
    try {
      const err = await expectSocketError(p.call({ method: CT_LIST, request: {} }), 'invalid_args');
      expect(err.details).to.deep.equal([{ field: 'metadata.containerd-namespace', message: 'is required' }]);
      const ok = await p.call({ method: CT_LIST, request: {}, metadata: NS });
      expect((ok.response.containers as Array<{ id: string }>).map((c) => c.id)).to.deep.equal(['grpc-c1']);
    } finally {
      await p.close();
      strict.remove();
    }
  });

  it('a probe-less daemon is available when its socket accepts a connection', async () => {
    const bare = providersFile([containerdEntry(containerd.socketPath, { name: 'bare', probe: undefined })]);
    try {
      const { specs } = readProvidersFile(bare.file);
      const p = new GrpcProvider({ spec: specs[0], timeoutMs: 2000, availabilityTtlMs: 0 }, quietLogger());
      try {
        expect(await p.isAvailable()).to.equal(true);
        await containerd.halt();
        expect(await p.isAvailable()).to.equal(false);
        expect(p.unavailable_reason).to.equal(`no socket at ${containerd.socketPath}`);
        await containerd.start();
        await eventually(() => p.isAvailable(), 5000);
      } finally {
        await p.close();
      }
    } finally {
      bare.remove();
      await containerd.start();
    }
  });
});
