import { expect } from 'chai';
import { decodeObjectSid } from '../../../src/auth/providers/sid.js';

// Binary objectSid values as Active Directory returns them (hex of the raw attribute bytes).
const fixtures: Array<[string, string, string]> = [
  ['domain Administrator (RID 500)', '010500000000000515000000c7f7fed77c7755c8945ace01f4010000', 'S-1-5-21-3623811015-3361044348-30300820-500'],
  ['domain user (RID 1104)', '010500000000000515000000dcf4dc3b833d2b46828ba62850040000', 'S-1-5-21-1004336348-1177238915-682003330-1104'],
  ['BUILTIN\\Administrators', '01020000000000052000000020020000', 'S-1-5-32-544'],
  ['Everyone', '010100000000000100000000', 'S-1-1-0'],
  ['Local System', '010100000000000512000000', 'S-1-5-18'],
  ['Null SID (no sub-authorities)', '0100000000000000', 'S-1-0'],
  ['authority beyond 32 bits is written in hex', '0101123456789abc01000000', 'S-1-0x123456789ABC-1'],
];

describe('decodeObjectSid', () => {
  for (const [name, hex, expected] of fixtures) {
    it(`decodes ${name}`, () => {
      expect(decodeObjectSid(Buffer.from(hex, 'hex'))).to.equal(expected);
    });
  }

  it('reads sub-authorities as unsigned (values above 2^31 stay positive)', () => {
    expect(decodeObjectSid(Buffer.from('0101000000000005ffffffff', 'hex'))).to.equal('S-1-5-4294967295');
  });

  it('rejects a buffer shorter than the 8-byte header', () => {
    expect(() => decodeObjectSid(Buffer.from('01050000000000', 'hex'))).to.throw(Error, /too short/);
    expect(() => decodeObjectSid(Buffer.alloc(0))).to.throw(Error, /too short/);
  });

  it('rejects a sub-authority count that does not match the length', () => {
    // claims 5 sub-authorities, carries 4
    expect(() => decodeObjectSid(Buffer.from('010500000000000515000000c7f7fed77c7755c8945ace01', 'hex'))).to.throw(Error, /sub-authorities/);
    // claims 1, carries 2
    expect(() => decodeObjectSid(Buffer.from('01010000000000010000000000000000', 'hex'))).to.throw(Error, /sub-authorities/);
  });

  it('rejects more than 15 sub-authorities and unknown revisions', () => {
    const sixteen = Buffer.concat([Buffer.from('0110000000000005', 'hex'), Buffer.alloc(16 * 4)]);
    expect(() => decodeObjectSid(sixteen)).to.throw(Error, /maximum/);
    expect(() => decodeObjectSid(Buffer.from('020100000000000100000000', 'hex'))).to.throw(Error, /revision/);
  });

  it('rejects a non-Buffer', () => {
    expect(() => decodeObjectSid('S-1-1-0' as unknown as Buffer)).to.throw(Error, /Buffer/);
  });
});
