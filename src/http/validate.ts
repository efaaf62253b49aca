import type Joi from 'joi';
import { validationFailed } from './errors.js';
import { fieldErrorsOf } from '../errors.js';

/**
 * The path of the first string (or key) holding a NUL character (PostgreSQL text cannot store
 * one), at any depth: walked with an explicit stack, so no nesting hides one.
 */
export function nulField(value: unknown): string | null {
  const stack: Array<[unknown, string]> = [[value, '']];
  while (stack.length) {
    const [v, path] = stack.pop()!;
    if (typeof v === 'string') {
      if (v.includes('\0')) return path;
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    const list = Array.isArray(v);
    for (const [k, child] of Object.entries(v)) {
      // every request body passes here: the path is built as it goes, in fieldPath()'s form
      const at = list ? `${path}[${k}]` : path ? `${path}.${k}` : k;
      if (k.includes('\0')) return at;
      stack.push([child, at]);
    }
  }
  return null;
}

/** Validates `value` with `schema`; answers 400 naming every bad field. */
export function validate<T>(schema: Joi.Schema<T>, value: unknown, where: 'body' | 'query' | 'params' = 'body'): T {
  const nul = nulField(value);
  if (nul !== null) throw validationFailed([{ field: nul || where, message: 'must not contain NUL characters' }]);
  const { error, value: out } = schema.validate(value ?? {}, { abortEarly: false, stripUnknown: false, convert: true });
  if (error) throw validationFailed(fieldErrorsOf(error, where));
  return out as T;
}
