// An error page for someone signed in (src/web/error-page.ts): the shared page code gives its
// top bar what every page's has, the bell's count, live toasts and Sign out.
import { boot } from './app.js';

void boot();
