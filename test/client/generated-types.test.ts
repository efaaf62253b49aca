import fs from 'node:fs';
import { expect } from 'chai';
import { DOCUMENT_FILE, TYPES_FILE, typesOf } from '../../scripts/api-types.js';

/**
 * The HTTP API's types the browser pages and src/client read (src/client/openapi.ts) are what
 * openapi-typescript makes of docs/openapi.json (which test/web/openapi.test.ts holds to the
 * served document). No database: this runs once.
 */
describe('the generated API types', function () {
  it('src/client/openapi.ts is generated from docs/openapi.json', async function () {
    this.timeout(60_000);
    const types = await typesOf(fs.readFileSync(DOCUMENT_FILE, 'utf8'));
    expect(fs.readFileSync(TYPES_FILE, 'utf8') === types, 'src/client/openapi.ts is not generated from docs/openapi.json: run npm run api:types').to.equal(
      true,
    );
  });
});
