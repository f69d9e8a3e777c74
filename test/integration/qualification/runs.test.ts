import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EvidenceDocument } from '../../../qualification/verify/evidence.js';
import { run as cards } from '../../../src/cli/operator/cards.js';
import { run as qualify } from '../../../src/cli/operator/qualify.js';
import type { QualificationRunView } from '../../../src/contracts/tools-qualification.js';
import { Store } from '../../../src/store/store.js';
import { runCli } from '../../support/cli.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import { waitFor } from '../../support/wait.js';
import { type Cluster, startCluster } from './cluster.js';

/**
 * Qualification runs on a worker with 2 simulated cards: a ladder larger than the worker is
 * INCONCLUSIVE and leaves the cards cordoned until `gpu-broker uncordon`; the real-harness submitters
 * (fake `claude` / `codex` executables that check what they are given, then act through MCP) pass; and
 * an agent that lies or proposes something else fails, because only the master's records count.
 */

let c: Cluster;
let modeFile: string;
let agentLog: string;

const cliEnv = () => ({
  GPU_BROKER_URL: c.master.url,
  GPU_BROKER_TOKEN: c.master.bootstrappedOperatorToken ?? '',
  GPU_BROKER_CA_FILE: c.master.caCertPath ?? '',
});

async function runTo(
  args: Record<string, unknown>,
): Promise<{ view: QualificationRunView; doc: EvidenceDocument }> {
  const started = await c.start(args);
  await c.finished(started.run_id);
  const view = expectOk(
    await callTool<QualificationRunView>(c.operator, 'get_qualification_run', { run_id: started.run_id }),
  );
  return { view, doc: view.evidence as unknown as EvidenceDocument };
}

function uncordonAll(): Promise<unknown> {
  return Promise.all(
    c.master.deps.store.workers
      .cordons()
      .map((k) => runCli(cards, ['uncordon', `${k.worker_id}:${k.card_index}`], cliEnv())),
  );
}

beforeAll(async () => {
  const dir = join(process.env['TMPDIR'] ?? '/tmp');
  modeFile = join(dir, `fake-agent-mode-${process.pid}`);
  agentLog = join(dir, `fake-agent-log-${process.pid}.jsonl`);
  writeFileSync(modeFile, 'good');
  writeFileSync(agentLog, '');
  c = await startCluster({
    cards: 2,
    agentEnv: { FAKE_AGENT_MODE_FILE: modeFile, FAKE_AGENT_LOG: agentLog },
  });
});

afterAll(async () => c?.close());

describe('a ladder larger than the worker', () => {
  it('is INCONCLUSIVE, and the cards stay cordoned until uncordoned', async () => {
    const { view, doc } = await runTo({});
    expect(view.state).toBe('INCONCLUSIVE');
    expect(doc.verdict).toBe('INCONCLUSIVE');
    expect(doc.ladder.run).toEqual([1, 2]);
    expect(doc.ladder.skipped.map((s) => s.cards)).toEqual([4, 8]);
    expect(doc.ladder.skipped[0]?.reason).toContain('has 2 usable card(s)');
    expect(doc.rungs.every((r) => r.ok)).toBe(true);
    expect(doc.failed_checks).toEqual([]);
    expect(view.next_action).toContain(`gpu-broker uncordon ${c.workerId}:0 ${c.workerId}:1`);
    const cordons = c.master.deps.store.workers.cordons();
    expect(cordons.map((k) => k.card_index)).toEqual([0, 1]);
    expect(cordons[0]?.reason).toContain('ended INCONCLUSIVE');

    // Nothing else may land there meanwhile; `qualify show` exits non-zero.
    const shown = await runCli(qualify, ['show', view.run_id], cliEnv());
    expect(shown.code).toBe(1);
    expect(shown.stdout).toMatch(/\n4\s+-\s+-\s+-\s+-\s+not run: worker sim-host-1 has 2 usable card/);

    await uncordonAll();
    expect(c.master.deps.store.workers.cordons()).toEqual([]);
  });

  it('with nothing the worker can run, is INCONCLUSIVE without touching a card', async () => {
    const { doc } = await runTo({ cards: [4, 8] });
    expect(doc.verdict).toBe('INCONCLUSIVE');
    expect(doc.rungs).toEqual([]);
    expect(doc.reserved_cards).toEqual([]);
    expect(doc.failed_checks).toEqual([]);
    expect(c.master.deps.store.workers.cordons()).toEqual([]);
  });

  it('refuses a second run on the same worker while one runs, and unknown workers', async () => {
    const first = await c.start({ cards: [1] });
    expectError(
      await callTool(c.operator, 'start_qualification', { worker_id: c.workerId, idempotency_key: 'second' }),
      'CONFLICT',
    );
    expectError(
      await callTool(c.operator, 'start_qualification', { worker_id: 'nope', idempotency_key: 'third' }),
      'NOT_FOUND',
    );
    expect((await c.finished(first.run_id)).state).toBe('PASSED');
  });
});

