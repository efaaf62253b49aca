// The host services page: every socket provider with its health, then, for the providers this
// instance has and by what GET /api/me/access says the viewer holds, the DNS records of the
// zones, DHCP reservations and leases, the allowed systemd units, with their forms and buttons.
// It talks to the public API only (/api/socket/...): GET for reads, POST for changes; a change
// answered step_up_required opens the step-up dialog and is sent again (app.ts api()). The API's
// errors are put in words next to the field they name.
import { $, api, boot, h, must, reasonHiddenNote, say, text, when } from './app.js';
import {
  actionButton,
  change,
  clearForm,
  fill,
  inWords,
  PART_NAMES,
  PARTS,
  read,
  showError,
  type Access,
  type DnsRecord,
  type Health,
  type Lease,
  type PartName,
  type Provider,
  type Reservation,
  type Unit,
} from './hosts/api.js';

const providersList = must('[data-providers]');
const providersMsg = must('[data-providers-msg]');
const accessNote = must('[data-access-note]');
const part = (name: PartName) => must(`[data-part="${name}"]`);
let held = new Set<string>();
const can = (p: string) => held.has(p);

// ---- DNS -------------------------------------------------------------------------------

const dns = part('dns');
const dnsTable = must<HTMLTableElement>('[data-dns-records]', dns);
const dnsMsg = must('[data-list-msg]', dns);

async function loadDns(): Promise<void> {
  if (!can(PARTS.dns.read)) {
    dnsTable.hidden = true;
    return;
  }
  try {
    const { records } = await read<{ records: DnsRecord[] }>('dns', 'records');
    const row = (r: DnsRecord) =>
      h(
        'tr',
        { dataset: { record: `${r.name} ${r.type} ${r.data}` } },
        h('td', {}, r.name),
        h('td', {}, r.type),
        h('td', { class: 'mono' }, r.data),
        h('td', {}, String(r.ttl)),
        h(
          'td',
          {},
          can(PARTS.dns.write)
            ? actionButton(
                'Remove',
                dnsMsg,
                async () => {
                  await change('dns', 'record_remove', { name: r.name, type: r.type, data: r.data });
                  void loadDns();
                  return `Removed ${r.name} ${r.type} ${r.data}.`;
                },
                { confirm: 'Remove?', data: { removeRecord: '' } },
              )
            : null,
        ),
      );
    fill(dnsTable, $('[data-empty]', dns), records.map(row));
  } catch (err) {
    say(dnsMsg, inWords(err), 'error');
  }
}

const dnsForm = must<HTMLFormElement>('[data-dns-add]', dns);
/** What the data of each type looks like, as the placeholder of the data field. */
const DATA_EXAMPLE: Record<string, string> = { A: '192.0.2.10', AAAA: '2001:db8::10', CNAME: 'target.home.arpa.', TXT: 'any text', PTR: 'host.home.arpa.' };
const typeSelect = dnsForm.elements.namedItem('type') as HTMLSelectElement;
typeSelect.addEventListener('change', () => {
  (dnsForm.elements.namedItem('data') as HTMLInputElement).placeholder = DATA_EXAMPLE[typeSelect.value] ?? '';
});
dnsForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  clearForm(dnsForm);
  const f = new FormData(dnsForm);
  const args: Record<string, unknown> = { name: text(f, 'name').trim(), type: text(f, 'type'), data: text(f, 'data').trim() };
  const ttl = text(f, 'ttl').trim();
  // a TTL that is not a number goes as typed: the API names the field
  if (ttl) args.ttl = /^\d+$/.test(ttl) ? Number(ttl) : ttl;
  const button = dnsForm.querySelector('button[type=submit]') as HTMLButtonElement;
  button.disabled = true;
  try {
    const { record } = await change<{ record: DnsRecord }>('dns', 'record_add', args);
    dnsForm.reset();
    typeSelect.dispatchEvent(new Event('change'));
    say($('[data-msg]', dnsForm), `Added ${record.name} ${record.type} ${record.data}.`, 'ok');
    await loadDns();
  } catch (err) {
    showError(dnsForm, err, 'name');
  } finally {
    button.disabled = false;
  }
});

