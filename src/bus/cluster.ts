import crypto from 'node:crypto';
import Joi from 'joi';

/** What a plugin's client event must be on arrival from another instance: an object (its size is bounded by the bridge). */
export const PLUGIN_EVENT_SCHEMA = Joi.object().unknown(true);

/** A name for this instance in bus messages and provider lists: host, process, and a random part. */
export function newInstanceId(hostname: string): string {
  return `${hostname}-${process.pid}-${crypto.randomBytes(3).toString('hex')}`;
}
