import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decide } from '../../../../src/domain/scheduling/decide.js';
import type {
  CardView,
  QueuedTaskView,
  SchedulingConfig,
  WorkerView,
} from '../../../../src/domain/scheduling/types.js';

/**
 * Per-node admission on a Slurm pool (docs/decisions/0013-slurm-backend.md, "Per-node admission"): a
 * task must fit the pool's free count and the free GPUs of one node (or of count/per_node nodes);
 * our started jobs are charged to the nodes of their binding, jobs that have not started only to the
 * pool's total.
 */

const NOW = 10_000_000;
const CONFIG: SchedulingConfig = {
  sample_interval_ms: 2000,
  vram_threshold_pct: 2,
  reservation_after_seconds: 600,
  max_concurrent_cards_per_owner: null,
  require_isolation: false,
};

const FOREIGN = [{ pid: 0, name: 'slurm job 7 other', used_memory_mib: null }];

type Use = 'free' | 'foreign' | 'failed';

/**
 * A pool of nodes `n1`, `n2`, … with `uses[k]` saying what Slurm shows on each GPU of node k, `leased`
 * slots (the lowest indexes, as the broker picks them) and `bound` GPUs our started jobs hold per node.
 */
function pool(
  uses: Use[][],
  leased = 0,
  bound: Array<{ node: string; gpus: number }> = [],
  id = 'pool',
): WorkerView {
  const cards: CardView[] = [];
  uses.forEach((gpus, k) => {
    for (const use of gpus) {
      const index = cards.length;
      cards.push({
        index,
        model: 'slurm gpu',
        memory_used_mib: null,
        memory_total_mib: null,
        memory_used_pct: 0,
        health: use === 'failed' ? 'failed' : 'ok',
        health_reasons: use === 'failed' ? ['node down'] : [],
        processes: use === 'foreign' ? FOREIGN : [],
        simulated: false,
        cordoned: false,
        leased: index < leased,
        quarantined: false,
        broker_pids: [],
        node: `n${k + 1}`,
      });
    }
  });
  return {
    worker_id: id,
    online: true,
    draining: false,
    sampled_at: NOW - 500,
    sampler_error: null,
    isolation: 'none',
    container_engine: null,
    backend: 'slurm',
    pool_node_gpus: uses.map((g) => g.length),
    pool_bound: bound,
    cards,
  };
}

const free = (n: number): Use[] => Array.from({ length: n }, () => 'free');
const gpus = (...uses: Use[]): Use[] => uses;

let n = 0;
function task(count: number, over: Partial<QueuedTaskView> & { per_node?: number } = {}): QueuedTaskView {
  n++;
  const { per_node, ...rest } = over;
  return {
    task_id: `t${String(n).padStart(4, '0')}`,
    owner: 'alice',
    priority: 0,
    approved_at: NOW - 1000 + n,
    cards: { count, ...(per_node === undefined ? {} : { per_node }) },
    ...rest,
  };
}

function aged(count: number, over: { per_node?: number } = {}): QueuedTaskView {
  return task(count, { ...over, approved_at: NOW - 3_600_000 + n });
}

function run(workers: WorkerView[], tasks: QueuedTaskView[]) {
  return decide({ workers, tasks, running_cards_by_owner: {}, config: CONFIG }, NOW);
}

function reasonOf(d: ReturnType<typeof run>, t: QueuedTaskView) {
  return d.waiting.find((w) => w.task_id === t.task_id)?.reason;
}