// ---- DHCP ------------------------------------------------------------------------------

const dhcp = part('dhcp');
const reservationsTable = must<HTMLTableElement>('[data-reservations]', dhcp);
const leasesTable = must<HTMLTableElement>('[data-leases]', dhcp);
const reservationsMsg = must('[data-reservations-msg]', dhcp);
const leasesMsg = must('[data-leases-msg]', dhcp);

async function loadReservations(): Promise<void> {
  try {
    const { reservations } = await read<{ reservations: Reservation[] }>('dhcp', 'reservations');
    const row = (r: Reservation) =>
      h(
        'tr',
        { dataset: { reservation: `${r.subnet_id} ${r.hw_address ?? ''}` } },
        h('td', {}, String(r.subnet_id)),
        h('td', { class: 'mono' }, r.hw_address ?? '—'),
        h('td', {}, r.ip_address ?? '—'),
        h('td', {}, r.hostname ?? '—'),
        h('td', {}, r.dns ? 'A and PTR' : 'no'),
        h(
          'td',
          {},
          can(PARTS.dhcp.write) && r.hw_address
            ? actionButton(
                'Remove',
                reservationsMsg,
                async () => {
                  const done = await change<{ records_removed: number }>('dhcp', 'reservation_remove', { subnet_id: r.subnet_id, hw_address: r.hw_address });
                  void loadReservations();
                  if (done.records_removed) void loadDns();
                  return `Removed the reservation of ${r.hw_address}${done.records_removed ? ` and its ${done.records_removed} DNS records` : ''}.`;
                },
                { confirm: 'Remove?', data: { removeReservation: '' } },
              )
            : null,
        ),
      );
    fill(reservationsTable, $('[data-reservations-empty]', dhcp), reservations.map(row));
  } catch (err) {
    say(reservationsMsg, inWords(err), 'error');
  }
}

async function loadLeases(): Promise<void> {
  try {
    const { leases } = await read<{ leases: Lease[] }>('dhcp', 'leases');
    const row = (l: Lease) =>
      h(
        'tr',
        { dataset: { lease: l.ip_address } },
        h('td', {}, l.ip_address),
        h('td', { class: 'mono' }, l.hw_address ?? '—'),
        h('td', {}, l.hostname ?? '—'),
        h('td', {}, String(l.subnet_id)),
        h('td', {}, l.state),
        h('td', {}, l.expires_at ? when(l.expires_at) : 'never'),
        h(
          'td',
          {},
          can(PARTS.dhcp.write)
            ? actionButton(
                'Release',
                leasesMsg,
                async () => {
                  await change('dhcp', 'lease_release', { ip_address: l.ip_address });
                  void loadLeases();
                  return `Released ${l.ip_address}.`;
                },
                { confirm: 'Release?', data: { releaseLease: '' } },
              )
            : null,
        ),
      );
    fill(leasesTable, $('[data-leases-empty]', dhcp), leases.map(row));
  } catch (err) {
    say(leasesMsg, inWords(err), 'error');
  }
}

async function loadDhcp(): Promise<void> {
  must('[data-dhcp-reads]', dhcp).hidden = !can(PARTS.dhcp.read);
  if (can(PARTS.dhcp.read)) await Promise.all([loadReservations(), loadLeases()]);
}

