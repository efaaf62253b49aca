/**
 * The host services page (/admin/hosts): the socket providers and their health, the DNS records
 * of the zones, DHCP leases and reservations, the allowed systemd units. Its structure only:
 * src/web/browser/hosts.ts fills it from the public API (/api/socket/...) and shows each part and
 * each form by what GET /api/me/access says the viewer holds; the API checks every call anyway.
 * Who opens it: PAGES.hosts in ./access.ts.
 */

import { html, type SafeHtml } from './html.js';

/** Where the API's words about one field of a form go (filled by the browser module). */
const fieldMsg = (name: string) => html`<span class="field-msg" data-field-msg="${name}" role="status"></span>`;

/** A labelled control with its own message line under it. */
const field = (label: string, control: SafeHtml, name: string) => html`<label class="field">${label} ${control}${fieldMsg(name)}</label>`;

const NAME_RULE = 'A domain name: letters, digits and hyphens in dot-separated labels, e.g. printer.home.arpa.';
const MAC_RULE = 'An Ethernet address like aa:bb:cc:dd:ee:ff';
const IPV4_RULE = 'An IPv4 address like 192.0.2.10';

const DNS_PANEL = html`<section class="panel wide hosts-part" data-part="dns" aria-labelledby="dns-title" hidden>
<div class="panel-head"><h2 id="dns-title">DNS records</h2><span class="note" data-dns-zones></span></div>
<form data-dns-add class="host-form" novalidate hidden>
<h3>Add a record</h3>
<div class="host-fields">
${field('Name', html`<input name="name" required maxlength="300" autocomplete="off" spellcheck="false" placeholder="printer.home.arpa." title="${NAME_RULE}">`, 'name')}
${field('Type', html`<select name="type"><option>A</option><option>AAAA</option><option>CNAME</option><option>TXT</option><option>PTR</option></select>`, 'type')}
${field('Data', html`<input name="data" required maxlength="300" autocomplete="off" spellcheck="false" placeholder="192.0.2.10">`, 'data')}
${field('TTL (seconds)', html`<input name="ttl" type="number" min="0" step="1" inputmode="numeric" placeholder="default">`, 'ttl')}
</div>
<div class="row"><button type="submit">Add record</button></div>
<p class="form-msg" data-msg role="status"></p>
</form>
<p class="form-msg" data-list-msg role="status"></p>
<table class="list host-table" data-dns-records><thead><tr><th>Name</th><th>Type</th><th>Data</th><th>TTL</th><th></th></tr></thead><tbody></tbody></table>
<p class="empty" data-empty hidden>No records in the zones.</p>
</section>`;

const DHCP_PANEL = html`<section class="panel wide hosts-part" data-part="dhcp" aria-labelledby="dhcp-title" hidden>
<div class="panel-head"><h2 id="dhcp-title">DHCP</h2><span class="note" data-dhcp-subnets></span></div>
<form data-reservation-add class="host-form" novalidate hidden>
<h3>Add a reservation</h3>
<div class="host-fields">
${field('Subnet', html`<select name="subnet_id" required></select>`, 'subnet_id')}
${field('Ethernet address', html`<input name="hw_address" required maxlength="17" autocomplete="off" spellcheck="false" placeholder="aa:bb:cc:dd:ee:ff" title="${MAC_RULE}">`, 'hw_address')}
${field('IP address', html`<input name="ip_address" required maxlength="15" autocomplete="off" spellcheck="false" inputmode="decimal" placeholder="192.0.2.10" title="${IPV4_RULE}">`, 'ip_address')}
${field('Hostname', html`<input name="hostname" maxlength="254" autocomplete="off" spellcheck="false" placeholder="printer (optional)">`, 'hostname')}
</div>
<label class="check" data-dns-option><input type="checkbox" name="dns"> Also add DNS records (A and PTR)</label>
${fieldMsg('dns')}
<div class="row"><button type="submit">Add reservation</button></div>
<p class="form-msg" data-msg role="status"></p>
</form>
<div data-dhcp-reads hidden>
<h3>Reservations</h3>
<p class="form-msg" data-reservations-msg role="status"></p>
<table class="list host-table" data-reservations><thead><tr><th>Subnet</th><th>Ethernet</th><th>IP address</th><th>Hostname</th><th>DNS</th><th></th></tr></thead><tbody></tbody></table>
<p class="empty" data-reservations-empty hidden>No reservations.</p>
<h3>Leases</h3>
<p class="form-msg" data-leases-msg role="status"></p>
<table class="list host-table" data-leases><thead><tr><th>IP address</th><th>Ethernet</th><th>Hostname</th><th>Subnet</th><th>State</th><th>Expires</th><th></th></tr></thead><tbody></tbody></table>
<p class="empty" data-leases-empty hidden>No leases.</p>
</div>
</section>`;

const INIT_PANEL = html`<section class="panel wide hosts-part" data-part="init" aria-labelledby="init-title" hidden>
<div class="panel-head"><h2 id="init-title">Units</h2><span class="note" data-init-allowed></span></div>
<p class="form-msg" data-list-msg role="status"></p>
<table class="list host-table" data-units><thead><tr><th>Unit</th><th>Description</th><th>State</th><th>Unit file</th><th></th></tr></thead><tbody></tbody></table>
<p class="empty" data-empty hidden>No unit matches the allowed names.</p>
</section>`;

const HOSTS_CONTENT = html`<div class="grid hosts">
<section class="panel wide" aria-labelledby="providers-title">
<div class="panel-head"><h2 id="providers-title">Providers</h2><button type="button" class="small secondary" data-refresh>Refresh</button></div>
<p class="note" data-access-note></p>
<p class="form-msg" data-providers-msg role="status"></p>
<ul class="host-providers" data-providers></ul>
<p class="empty" data-providers-empty hidden>No socket provider is configured on this instance.</p>
</section>
${DNS_PANEL}
${DHCP_PANEL}
${INIT_PANEL}
</div>`;

export function hostsContent(): SafeHtml {
  return HOSTS_CONTENT;
}
