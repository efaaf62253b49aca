/**
 * Shapes of HTTP API answers that the browser pages and other clients read, declared once: the
 * server builds its answers to these types and the pages read them (no server code here).
 */

/** How a setting is written: see src/settings-table.ts. */
export type SettingKind = 'string' | 'secret' | 'boolean' | 'list' | 'mapping';

/** GET /api/settings/auth: one field. */
export interface AuthSettingView {
  /** how the settings page shows it */
  label: string;
  kind: SettingKind;
  value: unknown;
  source: 'env' | 'store' | 'default';
  locked: boolean;
  secret: boolean;
  configured: boolean;
}

export type PluginState = 'loaded' | 'degraded' | 'failed' | 'disabled';

/** A role a plugin's manifest declares. */
export interface PluginRole {
  id: string;
  label?: string;
  permissions: string[];
  auto_map_groups?: string[];
}

/** GET /api/plugins: one plugin. */
export interface PluginView {
  id: string;
  folder: string;
  name: string | null;
  version: string | null;
  description: string | null;
  enabled: boolean;
  state: PluginState;
  error: string | null;
  permissions: { subscribe: string[]; emit: string[] };
  permissions_declared: { id: string; description: string }[];
  roles: PluginRole[];
  routes: { path: string; label: string }[];
  socket_providers: { provides: string[]; uses: string[]; registered: string[] };
  auth_providers: string[];
  updated_at: string;
}

/** A passkey or security key as its owner sees it (GET /api/me/mfa). */
export interface PasskeyView {
  id: string;
  label: string;
  created_at: string;
  last_used_at: string | null;
}

/** GET /api/me/mfa: a user's second factors (never a secret). */
export interface MfaStatus {
  totp: boolean;
  /** the authenticator app: when it was enrolled and last used (null: none) */
  totp_created_at: string | null;
  totp_last_used_at: string | null;
  webauthn: PasskeyView[];
  recovery_codes_left: number;
  /** a group of the user's requires a second factor */
  required: boolean;
}
