// The audit trail [feature:admin.audit]: filters, the events newest first with "Load older",
// each event's details on demand, and a live tail: `audit:event` frames matching the filters
// appear at the top as they happen (pausable). After every (re)connect the newest page is read
// again, so nothing written while the socket was down is missing.
import {
  api,
  boot,
  busy,
  clearOnEdit,
  currentLiveState,
  errorText,
  h,
  markInvalid,
  must,
  onFrame,
  onLiveState,
  say,
  text,
  when,
  type LiveState,
} from './app.js';

import type { Answer, Schemas } from '../../client/api-types.js';
import { auditSummary } from '../../client/audit-summary.js';

type AuditEvent = Schemas['AuditEvent'];
type AuditPage = Answer<'/api/audit', 'get'>;

/** The filters as the API takes them ('' = any); `since` is an ISO time. */
interface Filters {
  action: string;
  actor: string;
  target: string;
  outcome: string;
  since: string;
}
const FILTER_KEYS = ['action', 'actor', 'target', 'outcome', 'since'] as const;

const FIRST_PAGE = 50;
const OLDER_PAGE = 50;
/** a live tail left open for hours keeps this many rows; older ones come back with "Load older" */
const MAX_ROWS = 1000;

const form = must<HTMLFormElement>('[data-filters]');
const msg = must('[data-msg]');
const table = must<HTMLTableElement>('[data-events]');
const tbody = must<HTMLTableSectionElement>('tbody', table);
const empty = must('[data-empty]');
const older = must<HTMLButtonElement>('[data-load-older]');
const liveLabel = must('[data-live-state]');
const pauseButton = must<HTMLButtonElement>('[data-pause]');
const COLUMNS = table.tHead?.rows[0]?.cells.length ?? 6;

/** seq -> event, of the rows shown */
const shown = new Map<number, AuditEvent>();
let filters: Filters = readForm();
/** the next older page starts below this seq (null: no older events) */
let nextBefore: number | null = null;
/** bumped by every reload: answers to an older one are dropped */
let generation = 0;
/** frames that arrive while a reload is on its way (the page may have been read before them) */
let arriving: AuditEvent[] | null = null;
let loaded: Promise<void> = Promise.resolve();
let paused = false;
/** matching events that arrived while paused, oldest first */
let pending: AuditEvent[] = [];
/** the socket was down while paused: read the newest page again on resume */
let catchUpOnResume = false;

// ---- filters ---------------------------------------------------------------------------------