const reservationForm = must<HTMLFormElement>('[data-reservation-add]', dhcp);
reservationForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  clearForm(reservationForm);
  const f = new FormData(reservationForm);
  const subnet = text(f, 'subnet_id');
  const args: Record<string, unknown> = {
    subnet_id: /^\d+$/.test(subnet) ? Number(subnet) : subnet,
    hw_address: text(f, 'hw_address').trim(),
    ip_address: text(f, 'ip_address').trim(),
    dns: f.get('dns') === 'on',
  };
  const hostname = text(f, 'hostname').trim();
  if (hostname) args.hostname = hostname;
  const button = reservationForm.querySelector('button[type=submit]') as HTMLButtonElement;
  button.disabled = true;
  try {
    const { reservation: r } = await change<{ reservation: Reservation }>('dhcp', 'reservation_add', args);
    reservationForm.reset();
    say(
      $('[data-msg]', reservationForm),
      `Reserved ${r.ip_address} for ${r.hw_address}${r.hostname ? ` (${r.hostname})` : ''}${r.dns ? ' with its DNS records' : ''}.`,
      'ok',
    );
    await Promise.all([loadDhcp(), r.dns ? loadDns() : null]);
  } catch (err) {
    showError(reservationForm, err, args.dns ? 'hostname' : 'ip_address');
  } finally {
    button.disabled = false;
  }
});

// ---- init ------------------------------------------------------------------------------

const init = part('init');
const unitsTable = must<HTMLTableElement>('[data-units]', init);
const unitsMsg = must('[data-list-msg]', init);
/** a unit's refusals: a conflict is an action the unit cannot take (a reload it has no command for) */
const UNIT_WORDS = { conflict: 'The unit cannot do this' };
const PAST: Record<string, string> = { start: 'started', stop: 'stopped', restart: 'restarted', reload: 'reloaded' };

async function loadUnits(): Promise<void> {
  unitsTable.hidden = !can(PARTS.init.read);
  if (!can(PARTS.init.read)) return;
  try {
    const { units } = await read<{ units: Unit[] }>('init', 'units');
    const buttons = (u: Unit) =>
      Object.keys(PAST).map((action) =>
        actionButton(
          action[0]!.toUpperCase() + action.slice(1),
          unitsMsg,
          async () => {
            const done = await change<{ active_state: string }>('init', 'unit_action', { unit: u.unit, action });
            void loadUnits();
            return `${u.unit} ${PAST[action]}: now ${done.active_state}.`;
          },
          { data: { unitAction: action }, words: UNIT_WORDS },
        ),
      );
    const row = (u: Unit) =>
      h(
        'tr',
        { dataset: { unit: u.unit } },
        h('td', { class: 'mono' }, u.unit),
        h('td', {}, u.description || '—'),
        h(
          'td',
          {},
          h('span', { class: `pill ${u.active_state === 'active' ? 'on' : u.active_state === 'failed' ? 'off' : ''}` }, u.active_state),
          ` ${u.sub_state}`,
        ),
        h('td', {}, u.unit_file_state ?? '—'),
        h('td', {}, can(PARTS.init.write) ? h('div', { class: 'unit-actions' }, buttons(u)) : null),
      );
    fill(unitsTable, $('[data-empty]', init), units.map(row));
  } catch (err) {
    say(unitsMsg, inWords(err), 'error');
  }
}

// ---- providers and their health --------------------------------------------------------

/** The health facts of a provider this page knows (version, zones, subnets, allowed units). */
function facts(name: string, health: Health | null): Node[] {
  if (!health) return [];
  const items: Array<[string, string]> = [];
  if (health.version) items.push(['Version', health.version]);
  if (health.zones) items.push(['Zones', health.zones.join(', ') || 'none']);
  if (health.subnets) items.push(['Subnets', health.subnets.map((s) => `${s.id}: ${s.subnet}`).join(', ') || 'none']);
  if (health.units_allowed) items.push(['Units allowed', health.units_allowed.join(', ')]);
  return items.length
    ? [
        h(
          'dl',
          { class: 'facts host-facts', dataset: { facts: name } },
          items.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]),
        ),
      ]
    : [];
}

