// Swagger UI for /openapi.json (swagger-ui-dist, served from this service; no inline script).
// A module, so it runs after the deferred swagger-ui-bundle.js, which defines SwaggerUIBundle;
// the shared page code gives /docs the bell and live toasts of the other pages when signed in.
import { boot, me } from './app.js';

interface SwaggerUIOptions {
  url: string;
  dom_id: string;
  deepLinking: boolean;
  persistAuthorization: boolean;
  displayRequestDuration: boolean;
  tryItOutEnabled: boolean;
  presets: unknown[];
  layout: string;
}

interface SwaggerUIBundleFn {
  (options: SwaggerUIOptions): unknown;
  presets: { apis: unknown };
}

declare global {
  interface Window {
    SwaggerUIBundle: SwaggerUIBundleFn;
    ui?: unknown;
  }
}

const bundle = window.SwaggerUIBundle;
window.ui = bundle({
  url: '/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  // credentials pasted into Authorize live in this tab only
  persistAuthorization: false,
  displayRequestDuration: true,
  tryItOutEnabled: false,
  presets: [bundle.presets.apis],
  layout: 'BaseLayout',
});

// anonymous readers get no live connection: its ticket would only send them to the login page
if (me.username) void boot();
