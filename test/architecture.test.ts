import { expect } from 'chai';
import { spawnSync } from 'node:child_process';

/**
 * The layers of src/ hold (docs/architecture.md): no import circle, no import from a lower layer
 * to a higher one, areas and the gateway never import each other.
 */
describe('architecture', function () {
  this.timeout(60_000);

  it('has no import circle and no import that runs back up a layer', () => {
    const run = spawnSync('node_modules/.bin/depcruise', ['src', '--config', '.dependency-cruiser.cjs', '--output-type', 'err'], { encoding: 'utf8' });
    expect(run.status, run.error ? String(run.error) : run.stdout + run.stderr).to.equal(0);
    expect(run.stdout).to.match(/no dependency violations found/);
  });
});
