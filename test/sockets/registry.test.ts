import { expect } from 'chai';
import Joi from 'joi';
import { EventBus } from '../../src/bus/bus.js';
import { servedOperations, SocketProvider, type ProviderCapabilities, type ProviderOperation } from '../../src/sockets/base-provider.js';
import { ContainerProvider } from '../../src/sockets/container-provider.js';
import { ProviderRegistrationError, SocketError } from '../../src/sockets/errors.js';
import { SocketRegistry, derivesFromSocketProvider } from '../../src/sockets/registry.js';
import { startDockerd, type TestDockerd } from '../support/dockerd.js';
import { capturingLogger, eventually, quietLogger } from './helpers.js';

/** How the registry lists a provider that declared only the two required flags, both false. */
const NO_CAPS: Required<ProviderCapabilities> = {
  can_verify_mounts: false,
  can_repair_permissions: false,
  can_spawn: false,
  can_cleanup: false,
  can_query_mounts: false,
};

/**
 * A provider with no socket behind it: enough to exercise the registry rules. It declares only
 * the two required capability flags and implements nothing of a container daemon.
 */
class EchoProvider extends SocketProvider {
  static constructed = 0;
  static closed = 0;
  readonly name: string = 'echo';
  readonly socket_path = '/nonexistent/echo.sock';
  readonly capabilities: ProviderCapabilities = { can_verify_mounts: false, can_repair_permissions: false };
  constructor(options: Record<string, unknown>, logger: never) {
    super(options, logger);
    EchoProvider.constructed++;
  }
  override async isAvailable() {
    return (this.lastAvailable = true);
  }
  override async health_check() {
    return { healthy: true };
  }
  override operations(): Record<string, ProviderOperation> {
    return { ping: { schema: Joi.object({}), permission: null, run: async () => ({ pong: true }), result: Joi.object({ pong: Joi.boolean() }) } };
  }
  override async close() {
    EchoProvider.closed++;
  }
}

/** Another class that claims the same name. */
class EchoImpostor extends EchoProvider {}

class DhcpProvider extends EchoProvider {
  override readonly name = 'dhcp';
}

class BadCapsProvider extends EchoProvider {
  override readonly name = 'badcaps';
  override readonly capabilities = { can_verify_mounts: true } as unknown as ProviderCapabilities;
}

class BadOptionalCapsProvider extends EchoProvider {
  override readonly name = 'badoptional';
  override readonly capabilities = { can_verify_mounts: true, can_repair_permissions: false, can_spawn: 'yes' } as unknown as ProviderCapabilities;
}

class ReservedNameProvider extends EchoProvider {
  override readonly name = 'provider';
}

/** An operation that does not say what it answers. */
class NoResultProvider extends EchoProvider {
  override readonly name = 'noresult';
  override operations(): Record<string, ProviderOperation> {
    return { ping: { schema: Joi.object({}), permission: null, run: async () => ({ pong: true }) } as unknown as ProviderOperation };
  }
}

/** An operation whose args are not an object schema. */
class LooseArgsProvider extends EchoProvider {
  override readonly name = 'looseargs';
  override operations(): Record<string, ProviderOperation> {
    return { ping: { schema: undefined, permission: null, run: async () => ({}), result: Joi.object({}) } as unknown as ProviderOperation };
  }
}

function expectRejected(fn: () => unknown, code: string): ProviderRegistrationError {
  try {
    fn();
  } catch (err) {
    expect(err).to.be.instanceOf(ProviderRegistrationError);
    expect((err as ProviderRegistrationError).code).to.equal(code);
    expect((err as Error).message)
      .to.be.a('string')
      .and.not.equal('');
    return err as ProviderRegistrationError;
  }
  throw new Error(`expected a ${code} rejection`);
}

