import fs from 'node:fs';
import path from 'node:path';
import Joi from 'joi';
import { fieldErrorsOf } from '../../errors.js';
import { findMethod, loadProtos, METHOD_NAME, type LoadedMethod } from './protos.js';

/**
 * The file SERVICE_GRPC_PROVIDERS names (docs/sockets/grpc.md): a JSON array of gRPC daemons,
 * each with its UNIX socket, its .proto files, the methods callers may call (each a read or a
 * change) and the request metadata they may send. Each entry is checked on its own: a bad entry
 * is named with every problem and left out, the others are served.
 */

export type MethodKind = 'read' | 'change';

/** one metadata key a caller may send, each value matching `pattern` */
export interface MetadataRule {
  pattern: RegExp;
  required: boolean;
  default: string | null;
}

/** A configured daemon, its protos loaded and every method found. */
export interface GrpcSpec {
  name: string;
  socket: string;
  methods: Map<string, { kind: MethodKind; method: LoadedMethod }>;
  metadata: Map<string, MetadataRule>;
  /** a read method asked with an empty request to tell whether the daemon answers; null: the channel's connection is the test */
  probe: string | null;
}

/** what a provider name must look like (the registry's rule) */
export const PROVIDER_NAME = /^[a-z][a-z0-9_-]{0,62}$/;
/** names that the service's own providers and the registry's operations hold */
export const RESERVED_NAMES: readonly string[] = ['container', 'dns', 'dhcp', 'init', 'provider', 'mounts'];
/** a metadata key a caller may be allowed to send: lower case, not binary (-bin), not gRPC's own (grpc-) or HTTP/2's */
const METADATA_KEY = /^(?!grpc-)(?!.*-bin$)(?!(?:content-type|te|user-agent|host|connection|authorization)$)[a-z0-9][a-z0-9._-]{0,62}$/;
/** the longest UNIX socket path the kernel takes (sun_path) */
const SOCKET_PATH_MAX = 107;

interface RawEntry {
  name: string;
  socket: string;
  protos: string[];
  include_dirs: string[];
  methods: Record<string, MethodKind>;
  metadata: Record<string, { pattern: string; required: boolean; default?: string }>;
  probe?: string;
}

const anchoredRegExp = Joi.string()
  .min(2)
  .max(500)
  .custom((value: string, helpers) => {
    if (!value.startsWith('^') || !value.endsWith('$')) return helpers.message({ custom: '{{#label}} must be anchored (start with ^ and end with $)' });
    try {
      new RegExp(value, 'u');
    } catch {
      return helpers.message({ custom: '{{#label}} is not a regular expression' });
    }
    return value;
  });

const entrySchema = Joi.object<RawEntry, true>({
  name: Joi.string()
    .pattern(PROVIDER_NAME, 'provider name')
    .invalid(...RESERVED_NAMES)
    .required()
    .messages({ 'any.invalid': '{{#label}} is the name of a provider of the service itself' }),
  socket: Joi.string()
    .max(SOCKET_PATH_MAX)
    .pattern(/^\//, 'absolute path')
    .required()
    .messages({ 'string.pattern.name': '{{#label}} must be an absolute path' }),
  protos: Joi.array().items(Joi.string().min(1).max(4096)).min(1).required(),
  include_dirs: Joi.array().items(Joi.string().min(1).max(4096)).default([]),
  methods: Joi.object()
    .pattern(Joi.string().pattern(METHOD_NAME, 'package.Service/Method'), Joi.string().valid('read', 'change').required())
    .min(1)
    .required()
    .messages({ 'object.unknown': '{{#label}} is not a method name (package.Service/Method)' }),
  metadata: Joi.object()
    .pattern(
      Joi.string().pattern(METADATA_KEY),
      Joi.object({ pattern: anchoredRegExp.required(), required: Joi.boolean().default(false), default: Joi.string().max(1024) }).custom((rule, helpers) =>
        rule.default !== undefined && !new RegExp(rule.pattern, 'u').test(rule.default)
          ? helpers.message({ custom: 'its default does not match its pattern' })
          : rule,
      ),
    )
    .default({})
    .messages({ 'object.unknown': '{{#label}} is not a metadata key a caller may send (lower case, not grpc-*, not *-bin, not an HTTP/2 header)' }),
  probe: Joi.string().pattern(METHOD_NAME, 'package.Service/Method'),
});

const LEFT_OUT = '; this daemon is not served';

/** The file's daemons, and every problem of those left out (each a line naming the entry and the field). */
export interface GrpcProvidersFile {
  specs: GrpcSpec[];
  problems: string[];
}

/** Reads and checks the file; relative paths in it are taken from its folder. Never throws: a problem is a line of `problems`. */
export function readProvidersFile(file: string): GrpcProvidersFile {
  let parsed: unknown;
  try {
    parsed = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    return { specs: [], problems: [`${e.code ? `the file cannot be read (${e.code})` : `the file is not JSON (${e.message})`}: no gRPC daemon is served`] };
  }
  if (!Array.isArray(parsed)) return { specs: [], problems: ['the file must hold a JSON array of daemons: no gRPC daemon is served'] };
  const specs: GrpcSpec[] = [];
  const problems: string[] = [];
  const seen = new Set<string>();
  parsed.forEach((raw, i) => {
    const label = `[${i}]${typeof raw?.name === 'string' ? ` (${raw.name.slice(0, 64)})` : ''}`;
    const { value, error } = entrySchema.validate(raw, { abortEarly: false, convert: false });
    if (error) {
      problems.push(
        `${label}: ${fieldErrorsOf(error, 'entry')
          .map((p) => `${p.field}: ${p.message}`)
          .join('; ')}${LEFT_OUT}`,
      );
      return;
    }
    if (value.probe !== undefined && value.methods[value.probe] !== 'read') {
      problems.push(`${label}: probe: must be one of the methods, a read${LEFT_OUT}`);
      return;
    }
    if (seen.has(value.name)) {
      problems.push(`${label}: name: ${value.name} is named twice${LEFT_OUT}`);
      return;
    }
    seen.add(value.name);
    const spec = loadEntry(value, path.dirname(file));
    if (typeof spec === 'string') problems.push(`${label}: ${spec}${LEFT_OUT}`);
    else specs.push(spec);
  });
  return { specs, problems };
}

/** Loads an entry's protos and finds its methods, or says what is wrong. */
function loadEntry(entry: RawEntry, base: string): GrpcSpec | string {
  let root;
  try {
    root = loadProtos(
      entry.protos.map((p) => path.resolve(base, p)),
      entry.include_dirs.map((d) => path.resolve(base, d)),
    );
  } catch (err) {
    return `protos: ${(err as Error).message}`;
  }
  const methods = new Map<string, { kind: MethodKind; method: LoadedMethod }>();
  const missing: string[] = [];
  for (const [name, kind] of Object.entries(entry.methods)) {
    const method = findMethod(root, name);
    if (typeof method === 'string') missing.push(`methods.${name}: ${method}`);
    else methods.set(name, { kind, method });
  }
  if (missing.length) return missing.join('; ');
  const metadata = new Map<string, MetadataRule>(
    Object.entries(entry.metadata).map(([key, rule]) => [
      key,
      { pattern: new RegExp(rule.pattern, 'u'), required: rule.required, default: rule.default ?? null },
    ]),
  );
  return { name: entry.name, socket: entry.socket, methods, metadata, probe: entry.probe ?? null };
}
