import Joi from 'joi';
import { fieldErrorsOf, fieldErrorsText } from '../errors.js';
import { loneSurrogateIn } from '../unicode.js';

/** Every frame is JSON `{"event", "payload", "ref"?}`. */
export interface ClientFrame {
  event: string;
  payload: Record<string, unknown>;
  ref?: string;
}

const frameSchema = Joi.object({
  event: Joi.string().min(1).max(64).required(),
  payload: Joi.object().unknown(true).default({}),
  ref: Joi.string().max(128),
});

/** Parses one text frame; on failure returns the message and whatever ref could be read. */
export function parseFrame(text: string): { frame: ClientFrame; error: null } | { frame: null; error: string; ref: string | null } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { frame: null, error: 'the frame is not JSON', ref: null };
  }
  const ref =
    typeof raw === 'object' && raw !== null && typeof (raw as { ref?: unknown }).ref === 'string' ? String((raw as { ref: string }).ref).slice(0, 128) : null;
  const { value, error } = frameSchema.validate(raw, { abortEarly: true, convert: false });
  // named by its field, as every refusal names one (`payload: must be of type object`)
  if (error) return { frame: null, error: fieldErrorsText(fieldErrorsOf(error, 'frame')), ref };
  const lone = loneSurrogateIn(text, raw, 'frame');
  if (lone) return { frame: null, error: `${lone}: is not well-formed Unicode (half of a surrogate pair)`, ref };
  return { frame: value as ClientFrame, error: null };
}

export function encodeFrame(event: string, payload: unknown, ref?: string | null): string {
  return JSON.stringify(ref == null ? { event, payload } : { event, payload, ref });
}