describe('Slurm pool: per-node admission', () => {
  it('keeps a 3-card task queued when 3 GPUs are free in the pool but at most 2 on one node', () => {
    // n1: 3 GPUs of a foreign job; n2: 2 GPUs of our running job (2 pool slots leased, bound to n2).
    const p = pool([gpus('free', 'foreign', 'foreign', 'foreign'), free(4)], 2, [{ node: 'n2', gpus: 2 }]);
    const three = task(3);
    const d = run([p], [three]);
    expect(d.grants).toEqual([]);
    const reason = reasonOf(d, three);
    expect(reason).toMatchObject({ code: 'waiting_for_cards', need: 3, free: 2 });
    expect(reason?.message).toContain(
      "Needs 3 cards on one node; worker pool's nodes have at most 2 free (n1: 1, n2: 2)",
    );
    expect(reason?.message).toContain('3 are free across the pool');
  });

  it('still grants what fits a node, best fit, and never more than the pool count', () => {
    const p = pool([gpus('free', 'foreign', 'foreign', 'foreign'), free(4)], 2, [{ node: 'n2', gpus: 2 }]);
    const [three, two, one, last] = [task(3), task(2), task(1), task(1)];
    const d = run([p], [three, two, one, last]);
    expect(d.grants.map((g) => g.task_id)).toEqual([two.task_id, one.task_id]);
    expect(reasonOf(d, last)).toMatchObject({ code: 'waiting_for_cards', free: 0 });
  });

  it('prefers the node with the fewest free GPUs that still fits, so a larger hole stays whole', () => {
    // n1: 4 free, n2: 3 free. First fit by name would put the 3 on n1 and strand the 4.
    const p = pool([free(4), gpus('free', 'free', 'free', 'foreign')]);
    const d = run([p], [task(3), task(4)]);
    expect(d.grants).toHaveLength(2);
  });

  it('lets a claim earlier in the pass reduce its node', () => {
    const p = pool([free(4), free(4)]);
    const [a, b, c] = [task(3), task(3), task(2)];
    const d = run([p], [a, b, c]);
    expect(d.grants.map((g) => g.task_id)).toEqual([a.task_id, b.task_id]);
    // 2 slots are left in the pool, 1 on each node.
    expect(reasonOf(d, c)).toMatchObject({ code: 'waiting_for_cards', need: 2, free: 1 });
    expect(reasonOf(d, c)?.message).toContain('(n1: 1, n2: 1)');
  });

  it('charges a lease whose job has not started to the pool total only', () => {
    // 2 slots leased by a pending job (no binding): 6 free in the pool, 4 free on each node.
    const pending = pool([free(4), free(4)], 2);
    const d = run([pending], [task(4), task(4)]);
    expect(d.grants).toHaveLength(1);
    expect(d.waiting[0]?.reason).toMatchObject({ code: 'waiting_for_cards', free: 2 });
    // Once it starts on n1, n1 has 2 free: one 4-card task still fits (on n2).
    const started = pool([free(4), free(4)], 2, [{ node: 'n1', gpus: 2 }]);
    expect(run([started], [task(4)]).grants).toHaveLength(1);
    const both = pool([free(4), free(4)], 4, [
      { node: 'n1', gpus: 2 },
      { node: 'n2', gpus: 2 },
    ]);
    const four = task(4);
    const waiting = run([both], [four]);
    expect(waiting.grants).toEqual([]);
    expect(reasonOf(waiting, four)?.message).toContain('at most 2 free (n1: 2, n2: 2)');
  });

  it('places a multi-node shape only on enough distinct nodes with per_node free each', () => {
    const p = pool([free(4), gpus('free', 'free', 'free', 'foreign'), free(4)]);
    const eight = task(8, { per_node: 4 });
    const twelve = task(12, { per_node: 4 });
    const d = run([p], [eight, twelve]);
    expect(d.grants.map((g) => g.task_id)).toEqual([eight.task_id]);
    // 11 free in all before the grant; the 12-card shape needs 3 whole nodes (it fits the pool shape).
    expect(reasonOf(d, twelve)?.code).toBe('waiting_for_cards');
    // 10 free in the pool, but only n1 has 4.
    const split = pool([
      free(4),
      gpus('free', 'free', 'free', 'foreign'),
      gpus('foreign', 'free', 'free', 'free'),
    ]);
    const alone = run([split], [task(8, { per_node: 4 })]);
    expect(alone.grants).toEqual([]);
    expect(alone.waiting[0]?.reason).toMatchObject({ code: 'waiting_for_cards', need: 8, free: 7 });
    expect(alone.waiting[0]?.reason.message).toContain(
      'Needs 2 nodes with 4 free GPUs each; worker pool has 1 such node (n1: 4, n2: 3, n3: 3), though 10 are free',
    );
    // 2 per node fits over three nodes of which one has only 3 free.
    expect(run([p], [task(6, { per_node: 2 })]).grants).toHaveLength(1);
  });

  it('claims each node of a multi-node grant, so a later task sees what is left', () => {
    const p = pool([free(4), free(4), free(2)]);
    // 2 × 2: best fit takes n3 and one of the 4s (n1), leaving n2 whole for a 4-card task.
    const d = run([p], [task(4, { per_node: 2 }), task(4), task(2)]);
    expect(d.grants).toHaveLength(3);
  });

  it("holds an aged task's GPUs only on the node where it will fit, never more than that node has free", () => {
    // n1: 2 free and 2 of our started job's GPUs (they end); n2: 3 free and a foreign job.
    const p = pool([free(4), gpus('free', 'free', 'free', 'foreign')], 2, [{ node: 'n1', gpus: 2 }]);
    const big = aged(4);
    const two = task(2);
    const three = task(3);
    const d = run([p], [big, two, three]);
    // Pool-wide the reservation would take 4 of the 5 free slots; per node only n1 can ever hold 4,
    // and n1 has 2 free to hold.
    expect(d.reservations).toEqual([{ task_id: big.task_id, worker_id: 'pool', card_indexes: [2, 3] }]);
    expect(reasonOf(d, big)).toMatchObject({ code: 'holding_reservation', held: 2, need: 4 });
    // n2 still takes the 2-card task; then 1 slot is left in the pool.
    expect(d.grants.map((g) => g.task_id)).toEqual([two.task_id]);
    expect(reasonOf(d, three)?.code).toBe('waiting_for_cards');
  });

  it('makes no reservation where no node can ever hold the shape free of foreign jobs', () => {
    // Each node has a foreign GPU; nothing of ours runs: 4 on one node is out of reach for now.
    const p = pool([gpus('free', 'free', 'free', 'foreign'), gpus('free', 'free', 'free', 'foreign')]);
    const big = aged(4);
    const d = run([p], [big, task(1)]);
    expect(d.reservations).toEqual([]);
    expect(d.grants).toHaveLength(1);
    expect(reasonOf(d, big)?.message).toContain('at most 3 free');
  });

  it('blames an older reservation only when giving its GPUs back would let the task fit a node', () => {
    // n1: 2 free + our 2-GPU job; n2: 1 free + 3 foreign. The aged 4 holds n1's 2.
    const p = pool([free(4), gpus('free', 'foreign', 'foreign', 'foreign')], 2, [{ node: 'n1', gpus: 2 }]);
    const big = aged(4);
    const two = task(2);
    const d = run([p], [big, two]);
    expect(reasonOf(d, two)).toMatchObject({ code: 'reserved_for_older_task', task_position: 1 });
    const three = task(3);
    expect(reasonOf(run([p], [aged(4), three]), three)?.code).toBe('waiting_for_cards');
  });

  it("ignores a binding's unknown nodes and never lets an oversized one make a node's free negative", () => {
    // A hostile or confused worker reports bindings for nodes it does not have and more GPUs than a
    // node holds: only its own pool's admission can get stricter, and nothing goes below zero.
    const p = pool([free(4), free(4)], 2, [
      { node: 'elsewhere', gpus: 64 },
      { node: 'n1', gpus: 40 },
    ]);
    const [four, one] = [task(4), task(1)];
    const d = run([p, { ...pool([free(4)], 0, [], 'other') }], [four, one]);
    expect(d.grants.map((g) => [g.task_id, g.worker_id])).toEqual([
      [four.task_id, 'other'],
      [one.task_id, 'pool'],
    ]);
    const alone = run([p], [task(4), task(4)]);
    expect(alone.grants).toHaveLength(1);
    expect(alone.waiting[0]?.reason).toMatchObject({ code: 'waiting_for_cards', free: 0 });
  });

  it('keeps the count-only behaviour for a pool whose cards name no node', () => {
    const p = pool([free(4), free(4)]);
    const noNodes = { ...p, cards: p.cards.map(({ node: _node, ...c }) => c) };
    expect(run([noNodes], [task(4), task(4)]).grants).toHaveLength(2);
  });
});

