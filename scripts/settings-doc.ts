/**
 * The README's configuration table, written from src/settings-table.ts:
 * `npm run docs:settings` rewrites it; test/config.test.ts fails when it is out of date.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { SETTINGS } from '../src/settings-table.js';

export const README = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'README.md');
const BEGIN = '<!-- settings table: written by `npm run docs:settings` from src/settings-table.ts -->';
const END = '<!-- end of settings table -->';

export function settingsTable(): string {
  const rows = SETTINGS.map((s) => {
    const def = s.defaultText ?? (s.default !== undefined ? `\`${s.default}\`` : 'unset');
    return `| \`${s.env}\` | ${def} | ${s.about} | ${s.api ? `\`${s.api}\`` : ''} |`;
  });
  rows.push("| `SERVICE_PLUGIN_<ID>_<KEY>` | | a plugin's setting ([docs/plugins.md](docs/plugins.md)) | |");
  return [BEGIN, '| variable | default | meaning | also set through the API as |', '|---|---|---|---|', ...rows, END].join('\n');
}

/** The README with its table replaced by the current one. */
export function readmeWithTable(readme: string): string {
  const from = readme.indexOf(BEGIN);
  const to = readme.indexOf(END);
  if (from < 0 || to < from) throw new Error(`README.md has no settings table markers (${BEGIN})`);
  return readme.slice(0, from) + settingsTable() + readme.slice(to + END.length);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  fs.writeFileSync(README, readmeWithTable(fs.readFileSync(README, 'utf8')));
  console.log('README.md: settings table written');
}
