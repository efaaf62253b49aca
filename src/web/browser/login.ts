// The login pages' one script (/login and /login/mfa; the forms work without it): "Sign in with
// a passkey" (passwordless), the passkey of the second step, and switching the second step's
// field to a recovery code. Nothing else of the app is loaded here.
import type { Schemas } from '../../client/api-types.js';
import { assertPasskey, passkeyErrorText, passkeysSupported, type FlowOptions, type PublicKeyCredentialRequestOptionsJSON } from './passkeys.js';

async function post(path: string, payload: unknown): Promise<{ status: number; data: unknown }> {
  const res = await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { accept: 'application/json', 'content-type': 'application/json' },
    body: JSON.stringify(payload),
  });
  return { status: res.status, data: await res.json().catch(() => null) };
}

/** What a failed call may answer (the error body; or nothing readable). */
type ErrorBody = Partial<Schemas['Error']>;

function say(el: Element | null, message: string, kind: 'ok' | 'error' = 'error'): void {
  if (!el) return;
  el.textContent = message;
  el.className = `form-msg ${message ? kind : ''}`;
}

/** details.reason of an error body (refusals that are not about a field say why there). */
function reasonOf(data: unknown): unknown {
  const details = (data as ErrorBody | null)?.error?.details;
  return details && !Array.isArray(details) ? details.reason : undefined;
}

/** The answer of a refused passkey sign-in, in words. */
function refusalText(status: number, data: unknown): string {
  const reason = reasonOf(data);
  if (status === 429) return 'Too many sign-in attempts. Please wait a minute and try again.';
  if (reason === 'expired') return 'The passkey sign-in took too long. Please try again.';
  if (reason === 'account_disabled') return 'This account is disabled.';
  if (status === 401) return 'That passkey was not accepted: it may have been removed from your account.';
  return (data as ErrorBody | null)?.error?.message ?? `Sign-in failed (${status}).`;
}

// ---- /login: sign in with a passkey, no password ---------------------------------------------

const signinBlock = document.querySelector<HTMLElement>('[data-passkey-block]');
const signin = document.querySelector<HTMLButtonElement>('[data-passkey-signin]');
if (signinBlock && signin && passkeysSupported()) {
  signinBlock.hidden = false;
  const msg = signinBlock.querySelector('[data-passkey-msg]');
  signin.addEventListener('click', async () => {
    say(msg, '');
    signin.disabled = true;
    try {
      const started = await post('/api/auth/webauthn/options', {});
      if (started.status !== 200) return say(msg, refusalText(started.status, started.data));
      const response = await assertPasskey((started.data as FlowOptions<PublicKeyCredentialRequestOptionsJSON>).options);
      const done = await post('/api/auth/webauthn', { flow: 'passwordless', response });
      if (done.status !== 200) return say(msg, refusalText(done.status, done.data));
      say(msg, 'Signed in.', 'ok');
      location.assign(signin.dataset.next || '/');
    } catch (err) {
      say(msg, passkeyErrorText(err));
    } finally {
      signin.disabled = false;
    }
  });
}

// ---- /login/mfa: the second step with a passkey ----------------------------------------------

const step = document.querySelector<HTMLElement>('[data-passkey-step]');
const stepForm = document.querySelector<HTMLFormElement>('[data-passkey-form]');
const verify = document.querySelector<HTMLButtonElement>('[data-passkey-verify]');
if (step && stepForm && verify && passkeysSupported()) {
  step.hidden = false;
  const msg = step.querySelector('[data-passkey-msg]');
  verify.focus();
  verify.addEventListener('click', async () => {
    say(msg, '');
    verify.disabled = true;
    try {
      // the token of this second step is the page's HttpOnly cookie: the options come from the page's own route
      const started = await post('/login/mfa/options', {});
      if (started.status !== 200) {
        if (reasonOf(started.data) === 'expired') return location.assign('/login?error=second_step_expired');
        return say(msg, refusalText(started.status, started.data));
      }
      const response = await assertPasskey((started.data as FlowOptions<PublicKeyCredentialRequestOptionsJSON>).options);
      // posted like the code: the server answers with the redirect to where the sign-in goes on
      const field = stepForm.elements.namedItem('webauthn');
      if (!(field instanceof HTMLInputElement)) return;
      field.value = JSON.stringify(response);
      stepForm.submit();
    } catch (err) {
      say(msg, passkeyErrorText(err));
      verify.disabled = false;
    }
  });
}

// ---- /login/mfa: a recovery code instead of the app's code -----------------------------------

const useRecovery = document.querySelector<HTMLButtonElement>('[data-use-recovery]');
const codeInput = document.querySelector<HTMLInputElement>('[data-second-step] input[name=code]');
const codeLabel = document.querySelector('[data-code-label]');
if (useRecovery && codeInput && codeLabel) {
  useRecovery.hidden = false;
  useRecovery.addEventListener('click', () => {
    codeLabel.textContent = 'Recovery code';
    codeInput.inputMode = 'text';
    codeInput.autocomplete = 'off';
    codeInput.placeholder = 'xxxxx-xxxxx';
    codeInput.value = '';
    useRecovery.hidden = true;
    codeInput.focus();
  });
}
