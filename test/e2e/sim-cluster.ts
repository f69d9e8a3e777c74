import { join } from 'node:path';
import type { TaskSpecInput } from '../../src/contracts/task-spec.js';
import { silentLogger } from '../../src/platform/logger.js';
import { type RunningWorker, startWorker } from '../../worker/daemon/start-worker.js';
import { SimSampler } from '../../worker/samplers/sim-sampler.js';
import { prepareSandbox } from '../../worker/sandbox/setup.js';
import { startTestMaster, type TestMaster } from '../support/master.js';
import { specRunning } from '../support/spec.js';
import { makeTempDir, removeTempDir } from '../support/temp.js';
import { waitFor } from '../support/wait.js';

/**
 * A small real cluster for dashboard and metrics tests: the test master (TLS auto, temp dir, a policy
 * allowing /bin/sh) and one in-process worker daemon with simulated cards, plus a submitter and a
 * reviewer, and helpers to get a task from proposal to approval through REST.
 */

/** Worker id of the simulated worker. */
export const SIM_WORKER = 'sim-1';

/** A running master, its sim worker and two people. */
export interface SimCluster {
  tm: TestMaster;
  worker: RunningWorker;
  sampler: SimSampler;
  submitterToken: string;
  reviewerToken: string;
  /** Creates and confirms a proposal as the submitter; returns its ids and digest. */
  propose(spec: TaskSpecInput): Promise<{ proposal_id: string; revision_id: string; digest: string }>;
  /** Approves a proposal as the reviewer through REST; returns the new task id. */
  approve(p: { proposal_id: string; revision_id: string }): Promise<string>;
  /** Waits (bounded) until the task reaches one of `states`. */
  waitForTask(taskId: string, states: string[], timeoutMs?: number): Promise<Record<string, unknown>>;
  close(): Promise<void>;
}

/** A spec that sleeps `seconds` on one card and writes nothing. */
export function sleepSpec(seconds: number, title = `sleep ${seconds}s on one card`): TaskSpecInput {
  return specRunning(['/bin/sh', '-c', `sleep ${seconds}`], { title, outputs: [] });
}

/** Starts the master and the worker and waits until the worker's cards are AVAILABLE. */
export async function startSimCluster(cards = 4): Promise<SimCluster> {
  const tm = await startTestMaster({ config: { timing: { sample_interval_ms: 250 } } });
  const workerToken = tm.createToken('sim-worker', ['worker'], SIM_WORKER);
  const submitterToken = tm.createToken('alice', ['submitter']);
  const reviewerToken = tm.createToken('rita', ['reviewer']);
  const sampler = new SimSampler({ count: cards, seed: SIM_WORKER });
  const workerDir = makeTempDir('sim-worker');
  const sandbox = await prepareSandbox({
    isolation: 'bwrap',
    dataDir: join(workerDir, 'data'),
    sampler,
    hiddenPaths: [tm.dataDir],
  });
  const worker = await startWorker({
    sandbox: sandbox.setup,
    masterUrl: tm.url,
    token: workerToken,
    workerId: SIM_WORKER,
    dataDir: join(workerDir, 'data'),
    sampler,
    ...(tm.caPem ? { ca: tm.caPem } : {}),
    logger: silentLogger(),
    hostname: 'sim-host',
    sampleIntervalMs: 250,
    cleanupPollMs: 50,
    backoff: { initialMs: 50, maxMs: 500, refusedMs: 100 },
  });
  const submitter = tm.rest(submitterToken);
  const reviewer = tm.rest(reviewerToken);
  await waitFor(
    async () => {
      const res = await submitter.get<{ cards: Array<{ state: string }> }>('/api/v1/cards');
      return res.body.cards.length === cards && res.body.cards.every((c) => c.state === 'AVAILABLE');
    },
    { timeoutMs: 20_000, what: `${cards} AVAILABLE cards on ${SIM_WORKER}` },
  );

  return {
    tm,
    worker,
    sampler,
    submitterToken,
    reviewerToken,
    async propose(spec) {
      const created = await submitter.post<{ proposal_id: string; revision_id: string }>(
        '/api/v1/proposals',
        {
          spec,
        },
      );
      if (created.status !== 200) throw new Error(`create_proposal: ${JSON.stringify(created.body)}`);
      const { proposal_id, revision_id } = created.body;
      const confirmed = await submitter.post(`/api/v1/proposals/${proposal_id}/confirm`, { revision_id });
      if (confirmed.status !== 200) throw new Error(`confirm_revision: ${JSON.stringify(confirmed.body)}`);
      const view = await submitter.get<{ proposal: { current_revision: { digest: string } } }>(
        `/api/v1/proposals/${proposal_id}`,
      );
      return { proposal_id, revision_id, digest: view.body.proposal.current_revision.digest };
    },
    async approve({ proposal_id, revision_id }) {
      const res = await reviewer.post<{ task_id: string }>(`/api/v1/proposals/${proposal_id}/reviews`, {
        revision_id,
        decision: 'APPROVE',
        comments: 'Checked the spec: one card, a sleep, nothing else.',
      });
      if (res.status !== 200) throw new Error(`submit_review: ${JSON.stringify(res.body)}`);
      return res.body.task_id;
    },
    async waitForTask(taskId, states, timeoutMs = 30_000) {
      return waitFor(
        async () => {
          const res = await reviewer.get<{ task: Record<string, unknown> }>(`/api/v1/tasks/${taskId}`);
          return states.includes(String(res.body.task?.['state'])) ? res.body.task : null;
        },
        { timeoutMs, what: `task ${taskId} in ${states.join('|')}` },
      );
    },
    async close() {
      await worker.close();
      await tm.close();
      removeTempDir(workerDir);
    },
  };
}
