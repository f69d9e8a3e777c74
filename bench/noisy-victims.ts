import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { callTool } from './harness.js';
import { outcomeLabel, type RawTarget, requestJson } from './raw-https.js';

/**
 * The two neighbours the noisy-neighbour bench (noisy-neighbour.ts) measures while something floods the
 * master or the worker:
 *
 *   - the second agent: a steady mix of cheap calls, one at a time with a pause between them:
 *     MCP `get_status` on its open session, and REST `POST /api/v1/proposals` on a fresh TLS connection
 *     each (a client that has to get in, not one already connected), each followed by an untimed
 *     `POST …/cancel` so its drafts never pile up against per-principal caps;
 *   - the second task: one-card `/bin/true`, proposed, confirmed and approved at once (the reviewer is a
 *     bench client), timed from the moment `create_proposal` is sent to the master's `started_at` and
 *     `finished_at` (same host, same clock), so a stall anywhere on its path counts.
 */

/** Latencies (ms) of one kind of call, with the failures by kind (`TIMEOUT`, `503`, `ECONNRESET`, …). */
export interface CallSample {
  latencies: number[];
  errors: number;
  errorKinds: Map<string, number>;
}

/** The second agent's calls over one window. */
export interface AgentSample {
  status: CallSample;
  create: CallSample;
}

/** The second tasks of one window; a task past the limit counts the limit (a lower bound) and an error. */
export interface TaskSample {
  toStarted: number[];
  toFinished: number[];
  errors: number;
  errorKinds: Map<string, number>;
}

/** What the neighbours need: their clients, the second agent's token and the limits. */
export interface Neighbours {
  target: RawTarget;
  /** The second agent's MCP session and token (a submitter). */
  agent: Client;
  agentToken: string;
  /** The second task's owner (the same principal as the agent, its own session) and a reviewer. */
  owner: Client;
  reviewer: Client;
  pauseMs: number;
  callTimeoutMs: number;
  taskTimeoutMs: number;
  nextKey: () => string;
}

const TASK_SPEC = {
  title: 'second task',
  objective: 'a neighbour of the flood',
  success_criteria: 'exits 0',
  cards: { count: 1 },
  runtime: { kind: 'process', argv: ['/bin/true'] },
  outputs: [],
  time_limit_seconds: 120,
  notes: 'noisy-neighbour bench',
};

const DRAFT_SPEC = { ...TASK_SPEC, title: 'second agent draft' };

/** A fresh, empty sample. */
export function emptySample(): CallSample {
  return { latencies: [], errors: 0, errorKinds: new Map() };
}

