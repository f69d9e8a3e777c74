import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setAccount } from '../../src/broker/tools/accounts.js';
import { specRunning } from '../support/spec.js';
import { type Browser, launchBrowser } from './browser.js';
import { type SimCluster, sleepSpec, startSimCluster } from './sim-cluster.js';

/**
 * The dashboard's Accounts panel in a real Chromium against a real master and a simulated worker (the
 * same standing as `gpu-broker status`'s ACCOUNTS table, src/broker/tools/account-standing.ts): after a
 * task ran, the operator sees the `default` account's row with its share, card-hours this period and a
 * queued task that can never fit (4 cards on a 2-card worker) with its wait reason.
 */

const BOUND = { timeout: 20_000 };

describe('dashboard: where every account stands', () => {
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

  it('shows each account with its share, use this period, queue and the first task’s wait reason', async () => {
    const ran = await c.approve(await c.propose(sleepSpec(1)));
    await c.waitForTask(ran, ['COMPLETED']);
    const wide = specRunning(['/bin/sh', '-c', 'true'], {
      title: 'four cards',
      outputs: [],
      cards: { count: 4 },
    });
    await c.approve(await c.propose(wide));
    // A quota per card model shows as a row under its account (ADR 0048).
    setAccount(c.tm.deps, 'test', {
      name: 'default',
      model: 'Simulated',
      nominal_cards: 2,
      borrowing_limit: 1,
    });
    await page.goto(c.tm.url);
    await page.fill('#token-input', c.tm.operatorToken);
    await page.click('#signin-button');
    await page.locator('#dashboard').waitFor({ state: 'visible', ...BOUND });
    const row = page.locator('#accounts tr[data-account="default"]');
    await row.waitFor({ state: 'visible', ...BOUND });
    await page.locator('#accounts tr[data-account="default"] [data-col="wait"] code').waitFor(BOUND);
    expect(await row.locator('[data-col="queued"]').textContent()).toBe('1');
    expect(await row.locator('[data-col="wait"] code').textContent()).toBe('no_matching_worker');
    expect(await row.locator('[data-col="used"]').textContent()).toMatch(/^\d+\.\d{2} hlast 7 days$/);
    expect(await row.locator('[data-col="share"]').textContent()).toMatch(/^\d+\.\d % \(\d+(\.\d)?\)$/);
    expect(await page.locator('#accounts tr[data-account="root"]').count()).toBe(1);
    const model = page.locator('#accounts tr[data-model-of="default"][data-model="Simulated"]');
    expect(await model.locator('[data-col="quota"]').textContent()).toBe('2 / 3');
    expect(await model.locator('[data-col="held"]').textContent()).toBe('0');
    expect(await page.locator('#accounts').textContent()).not.toMatch(/null|undefined|NaN/);
  });

  it('a submitter sees only their own account, in words', async () => {
    // A new tab: the token lives in sessionStorage, one tab's own.
    const p = await browser.context.newPage();
    await p.goto(c.tm.url);
    await p.fill('#token-input', c.submitterToken);
    await p.click('#signin-button');
    await p.locator('#dashboard').waitFor({ state: 'visible', ...BOUND });
    const you = p.locator('#accounts .account-you');
    await you.waitFor({ state: 'visible', ...BOUND });
    expect(await you.textContent()).toMatch(/^default holds \d+ of its [\d.]+ cards/);
    expect(await p.locator('#accounts table').count()).toBe(0);
    await p.close();
  });
});
