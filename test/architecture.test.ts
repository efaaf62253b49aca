import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { counts, MAX_LINES } from '../scripts/architecture-counts.js';

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

  // one path per rule (docs/architecture.md): the audit writer behind the command path and the
  // attempt gate, every budget and lockout in the gate, no source file over MAX_LINES (lint and
  // `any` are npm test's ESLint step)
  it(`calls the audit writer and the attempt budgets from one place each; builds the core once, with no slot filled later; no source file over ${MAX_LINES} lines`, async () => {
    const c = await counts({ lint: false });
    expect(c.audit_writer_calls_outside_command_path).to.deep.equal([]);
    expect(c.attempt_budget_outside_gate).to.deep.equal([]);
    expect(c.files_over_400_lines).to.deep.equal([]);
    expect(c.core_parts_built_outside_core).to.deep.equal([]);
    expect(c.slots_filled_after_construction).to.deep.equal([]);
  });
});