function fail(s: { errors: number; errorKinds: Map<string, number> }, kind: string): void {
  s.errors++;
  s.errorKinds.set(kind, (s.errorKinds.get(kind) ?? 0) + 1);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The second agent's loop until `until` (performance.now() ms); its last call may end after it. */
export async function runSecondAgent(n: Neighbours, until: number): Promise<AgentSample> {
  const status = emptySample();
  const create = emptySample();
  const auth = { authorization: `Bearer ${n.agentToken}` };
  while (performance.now() < until) {
    let t0 = performance.now();
    try {
      const r = await n.agent.callTool({ name: 'get_status', arguments: {} }, undefined, {
        timeout: n.callTimeoutMs,
      });
      if (r.isError) fail(status, 'tool error');
    } catch (err) {
      fail(status, /timed out/i.test(String(err)) ? 'TIMEOUT' : 'MCP error');
    }
    status.latencies.push(performance.now() - t0);
    await sleep(n.pauseMs);

    t0 = performance.now();
    const made = await requestJson(
      n.target,
      'POST',
      '/api/v1/proposals',
      { ...auth, 'idempotency-key': n.nextKey() },
      { spec: DRAFT_SPEC },
      n.callTimeoutMs,
    );
    create.latencies.push(performance.now() - t0);
    const proposalId =
      'status' in made && made.status < 300
        ? (JSON.parse(made.body) as { proposal_id?: string }).proposal_id
        : undefined;
    if (proposalId === undefined) fail(create, outcomeLabel(made));
    else {
      const cancelled = await requestJson(
        n.target,
        'POST',
        `/api/v1/proposals/${proposalId}/cancel`,
        { ...auth, 'idempotency-key': n.nextKey() },
        {},
        n.callTimeoutMs,
      );
      if (!('status' in cancelled) || cancelled.status >= 300)
        fail(create, `cancel ${outcomeLabel(cancelled)}`);
    }
    await sleep(n.pauseMs);
  }
  return { status, create };
}

interface TaskTimes {
  state: string;
  started_at: string | null;
  finished_at: string | null;
}

const TERMINAL = new Set(['COMPLETED', 'FAILED', 'CANCELLED', 'RECONCILIATION_REQUIRED']);

/** Second tasks one after another until `until` (performance.now() ms); the last may end after it. */
export async function runSecondTasks(n: Neighbours, until: number): Promise<TaskSample> {
  const out: TaskSample = { toStarted: [], toFinished: [], errors: 0, errorKinds: new Map() };
  while (performance.now() < until) {
    try {
      await oneTask(n, out);
    } catch (err) {
      fail(out, `error: ${String((err as Error).message ?? err).slice(0, 80)}`);
    }
    await sleep(n.pauseMs);
  }
  return out;
}

async function oneTask(n: Neighbours, out: TaskSample): Promise<void> {
  const opts = { timeout: n.callTimeoutMs };
  const sent = Date.now();
  const deadline = sent + n.taskTimeoutMs;
  const p = await n.owner.callTool(
    { name: 'create_proposal', arguments: { spec: TASK_SPEC, idempotency_key: n.nextKey() } },
    undefined,
    opts,
  );
  if (p.isError) throw new Error(`create_proposal: ${JSON.stringify(p.content).slice(0, 60)}`);
  const prop = p.structuredContent as { proposal_id: string; revision_id: string; digest: string };
  await callTool(n.owner, 'confirm_revision', {
    proposal_id: prop.proposal_id,
    revision_id: prop.revision_id,
    idempotency_key: n.nextKey(),
  });
  const approved = await n.reviewer.callTool(
    {
      name: 'submit_review',
      arguments: {
        proposal_id: prop.proposal_id,
        revision_id: prop.revision_id,
        revision_digest: prop.digest,
        decision: 'APPROVE',
        comments: 'noisy-neighbour bench',
        idempotency_key: n.nextKey(),
      },
    },
    undefined,
    opts,
  );
  if (approved.isError) throw new Error(`submit_review: ${JSON.stringify(approved.content).slice(0, 60)}`);
  const taskId = (approved.structuredContent as { task_id: string }).task_id;
  let task: TaskTimes | null = null;
  while (Date.now() < deadline) {
    const left = Math.ceil((deadline - Date.now()) / 1000);
    const waited = await n.owner.callTool(
      { name: 'wait_for_task', arguments: { task_id: taskId, timeout_seconds: Math.min(25, left) } },
      undefined,
      { timeout: n.callTimeoutMs + 25_000 },
    );
    if (waited.isError) throw new Error(`wait_for_task: ${JSON.stringify(waited.content).slice(0, 60)}`);
    task = (waited.structuredContent as { task: TaskTimes }).task;
    if (TERMINAL.has(task.state)) break;
  }
  const at = (iso: string | null | undefined) => (iso ? Date.parse(iso) - sent : n.taskTimeoutMs);
  out.toStarted.push(at(task?.started_at));
  if (task && task.state === 'COMPLETED') {
    out.toFinished.push(at(task.finished_at));
    return;
  }
  out.toFinished.push(n.taskTimeoutMs);
  fail(out, task && TERMINAL.has(task.state) ? `ended ${task.state}` : 'over the task limit');
  if (!task || !TERMINAL.has(task.state))
    await n.owner
      .callTool(
        { name: 'cancel_task', arguments: { task_id: taskId, idempotency_key: n.nextKey() } },
        undefined,
        opts,
      )
      .catch(() => undefined);
}
