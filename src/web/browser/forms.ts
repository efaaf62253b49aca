// Form helpers shared by the pages (re-exported by app.ts): reading fields, showing results,
// API errors in words, rule messages for patterned inputs, buttons that ask before acting.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
  }
}

/** A named control of a form. */
export function control<E extends Element = HTMLInputElement>(form: HTMLFormElement, name: string): E {
  const el = form.elements.namedItem(name);
  if (!(el instanceof Element)) throw new Error(`the form has no single control named ${name}`);
  return el as E;
}

/** A text field of FormData ('' when absent). */
export const text = (f: FormData, name: string): string => {
  const v = f.get(name);
  return typeof v === 'string' ? v : '';
};
export const texts = (f: FormData, name: string): string[] => f.getAll(name).filter((v): v is string => typeof v === 'string');

/** Shows a form result under the form. */
export function say(el: Element | null, message: string, kind: 'ok' | 'error' = 'ok'): void {
  if (!el) return;
  el.textContent = message;
  el.className = `form-msg ${kind}`;
}

interface FieldProblem {
  field: string;
  message: string;
}
const isProblem = (d: unknown): d is FieldProblem => typeof d === 'object' && d !== null && 'field' in d && 'message' in d;

/** The fields an API error names (a 400's details, or a 409's {field}). */
export function fieldProblems(err: unknown): FieldProblem[] {
  if (!(err instanceof ApiError)) return [];
  if (Array.isArray(err.details) && err.details.every(isProblem)) return err.details;
  const d = err.details as { field?: unknown } | undefined;
  return typeof d?.field === 'string' ? [{ field: d.field, message: err.message }] : [];
}

export function errorText(err: unknown): string {
  if (err instanceof ApiError && Array.isArray(err.details) && err.details.length && err.details.every(isProblem)) {
    return err.details.map((d) => `${d.field}: ${d.message}`).join('; ');
  }
  return err instanceof Error ? err.message : String(err);
}

/** Runs an async action for a button: disabled while it runs, errors shown in `msg`. */
export async function busy<T>(button: HTMLButtonElement | null | undefined, msg: Element | null, fn: () => Promise<T>): Promise<T | undefined> {
  if (button) button.disabled = true;
  try {
    return await fn();
  } catch (err) {
    say(msg, errorText(err), 'error');
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

/** The button that submitted a form, when it is one. */
export const submitter = (e: SubmitEvent): HTMLButtonElement | null => (e.submitter instanceof HTMLButtonElement ? e.submitter : null);

/**
 * A result stays only until the user edits the form again: then it would describe input that
 * is no longer there. Clears `msgs` and the fields marked invalid.
 */
export function clearOnEdit(form: HTMLFormElement, ...msgs: Array<Element | null>): void {
  const clear = (e: Event) => {
    for (const m of msgs) if (m?.textContent) say(m, '');
    if (e.target instanceof Element) e.target.removeAttribute('aria-invalid');
  };
  form.addEventListener('input', clear);
  form.addEventListener('change', clear);
}

/** Marks the controls an API error names (their label turns red); returns whether any was found. */
export function markInvalid(form: HTMLFormElement, err: unknown): boolean {
  let found = false;
  for (const p of fieldProblems(err)) {
    const el = form.elements.namedItem(p.field);
    if (el instanceof HTMLElement) {
      el.setAttribute('aria-invalid', 'true');
      found = true;
    }
  }
  return found;
}

/**
 * A patterned input says its rule (its title) instead of the browser's "match the requested
 * format", in the validation bubble and in `msg`. Returns the check, for values set by script.
 */
export function explainPattern(input: HTMLInputElement, msg: Element | null): () => void {
  const rule = input.title;
  const check = () => {
    input.setCustomValidity('');
    if (input.validity.patternMismatch) input.setCustomValidity(rule);
  };
  input.addEventListener('input', check);
  input.addEventListener('invalid', () => {
    check();
    if (input.validity.customError) say(msg, rule, 'error');
  });
  check();
  return check;
}

/** 32 random bytes, base64url: for generated secrets. */
export function randomSecret(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');
}

export async function copyText(value: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(value);
    return true;
  } catch {
    return false;
  }
}

/**
 * A destructive button that asks in place: the first click arms it ("Confirm?"), a second
 * click within 4 s runs `fn`. No modal dialog.
 */
export function confirmButton(button: HTMLButtonElement, label: string, fn: () => Promise<unknown>): HTMLButtonElement {
  let armed: ReturnType<typeof setTimeout> | null = null;
  const original = button.textContent;
  const disarm = () => {
    armed = null;
    button.textContent = original;
    button.classList.remove('danger');
  };
  button.addEventListener('click', async () => {
    if (!armed) {
      button.textContent = label;
      button.classList.add('danger');
      armed = setTimeout(disarm, 4000);
      return;
    }
    clearTimeout(armed);
    disarm();
    button.disabled = true;
    try {
      await fn();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}
