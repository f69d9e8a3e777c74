import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CardSample } from '../../../src/contracts/sample.js';
import { PROTOCOL_VERSION } from '../../../src/contracts/worker-protocol.js';
import { approveTask, clusterConfig, getTask, shellSpec } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { connectRawWorker, type RawWorker } from '../../support/raw-worker.js';
import { waitFor } from '../../support/wait.js';

/**
 * Per-node admission through a real master (ADR 0013, "Per-node admission"): a hand-driven worker says
 * `backend: slurm` with two nodes of 4 GPUs; a foreign job holds 3 GPUs of n1 and our own 2-GPU task
 * runs on n2 (its `started` report carries the binding). 3 GPUs are free in the pool, at most 2 on one
 * node: a 3-card task stays QUEUED with a reason naming the nodes, instead of being submitted to pend
 * in Slurm. No Slurm runs here: the worker's messages are what a Slurm worker would send.
 */

const WORKER = 'raw-pool';
let m: TestMaster;
let alice: Client;
let rita: Client;
let raw: RawWorker;
let seq = 0;

const FOREIGN_ON_N1 = new Set([1, 2, 3]);

/** The pool's cards as worker/slurm/sampler.ts reports them: slots over n1 then n2. */
function poolCards(): CardSample[] {
  const cards: CardSample[] = [];
  for (const node of ['n1', 'n2']) {
    for (let i = 0; i < 4; i++) {
      const foreign = node === 'n1' && FOREIGN_ON_N1.has(i);
      cards.push({
        index: cards.length,
        uuid: `slurm:${node}:gpu${i}`,
        model: 'slurm gpu',
        memory_used_mib: null,
        memory_total_mib: null,
        memory_used_pct: 0,
        utilization_pct: null,
        temperature_c: null,
        power_w: null,
        health: 'ok',
        health_reasons: [],
        processes: foreign ? [{ pid: 0, name: 'slurm job 77 someone-else', used_memory_mib: null }] : [],
        simulated: false,
      });
    }
  }
  return cards;
}

const sample = () =>
  raw.sendSeq(++seq, { type: 'sample', sampled_at: Date.now(), cards: poolCards(), sampler_error: null });

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  raw = await connectRawWorker({
    url: m.url,
    caPem: m.caPem,
    token: m.createToken('worker-pool', ['worker'], WORKER),
    workerId: WORKER,
  });
  const from = raw.received.length;
  raw.send({
    type: 'hello',
    protocol_version: PROTOCOL_VERSION,
    worker_id: WORKER,
    boot_id: raw.bootId,
    version: 'raw-test',
    hostname: 'submit-host',
    provider: 'sim',
    cards: poolCards(),
    executions: [],
    master_marks: [],
    isolation: 'bwrap',
    backend: 'slurm',
    slurm: {
      partition: 'gpu',
      nodes: [
        { name: 'n1', gpus: 4, state: 'MIXED' },
        { name: 'n2', gpus: 4, state: 'MIXED' },
      ],
    },
  });
  await raw.next((r) => r['type'] === 'welcome', { from, what: 'welcome' });
});

afterAll(async () => {
  await raw?.close();
  await m?.close();
});

describe('a Slurm pool with enough free GPUs in all but not on one node', () => {
  it('keeps the task QUEUED with a reason naming the free GPUs per node', async () => {
    const pump = setInterval(sample, 100);
    try {
      const running = await approveTask(
        alice,
        rita,
        shellSpec('true', { worker: WORKER, cards: { count: 2 } }),
      );
      const assign = await raw.next((r) => r['type'] === 'assign', { what: 'assign' });
      raw.send({ type: 'ack', boot_id: assign['boot_id'], seq: assign['seq'] });
      const plan = assign['plan'] as { execution_id: string; lease_epoch: number };
      const report = (phase: string, slurm: Record<string, unknown>) => ({
        type: 'execution',
        execution_id: plan.execution_id,
        task_id: running,
        lease_epoch: plan.lease_epoch,
        phase,
        slurm,
      });
      raw.sendSeq(
        ++seq,
        report('accepted', { job_id: '101', state: 'PENDING', pending_reason: null, binding: null }),
      );
      raw.sendSeq(
        ++seq,
        report('started', {
          job_id: '101',
          state: 'RUNNING',
          pending_reason: null,
          binding: { nodes: [{ node: 'n2', gpus: [0, 1] }] },
        }),
      );
      await waitFor(async () => (await getTask(alice, running)).state === 'RUNNING', { what: 'RUNNING' });

      const three = await approveTask(
        alice,
        rita,
        shellSpec('true', { worker: WORKER, cards: { count: 3 } }),
      );
      const waiting = await waitFor(
        async () => {
          const t = await getTask(alice, three);
          return t.reason !== null ? t : undefined;
        },
        { what: 'a wait reason' },
      );
      expect(waiting.state).toBe('QUEUED');
      expect(waiting.reason).toMatchObject({ code: 'waiting_for_cards', need: 3, free: 2 });
      expect(String(waiting.reason?.['message'])).toContain(
        `Needs 3 cards on one node; worker ${WORKER}'s nodes have at most 2 free (n1: 1, n2: 2)`,
      );
      // Nothing was submitted for it: the only assign the worker got is the running task's.
      expect(raw.received.filter((r) => r['type'] === 'assign')).toHaveLength(1);
    } finally {
      clearInterval(pump);
    }
  });
});
