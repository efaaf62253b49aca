import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { expect } from 'chai';
import { startService, type TestService } from '../support/service.js';
import { unusedPort } from '../auth/helpers.js';

/**
 * Real-browser tests: Debian's Chromium driven by playwright-core (no browser download), one
 * browser with a fresh user-data dir per test file, and a service whose public URL is the
 * address the browser uses (cookies, Origin checks and OIDC redirects need them to agree).
 *
 * The browser is Chromium's headless shell (Debian's chromium-headless-shell: the Blink and V8
 * of chromium, without the desktop browser around them; what Playwright runs for headless
 * Chromium by its own download): the browser tests cost half the CPU they did in chromium's
 * headless mode, with the same pages, scripts, WebAuthn and screenshots.
 */

export const CHROMIUM = process.env.SERVICE_TEST_CHROMIUM || '/usr/bin/chromium-headless-shell';

const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-default-apps',
  '--disable-extensions',
  '--metrics-recording-only',
  '--password-store=basic',
];

export interface WebService extends TestService {
  origin: string;
}

/** A service on a known free port whose SERVICE_PUBLIC_URL is that address. */
export async function startWebService(env: Record<string, string> = {}): Promise<WebService> {
  let lastError: unknown;
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await unusedPort();
    const origin = `http://127.0.0.1:${port}`;
    try {
      const svc = await startService({ env: { SERVICE_PORT: String(port), SERVICE_PUBLIC_URL: origin, ...env } });
      return Object.assign(svc, { origin });
    } catch (err) {
      // another process took the port between the probe and the listen: try another one
      if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
      lastError = err;
    }
  }
  throw lastError;
}

export interface TestBrowser {
  context: BrowserContext;
  /** problems the pages reported: uncaught errors, console errors, CSP violations */
  problems: string[];
  newPage(): Promise<Page>;
  close(): Promise<void>;
}

/** Chromium with a fresh profile; fails with a clear message when the browser is missing. */
export async function openBrowser(): Promise<TestBrowser> {
  if (!fs.existsSync(CHROMIUM))
    throw new Error(
      `Chromium's headless shell is not installed at ${CHROMIUM}: install Debian's chromium-headless-shell package (apt-get install chromium-headless-shell), or name another Chromium in SERVICE_TEST_CHROMIUM`,
    );
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'svc-chromium-'));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: ARGS,
      viewport: { width: 1280, height: 800 },
      // as a visitor who asks for less motion (app.css honours it): the live indicator's endless
      // pulse would otherwise keep Chromium painting frames for as long as a page is open
      reducedMotion: 'reduce',
      timeout: 30_000,
    });
  } catch (err) {
    fs.rmSync(userDataDir, { recursive: true, force: true });
    throw err;
  }
  // how long a wait may take before it fails, not a speed the pages are held to: with the whole
  // suite running on two cores a page load has taken more than 5 s, and Swagger UI's more than
  // 15 s on a machine loaded further (a profiler in every process). The waits use it.
  context.setDefaultTimeout(30_000);
  const problems: string[] = [];
  const watch = (page: Page) => {
    page.on('pageerror', (err) => problems.push(`pageerror ${page.url()}: ${err.message}`));
    page.on('console', (msg) => {
      // a refused request (e.g. a 401/403 a test provokes on purpose) is not a page problem
      if (msg.type() === 'error' && !/Failed to load resource/.test(msg.text())) problems.push(`console ${page.url()}: ${msg.text()}`);
    });
  };
  context.on('page', watch);
  for (const p of context.pages()) watch(p);
  return {
    context,
    problems,
    async newPage() {
      const page = await context.newPage();
      return page;
    },
    async close() {
      await context.close().catch(() => undefined);
      fs.rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Drops the browser's session: its pages leave for about:blank first, so a live page that loses
 * its cookie cannot go to the login page by itself while the test navigates (a race that
 * interrupts the test's own navigation).
 */
export async function forgetSession(browser: TestBrowser): Promise<void> {
  for (const p of browser.context.pages()) await p.goto('about:blank');
  await browser.context.clearCookies();
}

/** Signs in through the login form; lands on `next` (default /). */
export async function signIn(page: Page, origin: string, username: string, password: string, next = '/'): Promise<void> {
  await page.goto(`${origin}/login?${new URLSearchParams({ next })}`);
  await page.fill('#username', username);
  await page.fill('#password', password);
  await Promise.all([page.waitForURL((u) => u.pathname === new URL(next, origin).pathname), page.click('button[type=submit]')]);
}

export async function signOut(page: Page): Promise<void> {
  await Promise.all([page.waitForURL((u) => u.pathname === '/login'), page.click('[data-logout]')]);
}

/** Waits until the page's live connection is up (welcome received, resume sent). */
export async function waitLive(page: Page): Promise<void> {
  await page.waitForFunction(() => document.body.dataset.live === 'live', undefined, { timeout: 10_000 });
}

export function expectNoProblems(browser: TestBrowser): void {
  expect(browser.problems, browser.problems.join('\n')).to.deep.equal([]);
}

export const ARTIFACTS = path.resolve('test-artifacts');
