import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import type protobuf from 'protobufjs';

/**
 * The service definitions of a gRPC daemon, loaded from its .proto files the way
 * @grpc/proto-loader loads them (the same protobufjs, the same include-dir resolution, the
 * bundled google/protobuf types and descriptor.proto), but kept as protobufjs reflection: the
 * request of a call is checked field by field against its message type (proto-loader hands out
 * only descriptors and lenient serializers), and the same type encodes it and decodes the answer.
 */

let descriptorAdded = false;

/** protobufjs, loaded with the first providers file (a service without a gRPC daemon configured never loads it) */
let protobufModule: typeof protobuf | null = null;
export function protobufJs(): typeof protobuf {
  protobufModule ??= createRequire(import.meta.url)('protobufjs') as typeof protobuf;
  return protobufModule;
}

/** descriptor.proto among the bundled definitions (gogo.proto and other option files import it) */
function addDescriptor(): void {
  if (descriptorAdded) return;
  const json = createRequire(import.meta.url)('protobufjs/google/protobuf/descriptor.json') as {
    nested: { google: { nested: { protobuf: { nested: protobuf.INamespace['nested'] } } } };
  };
  protobufJs().common('descriptor', json.nested.google.nested.protobuf.nested as { [k: string]: protobuf.AnyNestedObject });
  descriptorAdded = true;
}

/** A unary method of a loaded service: its gRPC path and its message types. */
export interface LoadedMethod {
  /** `package.Service/Method`, as configured */
  name: string;
  /** `/package.Service/Method`, as gRPC sends it */
  path: string;
  requestType: protobuf.Type;
  responseType: protobuf.Type;
}

/**
 * Loads `files` (absolute paths) resolving imports in `includeDirs` in order, then the bundled
 * google/protobuf types. Throws an Error naming what could not be loaded.
 */
export function loadProtos(files: readonly string[], includeDirs: readonly string[]): protobuf.Root {
  addDescriptor();
  const root = includeRoot(includeDirs);
  // keepCase: fields are named as the .proto names them, in requests and answers alike
  root.loadSync([...files], { keepCase: true });
  root.resolveAll();
  return root;
}

/** A root that looks an import up in the include dirs, in order, before protobufjs's own rule. */
function includeRoot(includeDirs: readonly string[]): protobuf.Root {
  const IncludeRoot = class extends protobufJs().Root {
    override resolvePath(origin: string, target: string): string | null {
      if (path.isAbsolute(target)) return target;
      for (const dir of includeDirs) {
        const full = path.join(dir, target);
        try {
          fs.accessSync(full, fs.constants.R_OK);
          return full;
        } catch {
          continue;
        }
      }
      return super.resolvePath(origin, target);
    }
  };
  return new IncludeRoot();
}

/** A configured method name: `package.Service/Method` (the package may be empty). */
export const METHOD_NAME = /^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*\/[A-Za-z_][A-Za-z0-9_]*$/;

/** The unary method `name` (`package.Service/Method`) in `root`, or why it cannot be called. */
export function findMethod(root: protobuf.Root, name: string): LoadedMethod | string {
  const [serviceName, methodName] = name.split('/') as [string, string];
  let service: protobuf.Service | null;
  try {
    const found = root.lookup(serviceName);
    service = found instanceof protobufJs().Service ? found : null;
  } catch {
    service = null;
  }
  if (!service) return `no service ${serviceName} in the loaded protos`;
  const method = Object.prototype.hasOwnProperty.call(service.methods, methodName) ? service.methods[methodName] : undefined;
  if (!method) return `service ${serviceName} has no method ${methodName}`;
  if (method.requestStream || method.responseStream) return `${name} streams: only unary methods can be called`;
  method.resolve();
  if (!method.resolvedRequestType || !method.resolvedResponseType) return `the message types of ${name} did not resolve`;
  return { name, path: `/${serviceName}/${methodName}`, requestType: method.resolvedRequestType, responseType: method.resolvedResponseType };
}

/** How an answer becomes JSON: 64-bit integers and enums as strings, bytes in base64, every field present. */
export const ANSWER_OPTIONS: protobuf.IConversionOptions = {
  longs: String,
  enums: String,
  bytes: String,
  defaults: true,
  arrays: true,
  objects: true,
  oneofs: true,
  json: true,
};

/** Encodes a request that checkRequest() accepted. */
export function encodeRequest(type: protobuf.Type, request: Record<string, unknown>): Buffer {
  return Buffer.from(type.encode(type.fromObject(request)).finish());
}

/** Decodes an answer into plain JSON (ANSWER_OPTIONS). */
export function decodeAnswer(type: protobuf.Type, data: Buffer): Record<string, unknown> {
  return type.toObject(type.decode(data), ANSWER_OPTIONS);
}