describe('sockets/registry', () => {
  let registry: SocketRegistry;

  beforeEach(() => {
    registry = new SocketRegistry({ logger: quietLogger() });
    EchoProvider.constructed = 0;
    EchoProvider.closed = 0;
  });

  it('rejects anything that does not derive from SocketProvider', () => {
    const notProviders: unknown[] = [
      { name: 'plain', socket_path: '/x', capabilities: NO_CAPS },
      function plainFunction() {},
      () => undefined,
      class Unrelated {
        name = 'unrelated';
      },
      SocketProvider, // the abstract base itself
      null,
      'container',
    ];
    for (const candidate of notProviders) {
      const err = expectRejected(() => registry.register(candidate as never, { owner: 'core' }), 'not_a_provider');
      expect(err.message).to.match(/derive from SocketProvider/);
    }
    expect(registry.names()).to.deep.equal([]);
    expect(derivesFromSocketProvider(EchoProvider)).to.equal(true);
  });

  it('instantiates a class once: the same class for the same owner returns the same instance', () => {
    const a = registry.register(EchoProvider as never, { owner: 'core' }) as EchoProvider;
    const b = registry.register(EchoProvider as never, { owner: 'core' }) as EchoProvider;
    expect(a).to.equal(b);
    expect(EchoProvider.constructed).to.equal(1);
    expect(registry.get('echo')).to.equal(a);
  });

  it('rejects a duplicate name from another class or another owner', () => {
    registry.register(EchoProvider as never, { owner: 'core' });
    expectRejected(() => registry.register(EchoImpostor as never, { owner: 'core' }), 'duplicate_provider');
    expectRejected(() => registry.register(EchoImpostor as never, { owner: 'some-plugin' }), 'duplicate_provider');
    expectRejected(() => registry.register(EchoProvider as never, { owner: 'some-plugin' }), 'duplicate_provider');
    expect(registry.names()).to.deep.equal(['echo']);
    expect(registry.ownerOf('echo')).to.equal('core');
  });

  it('rejects a provider that breaks the contract (capabilities, reserved names, owner)', () => {
    expectRejected(() => registry.register(BadCapsProvider as never, { owner: 'core' }), 'invalid_provider');
    expectRejected(() => registry.register(BadOptionalCapsProvider as never, { owner: 'core' }), 'invalid_provider');
    expectRejected(() => registry.register(ReservedNameProvider as never, { owner: 'core' }), 'invalid_provider');
    expectRejected(() => registry.register(EchoProvider as never, { owner: '' }), 'invalid_provider');
    expect(registry.names()).to.deep.equal([]);
  });

  it('refuses a provider whose operations lack args or result schemas, naming the operation', () => {
    expect(expectRejected(() => registry.register(NoResultProvider as never, { owner: 'core' }), 'invalid_provider').message).to.include(
      'operation ping: result',
    );
    expect(expectRejected(() => registry.register(LooseArgsProvider as never, { owner: 'core' }), 'invalid_provider').message).to.include(
      'operation ping: schema',
    );
    expect(registry.names()).to.deep.equal([]);
  });

  it('gives every provider the four required operations: the base answers unsupported where the provider serves none', async () => {
    const echo: SocketProvider = registry.register(EchoProvider as never, { owner: 'core' });
    const ops = servedOperations(echo);
    expect(Object.keys(ops)).to.include.members(['health', 'cleanup', 'mounts', 'storage_root', 'ping']);
    expect(await ops.health.run({})).to.deep.equal({ healthy: true });
    for (const name of ['cleanup', 'mounts', 'storage_root']) {
      const err = await ops[name].run({}).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err, name).to.be.instanceOf(SocketError);
      expect((err as SocketError).code, name).to.equal('unsupported');
    }
  });

  it('records the owner, lists providers and unregisters by owner', async () => {
    registry.register(EchoProvider as never, { owner: 'core' });
    registry.register(DhcpProvider as never, { owner: 'net-plugin' });
    const list = await registry.list();
    expect(list).to.deep.equal([
      { name: 'echo', socket_path: '/nonexistent/echo.sock', available: true, reason: null, capabilities: NO_CAPS, plugin: null },
      { name: 'dhcp', socket_path: '/nonexistent/echo.sock', available: true, reason: null, capabilities: NO_CAPS, plugin: 'net-plugin' },
    ]);
    expect(await registry.unregisterOwner('net-plugin')).to.deep.equal(['dhcp']);
    expect(EchoProvider.closed).to.equal(1);
    expect(registry.names()).to.deep.equal(['echo']);
    // a plugin that comes back may register again
    registry.register(DhcpProvider as never, { owner: 'net-plugin' });
    expect(registry.ownerOf('dhcp')).to.equal('net-plugin');
  });

  it('lists the capability flags and nothing else a provider put beside them', async () => {
    class ChattyProvider extends EchoProvider {
      override readonly name = 'chatty';
      override readonly capabilities = { can_verify_mounts: true, can_repair_permissions: false, can_fly: true } as unknown as ProviderCapabilities;
    }
    registry.register(ChattyProvider as never, { owner: 'core' });
    const [entry] = await registry.list();
    expect(entry!.capabilities).to.deep.equal({ ...NO_CAPS, can_verify_mounts: true });
  });

  it('applies the registration policy (e.g. the plugin manifest)', () => {
    registry.setPolicy((owner, name) => (owner === 'core' || name === 'dhcp' ? true : `${owner} did not declare ${name}`));
    expectRejected(() => registry.register(EchoProvider as never, { owner: 'rogue' }), 'not_allowed');
    registry.register(DhcpProvider as never, { owner: 'net-plugin' });
    expect(registry.names()).to.deep.equal(['dhcp']);
  });

  describe('socket:provider:register on the bus', () => {
    it('registers a plugin provider with its plugin name as owner', async () => {
      const bus = new EventBus(quietLogger());
      registry.attachBus(bus);
      bus.emit('socket:provider:register', { provider_class: DhcpProvider, plugin_name: 'net-plugin' });
      await eventually(() => registry.get('dhcp') !== undefined);
      expect(registry.ownerOf('dhcp')).to.equal('net-plugin');
      expect((await registry.list())[0].plugin).to.equal('net-plugin');
    });

    it('logs a rejected registration with its reason and keeps the bus alive', async () => {
      const { logger, text } = capturingLogger();
      registry = new SocketRegistry({ logger });
      const bus = new EventBus(logger);
      registry.attachBus(bus);
      registry.register(EchoProvider as never, { owner: 'core' });
      bus.emit('socket:provider:register', { provider_class: { not: 'a class' }, plugin_name: 'p1' });
      bus.emit('socket:provider:register', { provider_class: EchoImpostor, plugin_name: 'p2' });
      bus.emit('socket:provider:register', { provider_class: DhcpProvider, plugin_name: 'core' });
      await eventually(() => (text().match(/socket provider registration rejected/g) ?? []).length === 3);
      const lines = text()
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l))
        .filter((l) => l.msg === 'socket provider registration rejected');
      expect(lines.map((l) => l.code)).to.deep.equal(['not_a_provider', 'duplicate_provider', 'invalid_provider']);
      expect(lines[0].plugin).to.equal('p1');
      expect(lines[1].reason).to.match(/already registered/);
      expect(registry.names()).to.deep.equal(['echo']);
    });
  });

  describe('with the container provider on a real daemon', () => {
    let dockerd: TestDockerd;
    before(async function () {
      this.timeout(60_000);
      dockerd = await startDockerd();
    });
    after(async function () {
      this.timeout(60_000);
      await dockerd?.stop();
    });

    it('lists the container provider as available, a provider on a dead socket as unavailable', async () => {
      registry.register(ContainerProvider, { owner: 'core', options: { socketPath: dockerd.socketPath } });
      const list = await registry.list();
      expect(list).to.have.length(1);
      expect(list[0]).to.include({ name: 'container', socket_path: dockerd.socketPath, available: true, reason: null, plugin: null });
      expect(list[0].capabilities).to.include({ can_spawn: true, can_cleanup: true, can_query_mounts: true });
      expect(registry.get('container')!.is_available).to.equal(true);

      const other = new SocketRegistry({ logger: quietLogger() });
      other.register(ContainerProvider, { owner: 'core', options: { socketPath: `${dockerd.dir}/missing.sock` } });
      expect((await other.list())[0]).to.include({ available: false, reason: `no socket at ${dockerd.dir}/missing.sock` });
    });
  });
});
