import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Notifier } from '../../src/broker/notifier.js';
import type { TaskSpecInput } from '../../src/contracts/task-spec.js';
import type { TaskView } from '../../src/contracts/views.js';
import type { MasterConfigInput } from '../../src/platform/config.js';
import type { Store } from '../../src/store/store.js';
import type { TestMaster } from './master.js';
import { callTool, expectOk } from './mcp.js';
import { ALLOWED_EXECUTABLE, validSpec } from './spec.js';
import { waitFor } from './wait.js';

/**
 * Helpers for cluster tests (a master with real workers): short timings, approving a task through
 * the real MCP tools, shell-script specs, and a watcher that checks "no card is leased twice" after
 * every state change the master announces.
 */

/** The timing knobs cluster tests set. */
export interface ClusterTiming {
  sample_interval_ms: number;
  worker_offline_seconds: number;
  lease_grace_seconds: number;
  kill_grace_seconds: number;
  cleanup_timeout_seconds: number;
  sweep_interval_ms: number;
}

/** Timings that keep fault tests fast: samples 5×/s, offline after 2 s, grace 3 s, sweeps 10×/s. */
export const CLUSTER_TIMING: Readonly<ClusterTiming> = {
  sample_interval_ms: 200,
  worker_offline_seconds: 2,
  lease_grace_seconds: 3,
  kill_grace_seconds: 1,
  cleanup_timeout_seconds: 2,
  sweep_interval_ms: 100,
};

/** A master config with `CLUSTER_TIMING` (and `timing` overrides) plus any other keys. */
export function clusterConfig(
  overrides: Omit<MasterConfigInput, 'timing'> & { timing?: Partial<ClusterTiming> } = {},
): MasterConfigInput {
  const { timing, ...rest } = overrides;
  return { ...rest, timing: { ...CLUSTER_TIMING, ...(timing ?? {}) } };
}

/** A spec running `/bin/sh -c script` (other fields from `validSpec`, `overrides` last). */
export function shellSpec(script: string, overrides: Partial<TaskSpecInput> = {}): TaskSpecInput {
  return validSpec({
    title: 'cluster test task',
    runtime: { kind: 'process', argv: [ALLOWED_EXECUTABLE, '-c', script] },
    outputs: [],
    time_limit_seconds: 60,
    ...overrides,
  });
}

let keys = 0;
const key = () => `cluster-${process.pid}-${Date.now()}-${++keys}`;

/**
 * create_proposal → confirm_revision → submit_review APPROVE through the real MCP tools (a submitter's
 * and a reviewer's client); returns the new task's id.
 */
export async function approveTask(submitter: Client, reviewer: Client, spec: TaskSpecInput): Promise<string> {
  const created = expectOk(
    await callTool<{ proposal_id: string; revision_id: string; digest: string; confirmable: boolean }>(
      submitter,
      'create_proposal',
      { spec, idempotency_key: key() },
    ),
  );
  if (!created.confirmable) throw new Error(`spec has error findings: ${JSON.stringify(created)}`);
  expectOk(
    await callTool(submitter, 'confirm_revision', {
      proposal_id: created.proposal_id,
      revision_id: created.revision_id,
      idempotency_key: key(),
    }),
  );
  const approved = expectOk(
    await callTool<{ task_id: string | null }>(reviewer, 'submit_review', {
      proposal_id: created.proposal_id,
      revision_id: created.revision_id,
      revision_digest: created.digest,
      decision: 'APPROVE',
      comments: 'approved by the cluster test',
      idempotency_key: key(),
    }),
  );
  if (!approved.task_id) throw new Error('approval made no task');
  return approved.task_id;
}

/** get_task through MCP. */
export async function getTask(client: Client, taskId: string): Promise<TaskView> {
  return expectOk(await callTool<{ task: TaskView }>(client, 'get_task', { task_id: taskId })).task;
}

