// The step-up dialog, opened by the shared API helper (app.ts api()) on any page whose call is
// answered 403 step_up_required: the second factor again (a passkey, a code of the
// authenticator app or a recovery code) through POST /api/auth/step-up; the call is then retried.
// Its own calls use fetch() directly, never api(), which would open the dialog again.
import type { MfaStatus } from '../../client/api-types.js';
import { assertPasskey, passkeyErrorText, passkeysSupported, type FlowOptions, type PublicKeyCredentialRequestOptionsJSON } from './passkeys.js';

/** GET /api/me/mfa (the parts the dialog needs). */
type Factors = Pick<MfaStatus, 'totp' | 'webauthn' | 'recovery_codes_left'>;

/** What the 403 said (details.step_up of the error body). */
export interface StepUpDetails {
  step_up?: { window_minutes?: number };
}

async function post(path: string, payload: unknown): Promise<{ status: number; data: unknown }> {
  const res = await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { accept: 'application/json', 'content-type': 'application/json' },
    body: JSON.stringify(payload),
  });
  return { status: res.status, data: res.status === 204 ? null : await res.json().catch(() => null) };
}

const messageOf = (data: unknown, fallback: string): string => (data as { error?: { message?: string } } | null)?.error?.message ?? fallback;

function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: Array<Node | string>): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  e.append(...children);
  return e;
}

/** The one open dialog: calls refused at the same moment share it. */
let open: Promise<boolean> | null = null;

/**
 * Asks for the second factor again. Resolves true once POST /api/auth/step-up accepted it,
 * false when the person cancelled.
 */
export function stepUp(details?: StepUpDetails): Promise<boolean> {
  open ??= showDialog(details).finally(() => {
    open = null;
  });
  return open;
}

async function showDialog(details?: StepUpDetails): Promise<boolean> {
  const factors = await fetch('/api/me/mfa', { credentials: 'same-origin', headers: { accept: 'application/json' } })
    .then((r) => (r.ok ? (r.json() as Promise<Factors>) : null))
    .catch(() => null);
  const withPasskey = Boolean(factors?.webauthn.length) && passkeysSupported();
  const withCode = !factors || factors.totp || factors.recovery_codes_left > 0;
  const minutes = details?.step_up?.window_minutes;

  const msg = el('p', { class: 'form-msg', role: 'status', 'data-step-up-msg': '' });
  const code = el('input', {
    name: 'code',
    autocomplete: 'one-time-code',
    maxlength: '64',
    spellcheck: 'false',
    inputmode: factors?.totp === false ? 'text' : 'numeric',
  });
  const verify = el('button', { type: 'submit' }, 'Verify');
  const cancel = el('button', { type: 'button', class: 'secondary', 'data-step-up-cancel': '' }, 'Cancel');
  const passkey = el('button', { type: 'button', 'data-step-up-passkey': '' }, 'Use your passkey');
  const form = el(
    'form',
    { method: 'dialog', class: 'stack', 'data-step-up-form': '' },
    el('h2', { id: 'step-up-title' }, 'Confirm it is you'),
    el('p', { class: 'note' }, `This action needs your second factor again${minutes ? `; it then covers such actions for ${minutes} minutes` : ''}.`),
    ...(withPasskey ? [passkey, ...(withCode ? [el('p', { class: 'or' }, 'or')] : [])] : []),
    ...(withCode ? [el('label', {}, factors?.totp === false ? 'Recovery code' : 'Code from your authenticator app, or a recovery code', code)] : []),
    el('div', { class: 'row' }, ...(withCode ? [verify] : []), cancel),
    msg,
  );
  const dialog = el('dialog', { class: 'step-up', 'aria-labelledby': 'step-up-title', 'data-step-up': '' }, form);
  document.body.append(dialog);

  return new Promise<boolean>((resolve) => {
    let done = false;
    const finish = (ok: boolean) => {
      if (done) return;
      done = true;
      dialog.close();
      dialog.remove();
      resolve(ok);
    };
    const say = (text: string) => {
      msg.textContent = text;
      msg.className = `form-msg ${text ? 'error' : ''}`;
    };
    const busy = (on: boolean) => {
      for (const b of [verify, passkey, cancel]) b.disabled = on;
    };
    /** Sends a proof; true when accepted, else says why. */
    const send = async (proof: { code: string } | { webauthn: unknown }): Promise<boolean> => {
      const { status, data } = await post('/api/auth/step-up', proof);
      if (status === 204) return true;
      if (status === 401) say('webauthn' in proof ? 'The passkey was not accepted.' : 'That code is not right, or it was used already.');
      else if (status === 429) say('Too many attempts. Wait a minute and try again.');
      else say(messageOf(data, `The verification failed (${status}).`));
      return false;
    };

    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (!code.value.trim()) {
        say('Type a code first.');
        code.focus();
        return;
      }
      busy(true);
      try {
        if (await send({ code: code.value.trim() })) finish(true);
        else code.select();
      } catch (err) {
        say(err instanceof Error ? err.message : String(err));
      } finally {
        busy(false);
      }
    });
    passkey.addEventListener('click', async () => {
      say('');
      busy(true);
      try {
        const { status, data } = await post('/api/auth/webauthn/options', { purpose: 'step_up' });
        if (status !== 200) {
          say(messageOf(data, `The passkey could not be asked for (${status}).`));
          return;
        }
        const response = await assertPasskey((data as FlowOptions<PublicKeyCredentialRequestOptionsJSON>).options);
        if (await send({ webauthn: response })) finish(true);
      } catch (err) {
        say(passkeyErrorText(err));
      } finally {
        busy(false);
      }
    });
    code.addEventListener('input', () => say(''));
    cancel.addEventListener('click', () => finish(false));
    // Escape closes a modal dialog
    dialog.addEventListener('cancel', (e) => {
      e.preventDefault();
      finish(false);
    });
    dialog.showModal();
    (withPasskey ? passkey : code).focus();
  });
}
