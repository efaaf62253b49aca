// Swagger UI for /openapi.json (swagger-ui-dist, served from this service; no inline script).
/* global SwaggerUIBundle */
window.addEventListener('DOMContentLoaded', () => {
  window.ui = SwaggerUIBundle({
    url: '/openapi.json',
    dom_id: '#swagger-ui',
    deepLinking: true,
    // credentials pasted into Authorize live in this tab only
    persistAuthorization: false,
    displayRequestDuration: true,
    tryItOutEnabled: false,
    presets: [SwaggerUIBundle.presets.apis],
    layout: 'BaseLayout',
  });
});
