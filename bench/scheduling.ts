import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrokerDeps } from '../src/broker/deps.js';
import { BrokerEvents } from '../src/broker/events.js';
import { Fleet } from '../src/broker/fleet.js';
import { Scheduler } from '../src/broker/loops/scheduler.js';
import { Notifier } from '../src/broker/notifier.js';
import type { WorkerLink } from '../src/broker/ports.js';
import { createPrincipal } from '../src/broker/principals.js';
import { createBrokerRuntime } from '../src/broker/runtime.js';
import { confirmRevision, createProposal } from '../src/broker/tools/proposals.js';
import { submitReview } from '../src/broker/tools/reviews.js';
import { handleExecutionReport } from '../src/broker/workers/reports.js';
import { TaskSpecSchema } from '../src/contracts/task-spec.js';
import { type ExecutionPhase, PROTOCOL_VERSION } from '../src/contracts/worker-protocol.js';
import { ManualClock } from '../src/platform/clock.js';
import { parseConfig } from '../src/platform/config.js';
import { createIdGenerator } from '../src/platform/ids.js';
import { silentLogger } from '../src/platform/logger.js';
import { Store } from '../src/store/store.js';
import { SimSampler } from '../worker/samplers/sim-sampler.js';
import { QUOTAS_OFF } from './child-master.js';
import { type BenchSection, type OpResult, percentile, summarise } from './stats.js';

/**
 * Scheduling throughput (issue 3): 64 workers × 8 simulated cards and 10,000 queued 1-card tasks of zero
 * duration, driven through the real Scheduler (snapshot → decide → one transaction of fenced grants with
 * outbox rows) against the real SQLite store in a temp file. The workers are not 64 WSS daemons: the
 * Fleet is filled with their hello and samples in-process, and each task's zero-duration run is the
 * four reports a worker would send (accepted, started, exited, cleaned), applied one per transaction
 * with the sequence mark, exactly as the hub applies them. Measured: tasks admitted per second
 * (wall time of passes and reports until the queue is empty), grants per second inside the passes alone,
 * and the duration of a pass, including passes over the full queue with no free card.
 */

const WORKERS = 64;
const CARDS = 8;
const TASKS = 10_000;
const IDLE_PASSES = 50;