/** A datetime-local value (local time) for an ISO time. */
function localInput(iso: string): string {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function readForm(): Filters {
  const f = new FormData(form);
  const since = new Date(text(f, 'since'));
  return {
    action: text(f, 'action'),
    actor: text(f, 'actor').trim(),
    target: text(f, 'target').trim(),
    outcome: text(f, 'outcome'),
    since: text(f, 'since') && !Number.isNaN(since.getTime()) ? since.toISOString() : '',
  };
}

/** The filters of the address (a filtered view can be bookmarked and reloaded). */
function fromAddress(): void {
  const q = new URLSearchParams(location.search);
  for (const key of FILTER_KEYS) {
    const value = q.get(key);
    if (value === null) continue;
    const el = form.elements.namedItem(key);
    if (el instanceof HTMLInputElement || el instanceof HTMLSelectElement) el.value = key === 'since' ? localInput(value) : value;
  }
}

function query(f: Filters, extra: Record<string, number>): string {
  const q = new URLSearchParams();
  for (const key of FILTER_KEYS) if (f[key]) q.set(key, f[key]);
  for (const [k, v] of Object.entries(extra)) q.set(k, String(v));
  return q.toString();
}

/** Does an event pass the filters, as the API decides it (src/iam/audit.ts, list)? */
function matches(e: AuditEvent, f: Filters): boolean {
  if (f.action && (f.action.endsWith('.') ? !e.action.startsWith(f.action) : e.action !== f.action)) return false;
  if (f.actor && e.actor.username !== f.actor && e.actor.user_id !== f.actor) return false;
  if (f.target && e.target.id !== f.target && e.target.name !== f.target) return false;
  if (f.outcome && e.outcome !== f.outcome) return false;
  if (f.since && Date.parse(e.at) < Date.parse(f.since)) return false;
  return true;
}

// ---- rows ------------------------------------------------------------------------------------

const sub = (s: string) => h('span', { class: 'sub' }, s);

function targetCell(t: AuditEvent['target']): HTMLTableCellElement {
  if (t.type === 'none' && !t.id && !t.name) return h('td', {}, '—');
  const label = t.name ?? t.id;
  return h(
    'td',
    { class: 'target' },
    sub(t.type),
    label ? ' ' : '',
    label ? h('span', { class: 'target-name', title: t.id && t.id !== label ? `id ${t.id}` : null }, label) : '',
  );
}

function row(e: AuditEvent, fresh: boolean): HTMLTableRowElement {
  const toggle = h(
    'button',
    { type: 'button', class: 'small secondary', 'aria-expanded': 'false', 'aria-controls': `audit-details-${e.seq}`, 'data-details-toggle': true },
    'Details',
  );
  const tr = h(
    'tr',
    { class: fresh ? 'fresh' : null, dataset: { seq: String(e.seq), action: e.action, outcome: e.outcome } },
    h('td', { class: 'time' }, when(e.at)),
    h('td', { class: 'actor' }, h('span', { class: 'actor-name' }, e.actor.username), e.actor.ip ? h('span', { class: 'ip' }, e.actor.ip) : null),
    h('td', {}, h('code', { class: 'action' }, e.action)),
    targetCell(e.target),
    h('td', {}, h('span', { class: `pill outcome ${e.outcome}` }, e.outcome)),
    // what it did in a few words (the settings changed by name, groups added and removed, the factor of a sign-in)
    h('td', { class: 'summary', 'data-summary': true }, auditSummary(e)),
    h('td', {}, toggle),
  );
  toggle.addEventListener('click', () => {
    const open = toggle.getAttribute('aria-expanded') !== 'true';
    toggle.setAttribute('aria-expanded', String(open));
    tr.classList.toggle('open', open);
    let details = tr.nextElementSibling instanceof HTMLTableRowElement && tr.nextElementSibling.classList.contains('details') ? tr.nextElementSibling : null;
    if (open && !details) tr.after((details = detailsRow(e)));
    if (details) details.hidden = !open;
  });
  return tr;
}

/** The whole event: its details as JSON (as text: never markup), the actor and target in full, the hash. */
function detailsRow(e: AuditEvent): HTMLTableRowElement {
  const fact = (term: string, value: Node | string) => [h('dt', {}, term), h('dd', {}, value)];
  const actor = [
    e.actor.username,
    e.actor.user_id ? `user id ${e.actor.user_id}` : null,
    e.actor.method ? `by ${e.actor.method}` : null,
    e.actor.ip ? `from ${e.actor.ip}` : null,
  ]
    .filter(Boolean)
    .join(', ');
  const target = [e.target.type, e.target.name, e.target.id && e.target.id !== e.target.name ? `id ${e.target.id}` : null].filter(Boolean).join(', ');
  return h(
    'tr',
    { class: 'details', id: `audit-details-${e.seq}`, dataset: { detailsOf: String(e.seq) } },
    h(
      'td',
      { colspan: COLUMNS },
      h(
        'dl',
        { class: 'facts' },
        fact('Seq', String(e.seq)),
        fact('Time', e.at),
        fact('Actor', actor),
        fact('Target', target),
        fact('Event id', e.id),
        fact('Hash', h('code', { class: 'hash' }, e.hash)),
      ),
      h('pre', { class: 'details-json', 'data-details-json': true }, JSON.stringify(e.details, null, 2)),
    ),
  );
}

/** Puts an event's row in its place (newest first); a detail row stays under its event. */
function add(e: AuditEvent, fresh: boolean): void {
  if (shown.has(e.seq)) return;
  shown.set(e.seq, e);
  const next = [...tbody.rows].find((r) => r.dataset.seq !== undefined && Number(r.dataset.seq) < e.seq);
  tbody.insertBefore(row(e, fresh), next ?? null);
}

/** A tail left running keeps MAX_ROWS rows: the oldest go, and "Load older" brings them back (and keeps them). */
function trim(): void {
  if (shown.size <= MAX_ROWS) return;
  const seqs = [...shown.keys()].sort((a, b) => b - a);
  for (const seq of seqs.slice(MAX_ROWS)) {
    shown.delete(seq);
    tbody.querySelector(`tr[data-seq="${seq}"]`)?.remove();
    tbody.querySelector(`tr[data-details-of="${seq}"]`)?.remove();
  }
  nextBefore = seqs[MAX_ROWS - 1]!;
}

function showState(): void {
  empty.hidden = shown.size > 0;
  older.hidden = nextBefore === null;
}

// ---- loading ---------------------------------------------------------------------------------

/** The first page for the current filters, replacing what is shown. */
function reload(): Promise<void> {
  const gen = ++generation;
  arriving = [];
  pending = [];
  catchUpOnResume = false;
  showPause();
  loaded = (async () => {
    let page: AuditPage;
    try {
      page = await api<AuditPage>('GET', `/api/audit?${query(filters, { limit: FIRST_PAGE })}`);
    } catch (err) {
      if (gen !== generation) return;
      arriving = null;
      // no rows of other filters under these ones
      shown.clear();
      tbody.replaceChildren();
      nextBefore = null;
      showState();
      empty.hidden = true;
      markInvalid(form, err);
      say(msg, `Could not load the events: ${errorText(err)}`, 'error');
      return;
    }
    if (gen !== generation) return;
    const during = arriving ?? [];
    arriving = null;
    shown.clear();
    tbody.replaceChildren();
    for (const e of page.events) add(e, false);
    nextBefore = page.next_before;
    for (const e of during) arrive(e);
    showState();
  })();
  return loaded;
}

/**
 * After a (re)connect: the newest page again, and what is not shown yet goes in as if it had
 * come live. More than a page of them: the list starts again from the newest.
 */
async function catchUp(): Promise<void> {
  await loaded;
  if (paused) {
    catchUpOnResume = true;
    return;
  }
  const gen = generation;
  const newest = Math.max(0, ...shown.keys());
  let page: AuditPage;
  try {
    page = await api<AuditPage>('GET', `/api/audit?${query(filters, { limit: FIRST_PAGE })}`);
  } catch {
    return; // the next reconnect tries again
  }
  if (gen !== generation) return;
  const missed = page.events.filter((e) => e.seq > newest);
  if (newest > 0 && page.next_before !== null && missed.length === page.events.length) {
    await reload();
    return;
  }
  for (const e of missed.reverse()) arrive(e);
}

/** A live event (or one caught up): at the top when it passes the filters, or held while paused. */
function arrive(e: AuditEvent): void {
  if (arriving) {
    arriving.push(e);
    return;
  }
  if (!matches(e, filters) || shown.has(e.seq)) return;
  if (paused) {
    if (!pending.some((p) => p.seq === e.seq)) pending.push(e);
    showPause();
    return;
  }
  add(e, true);
  trim();
  showState();
}

older.addEventListener('click', async () => {
  if (nextBefore === null) return;
  const gen = generation;
  const page = await busy(older, msg, () => api<AuditPage>('GET', `/api/audit?${query(filters, { before: nextBefore!, limit: OLDER_PAGE })}`));
  if (!page || gen !== generation) return;
  for (const e of page.events) add(e, false);
  nextBefore = page.next_before;
  showState();
});

/** Applies the form's filters: the address follows, the list starts again. */
function apply(): void {
  say(msg, '');
  filters = readForm();
  const q = query(filters, {});
  history.replaceState(null, '', q ? `?${q}` : location.pathname);
  void reload();
}

clearOnEdit(form, msg);
form.addEventListener('submit', (e) => {
  e.preventDefault();
  apply();
});
// choices apply at once; typed names on Enter or "Filter"
form.addEventListener('change', (e) => {
  if (e.target instanceof HTMLSelectElement || (e.target instanceof HTMLInputElement && e.target.name === 'since')) apply();
});
must('[data-clear-filters]', form).addEventListener('click', () => {
  form.reset();
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  apply();
});

// ---- live tail -------------------------------------------------------------------------------

function showPause(): void {
  pauseButton.setAttribute('aria-pressed', String(paused));
  pauseButton.textContent = paused ? (pending.length ? `Resume (${pending.length} new)` : 'Resume') : 'Pause';
  showLive(currentLiveState());
}

function showLive(s: LiveState): void {
  const state = s !== 'live' ? s : paused ? 'paused' : 'live';
  liveLabel.dataset.state = state;
  liveLabel.textContent = state === 'connecting' ? 'connecting…' : state;
  liveLabel.title =
    state === 'live'
      ? 'New events appear at the top as they happen'
      : state === 'paused'
        ? 'New events are held until you resume'
        : 'Live updates are paused until the connection is back';
}

pauseButton.addEventListener('click', () => {
  paused = !paused;
  if (!paused) {
    const held = pending;
    pending = [];
    for (const e of held) arrive(e);
    if (catchUpOnResume) {
      catchUpOnResume = false;
      void catchUp();
    }
  }
  showPause();
});

let wasLive = false;
onLiveState((s) => {
  showLive(s);
  if (s === 'live' && !wasLive) void catchUp();
  wasLive = s === 'live';
});
onFrame<AuditEvent>('audit:event', arrive);

fromAddress();
filters = readForm();
showPause();
void reload();
void boot();
