import { expect } from 'chai';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startService } from '../support/service.js';
import { writePlugin } from './helpers.js';

/** A stop has 10 s in all (main.ts): the plugins' teardowns must not add up within it. */
describe('plugins at the service stop', function () {
  this.timeout(30_000);

  it('tears the plugins down at once, not one after another', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-plugin-stop-'));
    try {
      for (const id of ['slow-a', 'slow-b', 'slow-c']) {
        writePlugin(
          path.join(dataDir, 'plugins'),
          id,
          { id, name: id, version: '1.0.0', entry: 'index.mjs' },
          {
            'index.mjs': `export function setup() {}\nexport async function teardown() { await new Promise((r) => setTimeout(r, 1500)); (globalThis.__tornDown ??= []).push('${id}'); }\n`,
          },
        );
      }
      const svc = await startService({ dataDir });
      const started = performance.now();
      await svc.service.stop();
      const took = performance.now() - started;
      expect((globalThis as { __tornDown?: string[] }).__tornDown?.slice().sort()).to.deep.equal(['slow-a', 'slow-b', 'slow-c']);
      // three teardowns of 1.5 s: 4.5 s one after another
      expect(took).to.be.below(3500);
      await svc.destroy();
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
