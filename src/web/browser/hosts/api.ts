// The host services page's calls to the public API, its types, and how it shows the API's
// errors: in words, beside the field they name. Used by ../hosts.ts.
import type { Answer, Schemas, SocketResult } from '../../../client/api-types.js';
import { $, api, ApiError, confirmButton, errorText, h, say } from '../app.js';

// the shapes of the API document (npm run api:types), never written again here
export type Provider = Answer<'/api/socket/providers', 'get'>['providers'][number];
export type Access = Answer<'/api/me/access', 'get'>;
export type DnsRecord = SocketResult<'dns:records'>['records'][number];
export type Subnet = SocketResult<'dhcp:health'>['subnets'][number];
export type Lease = SocketResult<'dhcp:leases'>['leases'][number];
export type Reservation = Schemas['DhcpReservation'];
export type Unit = Schemas['InitUnit'];
/** a provider's health as the page shows it: the facts of dns, dhcp and init where it is one of them */
export interface Health {
  available: boolean;
  version?: string | null;
  reason?: string | null;
  zones?: string[];
  subnets?: Subnet[];
  units_allowed?: string[];
}

/** The providers this page has a part for, with the permissions of their reads and changes. */
export const PARTS = {
  dns: { read: 'socket:dns:read', write: 'socket:dns:write' },
  dhcp: { read: 'socket:dhcp:read', write: 'socket:dhcp:write' },
  init: { read: 'socket:init:read', write: 'socket:init:control' },
} as const;
export type PartName = keyof typeof PARTS;
export const PART_NAMES = Object.keys(PARTS) as PartName[];

export const path = (provider: string, operation: string) => `/api/socket/${encodeURIComponent(provider)}/${operation.replace(/_/g, '-')}`;
export const read = <T>(provider: string, operation: string): Promise<T> => api<T>('GET', path(provider, operation));
export const change = <T>(provider: string, operation: string, args: Record<string, unknown>): Promise<T> => api<T>('POST', path(provider, operation), args);

/** What each error code of the host services means, said before the API's own message. */
export const WORDS: Record<string, string> = {
  validation_failed: 'Not valid',
  conflict: 'Already taken',
  forbidden_zone: 'Outside the zones this service may write in',
  not_allowed: 'Not on the list of allowed units',
  unavailable: 'The service behind this provider is unavailable',
  not_found: 'Not found',
  forbidden: 'You lack the permission for this',
  step_up_required: 'Nothing was changed: your second factor was not confirmed',
  unsupported: 'This provider does not offer this',
  bad_gateway: 'The host service failed',
};

/** An API error in words: what its code means, then what the API said. */
export function inWords(err: unknown, words: Record<string, string> = {}): string {
  if (!(err instanceof ApiError)) return errorText(err);
  const lead = words[err.code] ?? WORDS[err.code];
  return lead ? `${lead}: ${err.message}` : err.message;
}

export interface FieldProblem {
  field: string;
  message: string;
}
export const problemsOf = (err: unknown): FieldProblem[] =>
  err instanceof ApiError && Array.isArray(err.details)
    ? err.details.filter((d): d is FieldProblem => typeof d?.field === 'string' && typeof d?.message === 'string')
    : [];

/** Clears a form's messages and the fields marked invalid. */
export function clearForm(form: HTMLFormElement): void {
  for (const m of form.querySelectorAll('[data-field-msg]')) say(m, '');
  for (const c of form.querySelectorAll('[aria-invalid]')) c.removeAttribute('aria-invalid');
  say($('[data-msg]', form), '');
}

/**
 * Shows an API error on a form: each field it names gets its message beside it (and is marked);
 * an error naming no field goes beside `fallbackField` when the code is about a value (a conflict,
 * a name outside the zones), else under the form.
 */
export function showError(form: HTMLFormElement, err: unknown, fallbackField: string): void {
  const msg = $('[data-msg]', form);
  const code = err instanceof ApiError ? err.code : '';
  let problems = problemsOf(err);
  if (!problems.length && ['conflict', 'forbidden_zone'].includes(code) && err instanceof ApiError) problems = [{ field: fallbackField, message: err.message }];
  let placed = 0;
  for (const p of problems) {
    const slot = form.querySelector(`[data-field-msg="${CSS.escape(p.field)}"]`);
    if (!slot) continue;
    const lead = WORDS[code];
    say(slot, lead && code !== 'validation_failed' ? `${lead}: ${p.message}` : p.message.replace(/^"[^"]+" /, ''), 'error');
    const control = form.elements.namedItem(p.field);
    if (control instanceof HTMLElement) control.setAttribute('aria-invalid', 'true');
    placed++;
  }
  say(msg, placed ? `Nothing was changed: ${placed === 1 ? 'see the field above' : 'see the fields above'}.` : inWords(err), 'error');
}

/** Rows of a table's body; without rows, its "none" line instead of the table. */
export function fill(table: HTMLTableElement, empty: HTMLElement | null, rows: HTMLTableRowElement[]): void {
  table.tBodies[0]!.replaceChildren(...rows);
  table.hidden = rows.length === 0;
  if (empty) empty.hidden = rows.length > 0;
}

/** A button in a row that runs a change and then reloads; its error goes to `msg`. */
export function actionButton(
  label: string,
  msg: HTMLElement,
  run: () => Promise<string>,
  opts: { confirm?: string; data?: Record<string, string>; words?: Record<string, string> } = {},
) {
  const button = h('button', { type: 'button', class: 'small secondary', dataset: opts.data ?? {} }, label);
  const act = async () => {
    say(msg, '');
    try {
      say(msg, await run());
    } catch (err) {
      say(msg, inWords(err, opts.words), 'error');
    }
  };
  if (opts.confirm) return confirmButton(button, opts.confirm, act);
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await act();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}
