// Swagger UI for /openapi.json (swagger-ui-dist, served from this service; no inline script).
// A classic script after swagger-ui-bundle.js, which defines the global SwaggerUIBundle.

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

window.addEventListener('DOMContentLoaded', () => {
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
});

export {};