// --- property -------------------------------------------------------------------------------------

interface Job {
  slots: number;
  /** The node its binding names, or null when it has not started. */
  node: number | null;
}

interface PoolSpec {
  uses: Use[][];
  jobs: Job[];
}

const poolSpecArb: fc.Arbitrary<PoolSpec> = fc
  .array(
    fc.array(fc.constantFrom<Use>('free', 'free', 'free', 'foreign', 'failed'), {
      minLength: 1,
      maxLength: 8,
    }),
    { minLength: 1, maxLength: 4 },
  )
  .chain((uses) =>
    fc.record({
      uses: fc.constant(uses),
      jobs: fc.array(
        fc.record({
          slots: fc.integer({ min: 1, max: 4 }),
          node: fc.oneof(fc.constant(null), fc.integer({ min: 0, max: uses.length - 1 })),
        }),
        { maxLength: 3 },
      ),
    }),
  );

function buildPool(spec: PoolSpec, id: string): WorkerView {
  const total = spec.uses.flat().length;
  let leased = 0;
  const bound: Array<{ node: string; gpus: number }> = [];
  for (const job of spec.jobs) {
    const slots = Math.min(job.slots, total - leased);
    if (slots <= 0) break;
    leased += slots;
    if (job.node !== null) bound.push({ node: `n${job.node + 1}`, gpus: slots });
  }
  return pool(spec.uses, leased, bound, id);
}

