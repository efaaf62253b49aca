import type protobuf from 'protobufjs';
import { protobufJs } from './protos.js';

/** A field of a request that its message type refuses, named as the caller wrote it (`request.filters[0]`). */
export interface FieldProblem {
  field: string;
  message: string;
}

/** deeper than this a request is refused (a recursive message type could be nested without end) */
const MAX_DEPTH = 32;
/** a request is refused with at most this many problems named */
const MAX_PROBLEMS = 20;

const INT32 = new Set(['int32', 'sint32', 'sfixed32']);
const UINT32 = new Set(['uint32', 'fixed32']);
const INT64 = new Set(['int64', 'sint64', 'sfixed64']);
const UINT64 = new Set(['uint64', 'fixed64']);
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const DECIMAL = /^-?(0|[1-9][0-9]{0,19})$/;

/**
 * Checks a request (JSON, as a caller sent it) against its message type, strictly: every key a
 * field of the type (by its .proto name), every value of the field's type (64-bit integers as a
 * decimal string or a safe integer, enums by name or number, bytes in base64, a message as an
 * object, repeated as an array, a map as an object), at most one member of a oneof. `null` leaves
 * a field unset. protobufjs' own fromObject would drop an unknown field and coerce a wrong value
 * without a word; what passes here, it converts as written.
 */
export function checkRequest(type: protobuf.Type, request: unknown, at = 'request'): FieldProblem[] {
  const out: FieldProblem[] = [];
  checkMessage(type, request, at, 0, out);
  return out.slice(0, MAX_PROBLEMS);
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
}

function checkMessage(type: protobuf.Type, value: unknown, at: string, depth: number, out: FieldProblem[]): void {
  if (out.length >= MAX_PROBLEMS) return;
  if (!isPlainObject(value)) {
    out.push({ field: at, message: `must be an object (${typeName(type)})` });
    return;
  }
  if (depth > MAX_DEPTH) {
    out.push({ field: at, message: `nests deeper than ${MAX_DEPTH} messages` });
    return;
  }
  const fields = type.fields;
  for (const [key, v] of Object.entries(value)) {
    const where = `${at}.${key}`;
    const field = Object.prototype.hasOwnProperty.call(fields, key) ? fields[key] : undefined;
    if (!field) {
      out.push({ field: where, message: `is not a field of ${typeName(type)}` });
      continue;
    }
    if (v === null || v === undefined) continue;
    field.resolve();
    if (field instanceof protobufJs().MapField) checkMap(field, v, where, depth, out);
    else if (field.repeated) {
      if (!Array.isArray(v)) out.push({ field: where, message: 'must be an array' });
      else v.forEach((item, i) => checkValue(field, item, `${where}[${i}]`, depth, out));
    } else checkValue(field, v, where, depth, out);
  }
  for (const oneof of type.oneofsArray) {
    const set = oneof.oneof.filter((name) => value[name] !== null && value[name] !== undefined);
    if (set.length > 1) out.push({ field: `${at}.${set[1]}`, message: `only one of ${set.join(', ')} may be set` });
  }
}

function checkMap(field: protobuf.MapField, v: unknown, where: string, depth: number, out: FieldProblem[]): void {
  if (!isPlainObject(v)) {
    out.push({ field: where, message: 'must be an object (a map)' });
    return;
  }
  for (const [key, item] of Object.entries(v)) {
    const keyProblem = scalarProblem(field.keyType, keyValue(field.keyType, key));
    if (keyProblem) out.push({ field: `${where}.${key}`, message: `key ${keyProblem}` });
    else checkValue(field, item, `${where}.${key}`, depth, out);
  }
}

/** a map key as its type reads it: a number for the 32-bit integers, a boolean for bool, else the string */
function keyValue(keyType: string, key: string): unknown {
  if ((INT32.has(keyType) || UINT32.has(keyType)) && DECIMAL.test(key)) return Number(key);
  if (keyType === 'bool') return key === 'true' ? true : key === 'false' ? false : key;
  return key;
}

function checkValue(field: protobuf.FieldBase, v: unknown, where: string, depth: number, out: FieldProblem[]): void {
  if (out.length >= MAX_PROBLEMS) return;
  if (v === null || v === undefined) {
    out.push({ field: where, message: 'must not be null' });
    return;
  }
  const resolved = field.resolvedType;
  if (resolved instanceof protobufJs().Type) return checkMessage(resolved, v, where, depth + 1, out);
  if (resolved instanceof protobufJs().Enum) {
    const ok =
      typeof v === 'string'
        ? Object.prototype.hasOwnProperty.call(resolved.values, v)
        : Number.isInteger(v) && Object.values(resolved.values).includes(v as number);
    if (!ok) out.push({ field: where, message: `must be one of ${Object.keys(resolved.values).join(', ')}` });
    return;
  }
  const problem = scalarProblem(field.type, v);
  if (problem) out.push({ field: where, message: problem });
}

/** why `v` is not a value of the scalar type (null when it is one) */
function scalarProblem(type: string, v: unknown): string | null {
  if (type === 'string') return typeof v === 'string' ? null : 'must be a string';
  if (type === 'bool') return typeof v === 'boolean' ? null : 'must be a boolean';
  if (type === 'double' || type === 'float') return typeof v === 'number' && Number.isFinite(v) ? null : 'must be a number';
  if (type === 'bytes') return typeof v === 'string' && BASE64.test(v) ? null : 'must be a base64 string';
  if (INT32.has(type)) return Number.isInteger(v) && (v as number) >= -(2 ** 31) && (v as number) < 2 ** 31 ? null : 'must be a 32-bit integer';
  if (UINT32.has(type)) return Number.isInteger(v) && (v as number) >= 0 && (v as number) < 2 ** 32 ? null : 'must be an unsigned 32-bit integer';
  if (INT64.has(type)) return inRange(v, -(2n ** 63n), 2n ** 63n - 1n) ? null : 'must be a 64-bit integer (a decimal string or a safe integer)';
  if (UINT64.has(type)) return inRange(v, 0n, 2n ** 64n - 1n) ? null : 'must be an unsigned 64-bit integer (a decimal string or a safe integer)';
  return `has a type this service cannot check (${type})`;
}

function inRange(v: unknown, min: bigint, max: bigint): boolean {
  let n: bigint;
  if (typeof v === 'number' && Number.isSafeInteger(v)) n = BigInt(v);
  else if (typeof v === 'string' && DECIMAL.test(v)) n = BigInt(v);
  else return false;
  return n >= min && n <= max;
}

function typeName(type: protobuf.Type): string {
  return type.fullName.replace(/^\./, '');
}
