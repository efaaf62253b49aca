import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CONTAINERD_API, GOCODE } from '../../support/containerd.js';

export const VERSION = 'containerd.services.version.v1.Version/Version';
export const NS_LIST = 'containerd.services.namespaces.v1.Namespaces/List';
export const NS_CREATE = 'containerd.services.namespaces.v1.Namespaces/Create';
export const NS_DELETE = 'containerd.services.namespaces.v1.Namespaces/Delete';
export const CT_LIST = 'containerd.services.containers.v1.Containers/List';
export const CT_CREATE = 'containerd.services.containers.v1.Containers/Create';
/** in the protos, not in the file: off the list */
export const CT_DELETE = 'containerd.services.containers.v1.Containers/Delete';

/** containerd's API as an entry of the providers file: version, namespaces and containers */
export function containerdEntry(socket: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: 'containerd',
    socket,
    protos: [
      `${CONTAINERD_API}/version/v1/version.proto`,
      `${CONTAINERD_API}/namespaces/v1/namespace.proto`,
      `${CONTAINERD_API}/containers/v1/containers.proto`,
    ],
    include_dirs: [GOCODE],
    methods: { [VERSION]: 'read', [NS_LIST]: 'read', [NS_CREATE]: 'change', [NS_DELETE]: 'change', [CT_LIST]: 'read', [CT_CREATE]: 'change' },
    metadata: { 'containerd-namespace': { pattern: '^[a-z0-9._-]{1,76}$', default: 'default' } },
    probe: VERSION,
    ...extra,
  };
}

/** Writes `content` (JSON unless a string) as a providers file in a temp dir of its own; remove() deletes both. */
export function providersFile(content: unknown): { file: string; dir: string; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'grpc-cfg-'));
  const file = path.join(dir, 'grpc-providers.json');
  fs.writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content, null, 2));
  return { file, dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/** a container spec as containerd stores it (an Any holding OCI runtime-spec JSON), base64 in the request */
export function specAny(): { type_url: string; value: string } {
  return { type_url: 'types.containerd.io/opencontainers/runtime-spec/1/Spec', value: Buffer.from(JSON.stringify({ ociVersion: '1.0.2' })).toString('base64') };
}