async function runScheduling(): Promise<OpResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-sched-'));
  const store = Store.open(join(dir, 'broker.db'));
  try {
    const clock = new ManualClock(Date.now());
    const config = parseConfig({
      policy: { executables: [{ path: '/bin/true' }], max_cards: 8 },
      quotas: QUOTAS_OFF,
    });
    const link: WorkerLink = { bootId: 'bench-master', flush: () => {} };
    const fleet = new Fleet(config.timing.worker_offline_seconds * 1000, clock.now());
    let scheduler: Scheduler | null = null;
    const deps: BrokerDeps = {
      store,
      clock,
      ids: createIdGenerator(),
      config,
      notifier: new Notifier(),
      events: new BrokerEvents(),
      logger: silentLogger(),
      observe: { placement: (id) => scheduler!.placement(id), queueInfo: (id) => scheduler!.queueInfo(id) },
      cluster: { fleet, link, requestPass: () => {}, failingGrants: () => [] },
      auditStatus: () => ({ ok: true, events: 0 }),
      runtime: createBrokerRuntime(config),
    };
    scheduler = new Scheduler(deps, fleet, link);

    // 64 workers say hello with 8 fresh cards each.
    for (let w = 0; w < WORKERS; w++) {
      const id = `bench-w${String(w).padStart(2, '0')}`;
      const cards = await new SimSampler({ count: CARDS, seed: id }).sample();
      const identity = cards.map((c) => ({
        index: c.index,
        uuid: c.uuid,
        model: c.model,
        memory_total_mib: c.memory_total_mib,
        simulated: c.simulated,
      }));
      store.workers.upsertOnHello(
        {
          id,
          hostname: id,
          provider: 'sim',
          version: 'bench',
          boot_id: `boot-${id}`,
          isolation: 'bwrap',
          container_engine: null,
          cards: identity,
        },
        clock.now(),
      );
      fleet.connected(id, `boot-${id}`, cards, clock.now());
    }

    // 10,000 approved 1-card tasks, through the real use cases (seeding is not measured).
    const alice = createPrincipal(deps, { name: 'bench-alice', roles: ['submitter'] }).principal;
    const rita = createPrincipal(deps, { name: 'bench-rita', roles: ['reviewer'] }).principal;
    const spec = TaskSpecSchema.parse({
      title: 'sched bench',
      objective: 'zero-duration task',
      success_criteria: 'exits 0',
      cards: { count: 1 },
      runtime: { kind: 'process', argv: ['/bin/true'] },
      time_limit_seconds: 60,
      notes: 'benchmark',
    });
    for (let i = 0; i < TASKS; i += 500) {
      store.transaction(() => {
        for (let j = i; j < Math.min(TASKS, i + 500); j++) {
          const p = createProposal(deps, alice, spec);
          confirmRevision(deps, alice, p.proposal_id, p.revision_id);
          submitReview(deps, rita, {
            proposal_id: p.proposal_id,
            revision_id: p.revision_id,
            decision: 'APPROVE',
            comments: 'bench',
          });
          clock.advance(1);
        }
      });
    }

    const seqs = new Map<string, number>();
    /** The worker side of every assigned execution: four reports, one transaction each, marks raised. */
    const finishAssigned = (): number => {
      const assigned = store.leases.unfinished();
      for (const e of assigned) {
        for (const phase of ['accepted', 'started', 'exited', 'cleaned'] as ExecutionPhase[]) {
          const seq = (seqs.get(e.worker_id) ?? 0) + 1;
          seqs.set(e.worker_id, seq);
          store.transaction(() => {
            store.workers.raiseMark(e.worker_id, `boot-${e.worker_id}`, seq, clock.now());
            handleExecutionReport(deps, e.worker_id, {
              type: 'execution',
              protocol_version: PROTOCOL_VERSION,
              boot_id: `boot-${e.worker_id}`,
              seq,
              execution_id: e.id,
              task_id: e.task_id,
              lease_epoch: e.lease_epoch,
              phase,
              ...(phase === 'exited' || phase === 'cleaned' ? { exit_code: 0, outputs: [] } : {}),
            });
          });
        }
      }
      return assigned.length;
    };
    const freshSamples = () => {
      for (const w of store.workers.list()) fleet.sampled(w.id, fleet.get(w.id).cards, null, clock.now());
      for (const w of store.workers.list()) fleet.touched(w.id, clock.now());
    };

    const passMs: number[] = [];
    const idleMs: number[] = [];
    let granted = 0;
    let passTime = 0;
    const started = performance.now();
    for (let round = 0; granted < TASKS; round++) {
      clock.advance(1);
      freshSamples();
      const t0 = performance.now();
      const decision = scheduler.runPass();
      const dt = performance.now() - t0;
      passMs.push(dt);
      passTime += dt;
      if (decision.grants.length === 0) throw new Error(`round ${round}: nothing granted`);
      granted += decision.grants.length;
      // Once, with every card leased: passes over the full queue that can grant nothing.
      if (round === 0) {
        for (let i = 0; i < IDLE_PASSES; i++) {
          const i0 = performance.now();
          if (scheduler.runPass().grants.length !== 0) throw new Error('an idle pass granted');
          idleMs.push(performance.now() - i0);
        }
      }
      finishAssigned();
    }
    const wall = (performance.now() - started - idleMs.reduce((a, b) => a + b, 0)) / 1000;
    const completed = store.tasks.countByState();
    if ((completed['COMPLETED'] ?? 0) !== TASKS)
      throw new Error(`not all completed: ${JSON.stringify(completed)}`);
    const shape = `${WORKERS} in-process fake workers × ${CARDS} sim cards (Fleet fed hello + samples, no WSS)`;
    const p99 = percentile(
      [...passMs].sort((a, b) => a - b),
      99,
    );
    return [
      {
        ...summarise('scheduling', 'tasks admitted (passes + worker reports)', passMs, 0, wall),
        calls: TASKS,
        callsPerSecond: TASKS / wall,
        notes: `${passMs.length} passes of ≤ ${WORKERS * CARDS} grants; p50/p99/max = one pass; ${shape}`,
      },
      {
        ...summarise('scheduling', 'grants applied inside passes only', passMs, 0, passTime / 1000),
        calls: granted,
        callsPerSecond: granted / (passTime / 1000),
        notes: `pass p99 ${p99.toFixed(1)} ms with up to ${TASKS} queued; real Scheduler + SQLite (WAL) in a temp file`,
      },
      summarise(
        'scheduling',
        `pass over ${TASKS - WORKERS * CARDS} queued, no free card`,
        idleMs,
        0,
        idleMs.reduce((a, b) => a + b, 0) / 1000,
        'snapshot + decide + empty apply; every card leased',
      ),
    ];
  } finally {
    // A pass the scheduler queued for itself (conflicts) must not find the store closed.
    await new Promise((r) => setImmediate(r));
    store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The scheduling-throughput section of `npm run bench`. */
export const schedulingSection: BenchSection = {
  name: 'scheduling',
  description: '64 workers × 8 cards, 10,000 queued zero-duration 1-card tasks, real Scheduler + SQLite',
  run: runScheduling,
};