describe('cancel_qualification', () => {
  it('ends a running run CANCELLED without evidence; its cards stay cordoned', async () => {
    const started = await c.start({ cards: [1, 2] });
    const view = expectOk(
      await callTool<QualificationRunView>(c.operator, 'cancel_qualification', {
        run_id: started.run_id,
        idempotency_key: `cancel-${started.run_id}`,
      }),
    );
    expect(view.run_id).toBe(started.run_id);
    const done = await c.finished(started.run_id);
    expect(done).toMatchObject({ state: 'CANCELLED', evidence: null, digest: null });
    expect(c.master.deps.store.workers.cordons().every((k) => k.reason.includes('ended CANCELLED'))).toBe(
      true,
    );
    expect(c.master.deps.store.workers.cordons().length).toBeGreaterThan(0);
    // Its tasks were cancelled with it: none is left to land on the cards later.
    const run = c.master.deps.store.qualifications.get(started.run_id)!;
    await waitFor(
      () =>
        c.master.deps.store.tasks
          .list({ owner_id: run.submitter_id, limit: 10 })
          .every((t) => ['COMPLETED', 'FAILED', 'CANCELLED'].includes(t.state)),
      { what: 'the run’s tasks to end' },
    );
    expectError(
      await callTool(c.operator, 'cancel_qualification', {
        run_id: started.run_id,
        idempotency_key: 'again',
      }),
      'INVALID_STATE',
    );
    await uncordonAll();
  });
});

describe('real-harness submitters (fake claude / codex executables)', () => {
  const launches = () =>
    readFileSync(agentLog, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { agent: string; argv: string[]; config: Record<string, unknown> });

  it('claude: launched with the kit’s .mcp.json and the run id in the prompt; PASSED from the master’s records', async () => {
    writeFileSync(modeFile, 'good');
    const { doc } = await runTo({ cards: [1, 2], submitter: 'claude' });
    expect(doc.failed_checks).toEqual([]);
    expect(doc.verdict).toBe('PASSED');
    expect(doc.submitter.kind).toBe('claude');
    const mine = launches().filter((l) => l.agent === 'claude');
    expect(mine).toHaveLength(2);
    expect(mine[0]?.argv[1]).toContain(`qualification run ${doc.run_id}, rung 1 card(s)`);
    expect(mine[0]?.argv).toContain('--strict-mcp-config');
    expect(JSON.stringify(mine[0]?.config)).not.toContain('gpb_');
  });

  it('codex: launched with CODEX_HOME holding the kit’s config.toml; PASSED', async () => {
    const { doc } = await runTo({ cards: [2], submitter: 'codex' });
    expect(doc.failed_checks).toEqual([]);
    expect(doc.verdict).toBe('PASSED');
    const mine = launches().filter((l) => l.agent === 'codex');
    expect(mine).toHaveLength(1);
    expect(mine[0]?.argv[0]).toBe('exec');
    expect(mine[0]?.argv.at(-1)).toContain(doc.run_id);
  });

  it('an agent that claims success without acting: FAILED, naming proposal.recorded', async () => {
    writeFileSync(modeFile, 'lie');
    const { view, doc } = await runTo({ cards: [1, 2], submitter: 'claude' });
    expect(doc.verdict).toBe('FAILED');
    expect(doc.failed_checks[0]).toMatch(/^1 card: proposal\.recorded: no proposal was recorded/);
    expect(doc.ladder.not_run).toEqual([{ cards: 2, reason: 'the 1-card rung failed' }]);
    expect(view.steps.map((s) => s.text)).toContain('claude left no proposal on the master');
    // FAILED leaves the cards cordoned.
    expect(c.master.deps.store.workers.cordons().map((k) => k.card_index)).toEqual([0, 1]);
    await uncordonAll();
  });

  it('an agent that proposes something else: the reviewer rejects it; FAILED, naming spec.expected', async () => {
    writeFileSync(modeFile, 'tamper');
    const { doc, view } = await runTo({ cards: [1], submitter: 'codex' });
    expect(doc?.verdict, JSON.stringify(view.steps)).toBe('FAILED');
    const names = doc.rungs[0]?.checks.filter((k) => !k.ok).map((k) => k.name);
    expect(names).toContain('spec.expected');
    expect(names).toContain('proposal.recorded');
    expect(doc.rungs[0]?.task_id).toBeNull();
    await uncordonAll();
    writeFileSync(modeFile, 'good');
  });
});

describe('a master that shuts down during a run', () => {
  it('ends the run CANCELLED, without evidence, its cards still cordoned', async () => {
    const other = await startCluster({ cards: 2 });
    const { master, dataDir } = other;
    try {
      const started = await other.start({ cards: [2] });
      await waitFor(
        () => master.deps.store.qualifications.steps(started.run_id).some((s) => s.text.includes('queued')),
        {
          what: 'the first task queued',
        },
      );
      await master.close();
      const store = Store.open(join(dataDir, 'broker.db'));
      try {
        const run = store.qualifications.get(started.run_id);
        expect(run).toMatchObject({
          state: 'CANCELLED',
          detail: 'the master shut down during the run',
          evidence: null,
        });
        expect(store.workers.cordons().map((k) => [k.card_index, k.reason])).toEqual([
          [0, `qualification run ${started.run_id} ended CANCELLED; uncordon once the host is checked`],
          [1, `qualification run ${started.run_id} ended CANCELLED; uncordon once the host is checked`],
        ]);
        expect(store.principals.findById(run!.submitter_id)?.revoked_at).not.toBeNull();
      } finally {
        store.close();
      }
    } finally {
      await other.close();
    }
  });
});