let loads = 0;
async function load(): Promise<void> {
  say(providersMsg, '');
  let providers: Provider[];
  let reasonsHidden = false;
  try {
    const [list, access] = await Promise.all([
      api<{ providers: Provider[]; host_facts_hidden?: boolean }>('GET', '/api/socket/providers'),
      api<Access>('GET', '/api/me/access'),
    ]);
    providers = list.providers;
    reasonsHidden = Boolean(list.host_facts_hidden);
    held = new Set(access.permissions);
  } catch (err) {
    say(providersMsg, inWords(err), 'error');
    return;
  }
  const present = new Set(providers.map((p) => p.name));
  const healths = new Map<string, Health | null>();
  await Promise.all(PART_NAMES.filter((n) => present.has(n)).map(async (n) => healths.set(n, await read<Health>(n, 'health').catch(() => null))));
  const entry = (p: Provider) =>
    h(
      'li',
      { class: 'host-provider', dataset: { provider: p.name } },
      h(
        'div',
        { class: 'host-provider-head' },
        h('strong', {}, p.name),
        h('span', { class: `pill ${p.available ? 'on' : 'off'}` }, p.available ? 'available' : 'unavailable'),
      ),
      !p.available ? h('p', { class: 'note reason', dataset: { reason: '' } }, p.reason ?? 'no reason given') : null,
      !p.available && reasonsHidden ? reasonHiddenNote() : null,
      p.plugin ? h('p', { class: 'note' }, `from the plugin ${p.plugin}`) : null,
      ...facts(p.name, healths.get(p.name) ?? null),
    );
  providersList.replaceChildren(...providers.map(entry));
  must('[data-providers-empty]').hidden = providers.length > 0;

  const shown = PART_NAMES.filter((n) => present.has(n) && (can(PARTS[n].read) || can(PARTS[n].write)));
  const missing = PART_NAMES.filter((n) => present.has(n) && !shown.includes(n));
  accessNote.textContent = missing.length
    ? `The details of ${missing.join(', ')} need their read permission (${missing.map((n) => PARTS[n].read).join(', ')}), which only a superadmin can grant.`
    : '';
  for (const n of PART_NAMES) part(n).hidden = !shown.includes(n);

  const dnsHealth = healths.get('dns');
  must('[data-dns-zones]', dns).textContent = dnsHealth?.zones?.length ? `Zones: ${dnsHealth.zones.join(', ')}` : '';
  dnsForm.hidden = !can(PARTS.dns.write);
  const dhcpHealth = healths.get('dhcp');
  const subnets = dhcpHealth?.subnets ?? [];
  must('[data-dhcp-subnets]', dhcp).textContent = subnets.length ? `Subnets: ${subnets.map((s) => s.subnet).join(', ')}` : '';
  const select = reservationForm.elements.namedItem('subnet_id') as HTMLSelectElement;
  const chosen = select.value;
  select.replaceChildren(...subnets.map((s) => h('option', { value: String(s.id) }, `${s.id}: ${s.subnet}`)));
  if (chosen) select.value = chosen;
  reservationForm.hidden = !can(PARTS.dhcp.write);
  // the records of a reservation go through the dns provider: offered when this instance has one
  must('[data-dns-option]', reservationForm).hidden = !present.has('dns');
  const allowed = healths.get('init')?.units_allowed ?? [];
  must('[data-init-allowed]', init).textContent = allowed.length ? `Allowed: ${allowed.join(', ')}` : '';

  await Promise.all([shown.includes('dns') ? loadDns() : null, shown.includes('dhcp') ? loadDhcp() : null, shown.includes('init') ? loadUnits() : null]);
  // each load done, counted (tests wait for it)
  document.body.dataset.hostsLoaded = String(++loads);
}

// a field edited again loses the message about its former value, and the form its result
for (const form of [dnsForm, reservationForm]) {
  form.addEventListener('input', (e) => {
    const name = e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement ? e.target.name : '';
    if (!name) return;
    say(form.querySelector(`[data-field-msg="${CSS.escape(name)}"]`), '');
    (e.target as Element).removeAttribute('aria-invalid');
    say($('[data-msg]', form), '');
  });
}

must<HTMLButtonElement>('[data-refresh]').addEventListener('click', () => void load());
void load().finally(() => void boot());
