/**
 * Windows security identifiers (MS-DTYP 2.4.2.2), as Active Directory stores them in the binary
 * objectSid attribute: the stable key the LDAP provider links identities by (it survives renames
 * and moves, unlike the DN).
 */

const HEADER_BYTES = 8; // revision (1) + sub-authority count (1) + identifier authority (6)
const SUB_AUTHORITY_BYTES = 4;
const MAX_SUB_AUTHORITIES = 15; // SID_MAX_SUB_AUTHORITIES

/**
 * Renders a binary SID in its string form, e.g. `S-1-5-21-3623811015-3361044348-30300820-500`.
 * Layout: revision byte, sub-authority count, 48-bit big-endian identifier authority, then the
 * little-endian 32-bit sub-authorities. Throws on a buffer that is not exactly one SID.
 */
export function decodeObjectSid(buf: Buffer): string {
  if (!Buffer.isBuffer(buf)) throw new Error('objectSid: expected a Buffer');
  if (buf.length < HEADER_BYTES) throw new Error(`objectSid: ${buf.length} bytes is too short for a SID`);
  const revision = buf[0]!;
  if (revision !== 1) throw new Error(`objectSid: unsupported revision ${revision}`);
  const count = buf[1]!;
  if (count > MAX_SUB_AUTHORITIES) throw new Error(`objectSid: ${count} sub-authorities exceed the maximum of ${MAX_SUB_AUTHORITIES}`);
  const expectedLength = HEADER_BYTES + count * SUB_AUTHORITY_BYTES;
  if (buf.length !== expectedLength) {
    throw new Error(`objectSid: ${count} sub-authorities need ${expectedLength} bytes, got ${buf.length}`);
  }

  const authority = buf.readUIntBE(2, 6);
  // MS-DTYP: authorities that do not fit 32 bits are written as 0x-prefixed 12-digit hex.
  const authorityText = authority >= 2 ** 32 ? `0x${authority.toString(16).toUpperCase().padStart(12, '0')}` : String(authority);

  const parts = ['S', String(revision), authorityText];
  for (let i = 0; i < count; i++) parts.push(String(buf.readUInt32LE(HEADER_BYTES + i * SUB_AUTHORITY_BYTES)));
  return parts.join('-');
}

/** The binary form of a SID in string form (`S-1-5-21-…`), as objectSid holds it: for search filters. */
export function encodeObjectSid(text: string): Buffer {
  const m = /^S-1-(\d+|0x[0-9A-Fa-f]{12})((?:-\d+){0,15})$/.exec(text);
  if (!m) throw new Error(`"${text}" is not a SID`);
  const authority = m[1]!.startsWith('0x') ? parseInt(m[1]!.slice(2), 16) : Number(m[1]);
  if (!Number.isSafeInteger(authority) || authority >= 2 ** 48) throw new Error(`"${text}": identifier authority out of range`);
  const subs = m[2] ? m[2].slice(1).split('-').map(Number) : [];
  const buf = Buffer.alloc(HEADER_BYTES + subs.length * SUB_AUTHORITY_BYTES);
  buf[0] = 1;
  buf[1] = subs.length;
  buf.writeUIntBE(authority, 2, 6);
  subs.forEach((sub, i) => {
    if (!Number.isInteger(sub) || sub < 0 || sub > 0xffffffff) throw new Error(`"${text}": sub-authority out of range`);
    buf.writeUInt32LE(sub, HEADER_BYTES + i * SUB_AUTHORITY_BYTES);
  });
  return buf;
}

/**
 * The SID of the same domain with another relative id: a user's objectSid and its
 * primaryGroupID give the primary group's objectSid (a domain SID followed by the RID).
 */
export function sidWithRid(sid: Buffer, rid: number): Buffer {
  decodeObjectSid(sid); // one well-formed SID
  if (sid[1]! < 1) throw new Error('objectSid: a SID without sub-authorities has no relative id');
  if (!Number.isInteger(rid) || rid < 0 || rid > 0xffffffff) throw new Error(`relative id ${rid} out of range`);
  const out = Buffer.from(sid);
  out.writeUInt32LE(rid, out.length - SUB_AUTHORITY_BYTES);
  return out;
}
