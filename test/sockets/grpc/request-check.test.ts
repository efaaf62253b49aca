import path from 'node:path';
import { expect } from 'chai';
import type protobuf from 'protobufjs';
import { decodeAnswer, encodeRequest, findMethod, loadProtos, type LoadedMethod } from '../../../src/sockets/grpc/protos.js';
import { checkRequest } from '../../../src/sockets/grpc/request-check.js';

const KITCHEN = path.resolve(import.meta.dirname, '../../fixtures/grpc/kitchen.proto');

/** The request check and the answer's JSON, over every kind of field (test/fixtures/grpc/kitchen.proto). */
describe('gRPC requests and answers', () => {
  let root: protobuf.Root;
  let wash: LoadedMethod;
  before(() => {
    root = loadProtos([KITCHEN], []);
    wash = findMethod(root, 'kitchen.v1.Kitchen/Wash') as LoadedMethod;
  });
  const check = (request: unknown) => checkRequest(wash.requestType, request);
  const fields = (request: unknown) => check(request).map((p) => p.field);

  it('accepts every kind of field written as the answer writes it, and encodes it as written', () => {
    const request = {
      s: 'x',
      b: true,
      i32: -5,
      u32: 4_000_000_000,
      i64: '-9223372036854775808',
      u64: '18446744073709551615',
      s64: 42,
      d: 1.5,
      f: 2,
      raw: Buffer.from('hello').toString('base64'),
      colour: 'GREEN',
      tags: ['a', 'b'],
      counts: { a: '12345678901234', b: 7 },
      by_number: { '3': 'three' },
      number: 9,
      tree: { name: 'root', children: [{ name: 'leaf', children: [] }] },
      at: { seconds: '1700000000', nanos: 5 },
      palette: ['RED', 2],
      maybe: 'here',
    };
    expect(check(request)).to.deep.equal([]);
    const answer = decodeAnswer(wash.responseType, encodeRequest(wash.requestType, request));
    expect(answer).to.deep.equal({
      ...request,
      s64: '42',
      counts: { a: '12345678901234', b: '7' },
      palette: ['RED', 'GREEN'],
      choice: 'number',
      // a proto3 optional is a oneof of its own
      _maybe: 'maybe',
    });
  });

  it('an empty request is every field at its default in the answer: longs and enums as strings, messages null', () => {
    expect(check({})).to.deep.equal([]);
    expect(decodeAnswer(wash.responseType, encodeRequest(wash.requestType, {}))).to.deep.equal({
      s: '',
      b: false,
      i32: 0,
      u32: 0,
      i64: '0',
      u64: '0',
      s64: '0',
      d: 0,
      f: 0,
      raw: '',
      colour: 'COLOUR_UNSPECIFIED',
      tags: [],
      counts: {},
      by_number: {},
      tree: null,
      at: null,
      palette: [],
    });
  });

  it('names each field a value does not fit, as the caller wrote it', () => {
    expect(
      check({
        s: 1,
        b: 'true',
        i32: 2 ** 31,
        u32: -1,
        i64: '9223372036854775808',
        u64: '-1',
        s64: 1.5,
        d: 'NaN',
        raw: 'not base64!',
        colour: 'BLUE',
        tags: 'a',
        counts: { a: 'x' },
        by_number: { three: 'x' },
        tree: { name: 'r', children: [{ name: 'c', extra: 1 }] },
        at: '2024-01-01T00:00:00Z',
      }),
    ).to.deep.equal([
      { field: 'request.s', message: 'must be a string' },
      { field: 'request.b', message: 'must be a boolean' },
      { field: 'request.i32', message: 'must be a 32-bit integer' },
      { field: 'request.u32', message: 'must be an unsigned 32-bit integer' },
      { field: 'request.i64', message: 'must be a 64-bit integer (a decimal string or a safe integer)' },
      { field: 'request.u64', message: 'must be an unsigned 64-bit integer (a decimal string or a safe integer)' },
      { field: 'request.s64', message: 'must be a 64-bit integer (a decimal string or a safe integer)' },
      { field: 'request.d', message: 'must be a number' },
      { field: 'request.raw', message: 'must be a base64 string' },
      { field: 'request.colour', message: 'must be one of COLOUR_UNSPECIFIED, RED, GREEN' },
      { field: 'request.tags', message: 'must be an array' },
      { field: 'request.counts.a', message: 'must be a 64-bit integer (a decimal string or a safe integer)' },
      { field: 'request.by_number.three', message: 'key must be a 32-bit integer' },
      { field: 'request.tree.children[0].extra', message: 'is not a field of kitchen.v1.Node' },
      { field: 'request.at', message: 'must be an object (google.protobuf.Timestamp)' },
    ]);
  });

  it('refuses unknown fields, a second member of a oneof, nulls in lists, a request that is not an object', () => {
    expect(fields({ text: 'a', number: 1 })).to.deep.equal(['request.number']);
    expect(check({ text: 'a', number: 1 })[0]!.message).to.equal('only one of text, number may be set');
    expect(fields({ tags: ['a', null] })).to.deep.equal(['request.tags[1]']);
    // an object with a prototype of its own is not JSON's
    expect(fields({ __proto__: { s: 'x' } })).to.deep.equal(['request']);
    expect(fields(JSON.parse('{"__proto__": {"s": "x"}, "constructor": 1}'))).to.deep.equal(['request.__proto__', 'request.constructor']);
    expect(fields(['s'])).to.deep.equal(['request']);
    expect(fields('s')).to.deep.equal(['request']);
    // null leaves a field unset
    expect(check({ s: null, tree: null })).to.deep.equal([]);
  });

  it('a request nested without end is refused, and at most 20 problems are named', () => {
    let deep: Record<string, unknown> = { name: 'bottom' };
    for (let i = 0; i < 40; i++) deep = { name: `n${i}`, children: [deep] };
    const problems = check({ tree: deep });
    expect(problems).to.have.length(1);
    expect(problems[0]!.message).to.equal('nests deeper than 32 messages');
    const many = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`unknown_${i}`, i]));
    expect(check(many)).to.have.length(20);
  });

  it('finds unary methods only', () => {
    expect(findMethod(root, 'kitchen.v1.Kitchen/Watch')).to.equal('kitchen.v1.Kitchen/Watch streams: only unary methods can be called');
    expect(findMethod(root, 'kitchen.v1.Sink/Wash')).to.equal('no service kitchen.v1.Sink in the loaded protos');
    expect(findMethod(root, 'kitchen.v1.Kitchen/Dry')).to.equal('service kitchen.v1.Kitchen has no method Dry');
  });
});
