import type Joi from 'joi';
import { validationFailed, type FieldError } from './errors.js';

/** Validates `value` with `schema`; answers 400 naming every bad field. */
export function validate<T>(schema: Joi.Schema<T>, value: unknown, where: 'body' | 'query' | 'params' = 'body'): T {
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
