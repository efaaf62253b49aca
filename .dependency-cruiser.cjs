/**
 * The layers of src/ (docs/architecture.md), from the bottom: what a layer may import.
 * `npm run lint:deps` (and test/architecture.test.ts) fail on an import circle or on an import
 * from a lower layer to a higher one.
 */
const BASE = '^src/(config|config-[a-z]+|settings-[a-z-]+|log|errors|version|request-context|password-strength)\\.ts$|^src/(db|bus|client)/';
const HTTP = '^src/http/';
const IAM = '^src/iam/';
const AUTH = '^src/auth/';
const AREAS = '^src/(notifications|sockets|gateway|plugins)/';
const WEB = '^src/web/';
const TOP = '^src/(cli/|service\\.ts|main\\.ts|core\\.ts)';

const above = (name, from, to) => ({ name, severity: 'error', comment: `${name}: an import the layers forbid`, from: { path: from }, to: { path: to } });

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'import circles make the order of evaluation and of understanding unclear',
      from: {},
      to: { circular: true },
    },
    above('base-imports-up', BASE, [HTTP, IAM, AUTH, AREAS, WEB, TOP].join('|')),
    above('http-imports-up', HTTP, [IAM, AUTH, AREAS, WEB, TOP].join('|')),
    above('iam-imports-up', IAM, [AUTH, AREAS, WEB, TOP].join('|')),
    above('auth-imports-up', AUTH, [AREAS, WEB, TOP].join('|')),
    above('areas-import-up', AREAS, [WEB, TOP].join('|')),
    above('web-imports-up', WEB, TOP),
    above('areas-import-gateway', '^src/(notifications|sockets)/', '^src/gateway/'),
    above('gateway-imports-areas', '^src/gateway/', '^src/(notifications|sockets|plugins)/'),
    { name: 'not-to-tests', severity: 'error', from: { path: '^src/' }, to: { path: '^test/' } },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^src/web/browser/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
