import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Browser, launchBrowser } from './browser.js';
import { type SimCluster, sleepSpec, startSimCluster } from './sim-cluster.js';

/**
 * The dashboard's usage chart in a real Chromium against a real master and a simulated worker: after a
 * task ran and its lease was released, the panel shows a column for today with the account's bar and a
 * legend naming the account, its card-hours and that the cards were SIMULATED.
 */

const BOUND = { timeout: 20_000 };

describe('dashboard: GPU usage by account', () => {
  let c: SimCluster;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    c = await startSimCluster(2);
    browser = await launchBrowser(c.tm.dataDir);
    page = await browser.context.newPage();
  });
  afterAll(async () => {
    await browser?.close();
    await c?.close();
  });

  it('charts the card-hours of a released lease under its account, today, marked simulated', async () => {
    const p = await c.propose(sleepSpec(1));
    const taskId = await c.approve(p);
    await c.waitForTask(taskId, ['COMPLETED']);
    await page.goto(c.tm.url);
    await page.fill('#token-input', c.tm.operatorToken);
    await page.click('#signin-button');
    await page.locator('#dashboard').waitFor({ state: 'visible', ...BOUND });
    // The charge lands when the cleanup receipt releases the lease; the panel follows the cards topic.
    const legend = page.locator('#usage .usage-legend li[data-account="default"]');
    await legend.waitFor({ state: 'visible', ...BOUND });
    expect(await legend.textContent()).toMatch(/^default \d+\.\d{2} card-hours$/);
    const today = new Date().toISOString().slice(0, 10);
    const bar = page.locator(`#usage .usage-day[data-day="${today}"] .usage-bar[data-account="default"]`);
    await bar.waitFor({ state: 'attached', ...BOUND });
    expect(await page.locator('#usage .usage-day').count()).toBe(7);
    expect(await page.locator('#usage').textContent()).toContain('SIMULATED');
    expect(await page.locator('#usage').textContent()).not.toMatch(/null|undefined|NaN/);
  });
});
