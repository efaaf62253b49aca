import fs from 'node:fs';
import path from 'node:path';
import type { Page } from 'playwright-core';

/**
 * Fixtures and page checks shared by the layout and forms browser tests: a plugin that
 * declares settings, and what "fits the screen" means, measured in the page.
 */

/** A plugin folder whose manifest declares settings: a plain one, a secret sent to it, one for the environment. */
export function reportsPlugin(dir: string): void {
  const folder = path.join(dir, 'reports');
  fs.mkdirSync(folder, { recursive: true });
  const manifest = {
    id: 'reports',
    name: 'Reports',
    version: '2.0.1',
    description: 'sends weekly reports',
    entry: 'index.mjs',
    permissions: { subscribe: [], emit: [] },
    settings: {
      url: { description: 'where reports are sent', default: 'https://reports.example.test/in' },
      token: { description: 'the token sent with each report', secret: true, sent_to: ['url'] },
      region: { description: 'the data region', default: 'eu' },
    },
  };
  fs.writeFileSync(path.join(folder, 'plugin.json'), JSON.stringify(manifest));
  fs.writeFileSync(path.join(folder, 'index.mjs'), 'export async function setup() {}\n');
}

export interface FitReport {
  scrollWidth: number;
  innerWidth: number;
  /** badges (pills, the bell count) whose text runs over more than one line */
  wrappedBadges: string[];
  /** the top of each navigation link: one value when the navigation is one row */
  navRows: number;
  /** the brand and the sign-out area sit on one row */
  barHeadAligned: boolean;
  /** the administration pages' links: how many, in how many columns and rows, and whether they sit beside the page (or above it) */
  adminNav: { links: number; columns: number; rows: number; besideMain: boolean } | null;
}

/** Measures, in the page, whether it fits its viewport. */
export function measureFit(page: Page): Promise<FitReport> {
  // no named functions inside: the test runner's transform would wrap them in a helper the page lacks
  return page.evaluate(() => {
    const range = document.createRange();
    const wrappedBadges = [...document.querySelectorAll('.pill, .badge')]
      .filter((el) => {
        if (el.getClientRects().length === 0) return false;
        range.selectNodeContents(el);
        return new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top))).size > 1;
      })
      .map((el) => el.textContent ?? '');
    const navTops = new Set([...document.querySelectorAll<HTMLElement>('.topbar nav a')].map((a) => Math.round(a.getBoundingClientRect().top)));
    const brand = document.querySelector('.topbar .brand')?.getBoundingClientRect();
    const who = document.querySelector('.topbar .who')?.getBoundingClientRect();
    const barHeadAligned = !brand || !who || Math.abs(brand.top + brand.height / 2 - (who.top + who.height / 2)) < 8;
    const adminLinks = [...document.querySelectorAll<HTMLElement>('.admin-nav a')].map((a) => a.getBoundingClientRect());
    const adminMain = document.querySelector('.admin-main')?.getBoundingClientRect();
    const adminNav = adminLinks.length
      ? {
          links: adminLinks.length,
          columns: new Set(adminLinks.map((r) => Math.round(r.left))).size,
          rows: new Set(adminLinks.map((r) => Math.round(r.top))).size,
          besideMain: !!adminMain && Math.max(...adminLinks.map((r) => r.right)) <= adminMain.left,
        }
      : null;
    return { scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth, wrappedBadges, navRows: navTops.size, barHeadAligned, adminNav };
  });
}
