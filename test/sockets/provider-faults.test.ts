import { expect } from 'chai';
import Joi from 'joi';
import { SocketProvider, type ProviderOperation } from '../../src/sockets/base-provider.js';
import { SocketRequests, type SocketAuditEntry, type SocketCaller } from '../../src/sockets/bus-handler.js';
import { SocketRegistry } from '../../src/sockets/registry.js';
import { quietLogger } from './helpers.js';

const boom = () => {
  throw new Error('a mistake in the provider');
};

/** A provider whose own code throws where the handler asks it: its schema's rule, audited, permissionsFor. */
class FaultyProvider extends SocketProvider {
  readonly name = 'faulty';
  readonly socket_path = '/nonexistent/faulty.sock';
  readonly capabilities = { can_verify_mounts: false, can_repair_permissions: false };
  override async isAvailable() {
    return (this.lastAvailable = true);
  }
  operations(): Record<string, ProviderOperation> {
    const op = (extra: Partial<ProviderOperation>): ProviderOperation => ({
      schema: Joi.object({ x: Joi.number() }),
      permission: 'socket:faulty:write',
      result: Joi.object({}),
      http: { method: 'POST', summary: 'x' },
      run: async () => ({}),
      ...extra,
    });
    return {
      rule: op({ schema: Joi.object({ x: Joi.number().custom(boom) }) }),
      audited: op({ audited: boom }),
      asks: op({ permissionsFor: boom }),
      plain: op({}),
    };
  }
}

describe('sockets: a provider or a check that throws is an answer, never a rejection', () => {
  const caller: SocketCaller = { allows: () => true };
  let recorded: SocketAuditEntry[];
  const requestsWith = (stepUp?: () => Promise<void>) => {
    const registry = new SocketRegistry({ logger: quietLogger() });
    registry.register(FaultyProvider, { owner: 'core' });
    recorded = [];
    return new SocketRequests({ registry, logger: quietLogger(), stepUp, record: (e) => void recorded.push(e) });
  };

  it("the operation's audited and permissionsFor throwing: failed, recorded; a rule that throws names its field", async () => {
    const requests = requestsWith();
    // joi turns a throwing custom rule into the field's refusal
    const rule = await requests.handle({ request_id: 'r', operation: 'faulty:rule', args: { x: 1 } }, caller);
    expect(rule.error).to.deep.include({ code: 'invalid_args' });
    expect((rule.error!.details as Array<{ field: string }>).map((d) => d.field)).to.deep.equal(['x']);
    for (const operation of ['faulty:audited', 'faulty:asks']) {
      const res = await requests.handle({ request_id: operation, operation, args: { x: 1 } }, caller);
      expect(res, operation).to.deep.include({ ok: false, operation });
      expect(res.error, operation).to.deep.equal({ code: 'failed', message: 'socket operation failed' });
    }
    expect(recorded.map((e) => [e.operation, e.outcome])).to.deep.equal([
      ['faulty:rule', 'failure'],
      ['faulty:audited', 'failure'],
      ['faulty:asks', 'failure'],
    ]);
  });

  it('a step-up check that fails for another reason than step_up_required: failed, the operation not run', async () => {
    let ran = 0;
    const requests = requestsWith(async () => {
      ran++;
      throw new Error('the session store is away');
    });
    const res = await requests.handle({ request_id: 'p', operation: 'faulty:plain', args: {} }, caller);
    expect(ran).to.equal(1);
    expect(res.error).to.deep.equal({ code: 'failed', message: 'the step-up check failed' });
    expect(recorded.map((e) => e.outcome)).to.deep.equal(['failure']);
  });
});