/** Polls get_task until `ok` holds for the task's view (at most `timeoutMs`); returns that view. */
export async function waitForTask(
  client: Client,
  taskId: string,
  ok: (t: TaskView) => boolean,
  what: string,
  timeoutMs = 15_000,
): Promise<TaskView> {
  return waitFor(
    async () => {
      const t = await getTask(client, taskId);
      return ok(t) ? t : null;
    },
    { what, timeoutMs },
  );
}

/**
 * wait_for_task in a loop (each call ≤ 25 s) until the task settles or `timeoutMs` passes; returns the
 * settled view, or throws naming the state it was stuck in. A wait refused by the per-principal cap
 * (QUOTA_EXCEEDED, retryable) is asked again after a pause, as a well-behaved client would.
 */
export async function waitUntilSettled(
  client: Client,
  taskId: string,
  timeoutMs = 30_000,
): Promise<TaskView> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const left = Math.max(0, Math.min(25, Math.ceil((deadline - Date.now()) / 1000)));
    const outcome = await callTool<{ task: TaskView; timed_out: boolean }>(client, 'wait_for_task', {
      task_id: taskId,
      timeout_seconds: left,
    });
    // A client following more tasks than `quotas.waits_per_principal` does what the error's hint says:
    // waits its turn and asks again (the cap is the master's, not the test's, to keep).
    if (!outcome.ok && outcome.error.code === 'QUOTA_EXCEEDED' && outcome.error.retryable) {
      if (Date.now() >= deadline)
        throw new Error(`task ${taskId} never got a wait within ${timeoutMs} ms: ${outcome.error.message}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
      continue;
    }
    const r = expectOk(outcome);
    if (!r.timed_out) return r.task;
    if (Date.now() >= deadline)
      throw new Error(`task ${taskId} did not settle within ${timeoutMs} ms: ${JSON.stringify(r.task)}`);
  }
}

/** What {@link watchLeaseCards} found. */
export interface LeaseWatch {
  /** How many times the live lease cards were checked. */
  checks(): number;
  /** Every time a card was held by two live leases at once (should stay empty). */
  violations: string[];
  /** Highest number of cards leased at the same time. */
  peak(): number;
  stop(): void;
}

/**
 * Checks after every notification the master publishes (each follows a committed state change) that
 * no worker card is held by two live leases. The partial unique index refuses such a row too; this
 * checks what the scheduler, the sweeper and reconcile leave behind, not only what SQLite accepts.
 */
export function watchLeaseCards(store: Store, notifier: Notifier): LeaseWatch {
  const violations: string[] = [];
  let checks = 0;
  let peak = 0;
  const check = () => {
    checks++;
    const holders = new Map<string, string>();
    const cards = store.leases.liveCards();
    peak = Math.max(peak, cards.length);
    for (const c of cards) {
      const card = `${c.worker_id}/${c.card_index}`;
      const other = holders.get(card);
      if (other !== undefined && other !== c.lease_id)
        violations.push(`${card} held by ${other} and ${c.lease_id}`);
      holders.set(card, c.lease_id);
    }
  };
  const off = notifier.onAny(check);
  check();
  return { checks: () => checks, violations, peak: () => peak, stop: off };
}

/** Waits until the master lists `count` AVAILABLE cards (the test's workers have connected and sampled). */
export async function waitForAvailableCards(m: TestMaster, count: number, what: string): Promise<void> {
  await waitFor(
    () =>
      m.deps.cluster.fleet
        .listCards(m.store, Date.now(), { sample_interval_ms: CLUSTER_TIMING.sample_interval_ms })
        .filter((c) => c.state === 'AVAILABLE').length === count,
    { what },
  );
}

/** The `detail` the worker reported for a task's latest execution ('' when none): SETUP_FAILED reasons. */
export function executionDetail(m: TestMaster, taskId: string): string {
  const lease = m.store.leases.latestLeaseForTask(taskId);
  return (lease && m.store.leases.executionForLease(lease.id)?.detail) ?? '';
}
