// Account, Security: my second factors (GET /api/me/mfa). Enrol an authenticator app (QR code,
// the key as text, confirmed with a code), add passkeys and security keys, remove a factor (the
// app with one of its codes), new recovery codes; recovery codes are shown once, with a download.
// An enrolment lists the API keys issued before the first factor (they never passed it), with
// one button that revokes them all.
// What needs a fresh verification (step-up) opens the dialog by itself (api() in app.ts).
import type { Answer, MfaStatus, Schemas } from '../../client/api-types.js';
import { $, api, busy, clearOnEdit, confirmButton, control, copyText, ENROLMENT_EVENT, fieldProblems, h, me, must, say, submitter, text, when } from './app.js';
import { createPasskey, passkeyErrorText, passkeysSupported, type FlowOptions, type PublicKeyCredentialCreationOptionsJSON } from './passkeys.js';

type TotpStart = Answer<'/api/me/mfa/totp', 'post'>;
type TotpConfirmed = Answer<'/api/me/mfa/totp/confirm', 'post'>;
type PasskeyAdded = Answer<'/api/me/mfa/webauthn', 'post'>;
type Revoked = Answer<'/api/me/api-keys/revoke-before-factor', 'post'>;

/** `keysChanged`: the page's list of API keys is out of date (keys were revoked here). */
export function securityPanel(section: HTMLElement, keysChanged: () => void = () => undefined): void {
  const rows = must<HTMLTableSectionElement>('[data-factors] tbody', section);
  const msg = must('[data-security-msg]', section);
  const required = must('[data-mfa-required]', section);
  const codesBox = must('[data-recovery-codes]', section);
  const codesList = must('[data-codes]', codesBox);
  const totpBlock = must('[data-totp-block]', section);
  const totpStart = must<HTMLButtonElement>('[data-totp-start]', section);
  const totpEnrol = must('[data-totp-enrol]', section);
  const totpConfirm = must<HTMLFormElement>('[data-totp-confirm]', section);
  const totpRemove = must<HTMLFormElement>('[data-totp-remove]', section);
  const passkeyForm = must<HTMLFormElement>('[data-passkey-add]', section);
  const earlyKeys = must('[data-keys-before-factor]', section);
  const revokeEarly = must<HTMLButtonElement>('[data-revoke-before-factor]', earlyKeys);
  let codes: string[] = [];
  const reauth = must<HTMLFormElement>('[data-reauth]', section);
  reauth.addEventListener('submit', (e) => e.preventDefault());
  /** A first factor's proof that this is the account's person: the password, once the service asked for it. */
  const reauthentication = () => {
    const password = control(reauth, 'current_password').value;
    return !reauth.hidden && password ? { current_password: password } : {};
  };
  /** The service asked for the current password (this sign-in is older than 5 minutes): the field shows. */
  const askedForPassword = (err: unknown): never => {
    if (fieldProblems(err).some((p) => p.field === 'current_password')) {
      reauth.hidden = false;
      control(reauth, 'current_password').focus();
    }
    throw err;
  };

  const mustEnrol = new URLSearchParams(location.search).get('mfa') === 'required';
  const showRequired = () => {
    required.hidden = false;
  };
  if (mustEnrol) showRequired();
  document.addEventListener(ENROLMENT_EVENT, showRequired);
  if (mustEnrol || location.hash === '#security') section.scrollIntoView({ block: 'start' });

  /** Ten recovery codes, shown this once, with a download and a copy. */
  function showCodes(list: string[]): void {
    codes = list;
    codesList.replaceChildren(...list.map((c) => h('li', {}, h('code', {}, c))));
    codesBox.hidden = false;
    codesBox.scrollIntoView({ block: 'nearest' });
  }
  must('[data-download]', codesBox).addEventListener('click', () => {
    const file = [
      `service-core recovery codes for ${me.username} at ${location.host}`,
      `saved ${new Date().toISOString()}; each code works once`,
      '',
      ...codes,
      '',
    ].join('\n');
    const url = URL.createObjectURL(new Blob([file], { type: 'text/plain' }));
    const a = h('a', { href: url, download: `${location.hostname}-recovery-codes.txt` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  });
  const copyCodes = must<HTMLButtonElement>('[data-copy-codes]', codesBox);
  copyCodes.addEventListener('click', async () => {
    copyCodes.textContent = (await copyText(codes.join('\n'))) ? 'Copied' : 'Copy failed: select the codes';
  });
  must('[data-codes-done]', codesBox).addEventListener('click', () => {
    codes = [];
    codesList.replaceChildren();
    codesBox.hidden = true;
    copyCodes.textContent = 'Copy';
  });

  /** The API keys an enrolment answered as issued before the first factor (none: the box goes). */
  function showKeysBeforeFactor(keys: readonly Schemas['ApiKey'][]): void {
    must('tbody', earlyKeys).replaceChildren(
      // the last column is the tables' column of actions: empty here (one button below revokes them all)
      ...keys.map((k) =>
        h('tr', { dataset: { keyId: k.id } }, h('td', {}, k.label), h('td', {}, h('code', {}, k.prefix)), h('td', {}, when(k.created_at)), h('td', {})),
      ),
    );
    earlyKeys.hidden = keys.length === 0;
  }
  revokeEarly.addEventListener('click', async () => {
    const done = await busy(revokeEarly, msg, () => api<Revoked>('POST', '/api/me/api-keys/revoke-before-factor'));
    if (!done) return;
    showKeysBeforeFactor([]);
    say(msg, `Revoked ${done.revoked === 1 ? '1 API key' : `${done.revoked} API keys`} issued before your second factor.`);
    keysChanged();
  });
  must('[data-keys-kept]', earlyKeys).addEventListener('click', () => {
    showKeysBeforeFactor([]);
    say(msg, 'The keys stay: revoke them under API keys once nothing needs them.');
  });

  async function load(): Promise<void> {
    const s = await api<MfaStatus>('GET', '/api/me/mfa');
    const any = s.totp || s.webauthn.length > 0;
    required.hidden = any || !(s.required || mustEnrol);
    totpStart.hidden = s.totp;
    must('.note', totpBlock).textContent = s.totp
      ? 'Enrolled: remove it above to set up another.'
      : 'An app such as FreeOTP, Aegis or Google Authenticator shows a new 6-digit code every 30 seconds.';
    if (s.totp) totpEnrol.hidden = true;
    const removeTotp = h('button', { type: 'button', class: 'small secondary', onclick: () => openTotpRemove() }, 'Remove');
    rows.replaceChildren(
      ...(s.totp
        ? [
            h(
              'tr',
              { dataset: { factor: 'totp' } },
              h('td', {}, 'Authenticator app ', h('span', { class: 'pill on' }, 'app')),
              h('td', {}, s.totp_created_at ? when(s.totp_created_at) : '—'),
              h('td', {}, s.totp_last_used_at ? when(s.totp_last_used_at) : 'never'),
              h('td', {}, removeTotp),
            ),
          ]
        : []),
      ...s.webauthn.map((k) =>
        h(
          'tr',
          { dataset: { factor: 'webauthn', passkeyId: k.id } },
          h('td', {}, k.label, ' ', h('span', { class: 'pill on' }, 'passkey')),
          h('td', {}, when(k.created_at)),
          h('td', {}, k.last_used_at ? when(k.last_used_at) : 'never'),
          h(
            'td',
            {},
            confirmButton(h('button', { type: 'button', class: 'small secondary' }, 'Remove'), 'Confirm remove', async () => {
              const ok = await busy(null, msg, () => api('DELETE', `/api/me/mfa/webauthn/${encodeURIComponent(k.id)}`).then(() => true));
              if (ok) say(msg, `Removed "${k.label}".`);
              await refresh();
            }),
          ),
        ),
      ),
      ...(any
        ? [
            h(
              'tr',
              { dataset: { factor: 'recovery' } },
              h('td', {}, 'Recovery codes ', h('span', { class: `pill ${s.recovery_codes_left > 2 ? 'on' : 'off'}` }, `${s.recovery_codes_left} left`)),
              h('td', {}, '—'),
              h('td', {}, '—'),
              h(
                'td',
                {},
                confirmButton(
                  h('button', { type: 'button', class: 'small secondary', 'data-new-codes': '' }, 'New codes'),
                  'Confirm: old ones stop',
                  async () => {
                    const got = await busy(null, msg, () => api<{ recovery_codes: string[] }>('POST', '/api/me/mfa/recovery-codes'));
                    if (!got) return;
                    say(msg, 'New recovery codes: the old ones no longer work.');
                    showCodes(got.recovery_codes);
                    await refresh();
                  },
                ),
              ),
            ),
          ]
        : [h('tr', {}, h('td', { colspan: 4, class: 'empty' }, 'No second factor yet: set one up below.'))]),
    );
  }
  const refresh = () => load().catch((err: unknown) => say(msg, err instanceof Error ? err.message : String(err), 'error'));

  // ---- authenticator app --------------------------------------------------------------------

  totpStart.addEventListener('click', async () => {
    const started = await busy(totpStart, msg, () => api<TotpStart>('POST', '/api/me/mfa/totp', reauthentication()).catch(askedForPassword));
    if (!started) return;
    say(msg, '');
    // the QR code is an image (data: URL): the SVG never becomes part of the page
    must<HTMLImageElement>('[data-totp-qr]', totpEnrol).src = `data:image/svg+xml;charset=utf-8,${encodeURIComponent(started.qr_svg)}`;
    must('[data-totp-secret]', totpEnrol).textContent = started.secret.replace(/(.{4})(?=.)/g, '$1 ');
    totpEnrol.hidden = false;
    totpStart.hidden = true;
    control(totpConfirm, 'code').focus();
  });
  clearOnEdit(totpConfirm, msg);
  totpConfirm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const code = text(new FormData(totpConfirm), 'code').trim();
    const got = await busy(submitter(e), msg, () => api<TotpConfirmed>('POST', '/api/me/mfa/totp/confirm', { code }));
    if (!got) return;
    totpConfirm.reset();
    totpEnrol.hidden = true;
    say(msg, 'Authenticator app set up. Sign-ins now ask for its code.');
    showCodes(got.recovery_codes);
    showKeysBeforeFactor(got.keys_before_factor);
    await refresh();
  });
  must('[data-cancel]', totpConfirm).addEventListener('click', () => {
    totpConfirm.reset();
    totpEnrol.hidden = true;
    totpStart.hidden = false;
  });

  function openTotpRemove(): void {
    totpRemove.hidden = false;
    control(totpRemove, 'code').focus();
  }
  clearOnEdit(totpRemove, msg);
  totpRemove.addEventListener('submit', async (e) => {
    e.preventDefault();
    const code = text(new FormData(totpRemove), 'code').trim();
    const ok = await busy(submitter(e), msg, () => api('DELETE', '/api/me/mfa/totp', { code }).then(() => true));
    if (!ok) return;
    totpRemove.reset();
    totpRemove.hidden = true;
    say(msg, 'Authenticator app removed.');
    await refresh();
  });
  must('[data-cancel]', totpRemove).addEventListener('click', () => {
    totpRemove.reset();
    totpRemove.hidden = true;
  });

  // ---- passkeys -----------------------------------------------------------------------------

  if (!passkeysSupported()) {
    passkeyForm.hidden = true;
    $('[data-passkey-unsupported]', section)?.removeAttribute('hidden');
  }
  clearOnEdit(passkeyForm, msg);
  passkeyForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const label = text(new FormData(passkeyForm), 'label').trim() || 'Passkey';
    const added = await busy(submitter(e), msg, async () => {
      const { options } = await api<FlowOptions<PublicKeyCredentialCreationOptionsJSON>>('POST', '/api/me/mfa/webauthn/options', reauthentication()).catch(
        askedForPassword,
      );
      let response;
      try {
        response = await createPasskey(options);
      } catch (err) {
        throw new Error(passkeyErrorText(err), { cause: err });
      }
      return api<PasskeyAdded>('POST', '/api/me/mfa/webauthn', { label, response });
    });
    if (!added) return;
    passkeyForm.reset();
    say(msg, `Passkey "${added.label}" added.`);
    if (added.recovery_codes) showCodes(added.recovery_codes);
    showKeysBeforeFactor(added.keys_before_factor);
    await refresh();
  });

  void refresh();
}