/** The test's own model: free per node and in the pool, from the spec, not from the scheduler. */
function modelOf(w: WorkerView): { total: number; nodes: Map<string, number> } {
  const nodes = new Map<string, number>();
  let down = 0;
  for (const c of w.cards) {
    const up = c.processes.length === 0 && c.health === 'ok';
    if (!up) down++;
    const node = c.node as string;
    nodes.set(node, (nodes.get(node) ?? 0) + (up ? 1 : 0));
  }
  for (const b of w.pool_bound ?? []) nodes.set(b.node, (nodes.get(b.node) ?? 0) - b.gpus);
  const leased = w.cards.filter((c) => c.leased).length;
  return { total: Math.max(0, w.cards.length - leased - down), nodes };
}

/** Whether the grants, in order, can all be put on nodes with enough free GPUs (exhaustive search). */
function packable(shapes: Array<{ nodes: number; each: number }>, free: number[]): boolean {
  if (shapes.length === 0) return true;
  const [first, ...rest] = shapes as [
    { nodes: number; each: number },
    ...Array<{ nodes: number; each: number }>,
  ];
  const choose = (from: number, left: number, caps: number[]): boolean => {
    if (left === 0) return packable(rest, caps);
    for (let i = from; i < caps.length; i++) {
      if ((caps[i] as number) < first.each) continue;
      const next = [...caps];
      next[i] = (next[i] as number) - first.each;
      if (choose(i + 1, left - 1, next)) return true;
    }
    return false;
  };
  return choose(0, first.nodes, free);
}

const queueArb = fc.array(
  fc.record({
    count: fc.integer({ min: 1, max: 8 }),
    per_node: fc.oneof({ weight: 3, arbitrary: fc.constant(null) }, fc.constantFrom(1, 2, 4)),
    aged: fc.boolean(),
  }),
  { maxLength: 12 },
);

describe('Slurm pool: per-node admission property', () => {
  it('never grants a shape that does not fit the nodes after earlier grants, nor more than the pool count', () => {
    fc.assert(
      fc.property(fc.array(poolSpecArb, { minLength: 1, maxLength: 2 }), queueArb, (specs, queue) => {
        const workers = specs.map((s, i) => buildPool(s, `p${i}`));
        const tasks = queue.map((q, i) => ({
          task_id: `q${String(i).padStart(3, '0')}`,
          owner: 'alice',
          priority: 0,
          approved_at: (q.aged ? NOW - 3_600_000 : NOW - 1000) + i,
          cards: {
            // A multi-node count is a multiple of per_node (the spec schema refuses anything else).
            count: q.per_node === null ? q.count : q.per_node * Math.ceil(q.count / q.per_node),
            ...(q.per_node === null ? {} : { per_node: q.per_node }),
          },
        }));
        const d = decide({ workers, tasks, running_cards_by_owner: {}, config: CONFIG }, NOW);
        const byId = new Map(tasks.map((t) => [t.task_id, t]));
        for (const w of workers) {
          const model = modelOf(w);
          const grants = d.grants.filter((g) => g.worker_id === w.worker_id);
          const granted = grants.reduce((s, g) => s + g.card_indexes.length, 0);
          expect(granted).toBeLessThanOrEqual(model.total);
          const shapes = grants.map((g) => {
            const c = (byId.get(g.task_id) as QueuedTaskView).cards;
            return c.per_node === undefined
              ? { nodes: 1, each: c.count }
              : { nodes: c.count / c.per_node, each: c.per_node };
          });
          // All the pass's grants fit the nodes together, so each fit after the earlier ones.
          expect(packable(shapes, [...model.nodes.values()])).toBe(true);
          // Reservations and grants together never exceed the pool count.
          const reserved = d.reservations
            .filter((r) => r.worker_id === w.worker_id)
            .reduce((s, r) => s + r.card_indexes.length, 0);
          expect(granted + reserved).toBeLessThanOrEqual(model.total);
        }
      }),
      { numRuns: 400 },
    );
  });
});
