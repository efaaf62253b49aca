// Authentication: the provider chain and each provider's settings, with the directory's checks (auth-form.ts, ldap-tests.ts).
import { $, boot } from './app.js';
import { authSettings } from './auth-form.js';

const authSection = $('[data-auth-settings]');
if (authSection) authSettings(authSection);
void boot();
