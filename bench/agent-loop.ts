import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startChildMaster } from './child-master.js';
import { BenchClients, callTool, keySequence } from './harness.js';
import { type BenchWorker, startBenchWorker } from './in-process-worker.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * An agent's edit-run loop (issue 23 §1): ten iterations of upload a changed script → create_proposal →
 * confirm_revision → (decision) → wait for COMPLETED, once decided by a scripted person (a reviewer
 * client that reads the revision with get_revision and approves it at once: no think time, so the gap
 * is the review round trips alone; a real person adds minutes) and once by a standing grant covering
 * the script. One local worker on 4 simulated cards, real sandbox, master in its own process.
 */

const ITERATIONS = 10;

async function iterate(
  alice: Client,
  rita: Client | null,
  nextKey: () => string,
  i: number,
): Promise<{ ms: number; revision: string }> {
  const t0 = performance.now();
  const up = await callTool<{ inputs: unknown[] }>(alice, 'upload_inputs', {
    files: [{ path: 'run.sh', content: `echo iteration ${i}\n` }],
    idempotency_key: nextKey(),
  });
  const spec = {
    title: 'agent loop',
    objective: 'iterate',
    success_criteria: 'exits 0',
    cards: { count: 1 },
    runtime: { kind: 'process', argv: ['/bin/sh', 'run.sh'] },
    inputs: up.inputs,
    outputs: [],
    time_limit_seconds: 60,
    notes: 'bench',
  };
  const p = await callTool<{ proposal_id: string; revision_id: string; digest: string }>(
    alice,
    'create_proposal',
    {
      spec,
      idempotency_key: nextKey(),
    },
  );
  const c = await callTool<{ task_id?: string | null }>(alice, 'confirm_revision', {
    proposal_id: p.proposal_id,
    revision_id: p.revision_id,
    idempotency_key: nextKey(),
  });
  let taskId = c.task_id ?? null;
  if (taskId === null) {
    if (!rita) throw new Error('no grant covered it and no reviewer runs');
    await callTool(rita, 'get_revision', { proposal_id: p.proposal_id, revision_id: p.revision_id });
    const r = await callTool<{ task_id: string }>(rita, 'submit_review', {
      proposal_id: p.proposal_id,
      revision_id: p.revision_id,
      revision_digest: p.digest,
      decision: 'APPROVE',
      comments: 'bench',
      idempotency_key: nextKey(),
    });
    taskId = r.task_id;
  }
  const w = await callTool<{ task: { state: string }; timed_out: boolean }>(alice, 'wait_for_task', {
    task_id: taskId,
    timeout_seconds: 20,
  });
  if (w.timed_out || w.task.state !== 'COMPLETED') throw new Error(`iteration ${i}: ${w.task.state}`);
  return { ms: performance.now() - t0, revision: p.revision_id };
}

async function runAgentLoop(): Promise<OpResult[]> {
  const master = await startChildMaster({
    executables: [{ path: '/bin/sh' }],
    scripts: [{ interpreter: '/bin/sh', script_from_inputs: true }],
  });
  const trusting = createCaTrustingFetch(master.caPem);
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-agent-loop');
  let worker: BenchWorker | null = null;
  try {
    const alice = await clients.connect(await master.createToken('loop-alice', ['submitter']));
    const rita = await clients.connect(await master.createToken('loop-rita', ['reviewer']));
    worker = await startBenchWorker(master, alice, { workerId: 'loop-worker', cards: 4 });
    const nextKey = keySequence('loop');
    const measure = async (reviewer: Client | null) => {
      const ms: number[] = [];
      const started = performance.now();
      let base = '';
      for (let i = 0; i < ITERATIONS; i++) {
        const r = await iterate(alice, reviewer, nextKey, i);
        ms.push(r.ms);
        base = r.revision;
      }
      return { ms, seconds: (performance.now() - started) / 1000, base };
    };
    const person = await measure(rita);
    const g = await callTool<{ grant: { grant_id: string } }>(alice, 'request_grant', {
      base_revision_id: person.base,
      scope: { mutable_inputs: ['run.sh'] },
      max_runs: ITERATIONS,
      max_card_hours: 1,
      ttl_seconds: 3600,
      reason: 'bench',
      idempotency_key: nextKey(),
    });
    await callTool(rita, 'decide_grant', {
      grant_id: g.grant.grant_id,
      decision: 'APPROVE',
      idempotency_key: nextKey(),
    });
    const granted = await measure(null);
    const notes =
      '10 iterations: upload → propose → confirm → decision → COMPLETED; 1 worker, 4 sim cards, bwrap';
    return [
      summarise(
        'agent-loop',
        'iteration, scripted person (no think time)',
        person.ms,
        0,
        person.seconds,
        notes,
      ),
      summarise('agent-loop', 'iteration, standing grant', granted.ms, 0, granted.seconds, notes),
    ];
  } finally {
    await clients.close();
    await worker?.close();
    await trusting.close();
    await master.stop();
  }
}

/** The agent-loop section of `npm run bench`: with a standing grant vs a scripted person. */
export const agentLoopSection: BenchSection = {
  name: 'agent-loop',
  description: 'ten edit-run iterations of an agent, decided by a scripted person vs by a standing grant',
  run: runAgentLoop,
};
