import type Joi from 'joi';
import { validationFailed, type FieldError } from './errors.js';

/** Validates `value` with `schema`; answers 400 naming every bad field. */
/** The path of the first string holding a NUL character (PostgreSQL text cannot store one). */
export function nulField(value: unknown, path = '', depth = 0): string | null {
  if (typeof value === 'string') return value.includes('\0') ? path : null;
  if (depth > 32 || value === null || typeof value !== 'object') return null;
  for (const [k, v] of Object.entries(value)) {
    if (k.includes('\0')) return path ? `${path}.${k}` : k;
    const hit = nulField(v, path ? `${path}.${k}` : k, depth + 1);
    if (hit !== null) return hit;
  }
  return null;
}

export function validate<T>(schema: Joi.Schema<T>, value: unknown, where: 'body' | 'query' | 'params' = 'body'): T {
  const nul = nulField(value);
  if (nul !== null) throw validationFailed([{ field: nul || where, message: 'must not contain NUL characters' }]);
  const { error, value: out } = schema.validate(value ?? {}, { abortEarly: false, stripUnknown: false, convert: true });
  if (error) {
    const details: FieldError[] = error.details.map((d) => ({
      field: d.path.length ? d.path.join('.') : where,
      message: d.message.replace(/^"[^"]*"\s*/, ''),
    }));
    throw validationFailed(details);
  }
  return out as T;
}
