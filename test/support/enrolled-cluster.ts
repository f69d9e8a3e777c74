import type { RevisionResult } from '../../src/broker/tools/proposals.js';
import type { CardSample } from '../../src/contracts/sample.js';
import { ManualClock } from '../../src/platform/clock.js';
import { type BrokerFixture, makeBrokerDeps } from './deps.js';
import { validSpec } from './spec.js';

/**
 * Broker use cases around one worker, without sockets: an in-memory store (makeBrokerDeps), worker
 * `WORKER` enrolled and online with `CARDS` idle simulated cards, and approved tasks waiting for the
 * scheduler. For the worker-session use cases and the properties over worker reports.
 */

/** The enrolled worker's id. */
export const WORKER = 'w1';
/** How many cards it has. */
export const CARDS = 4;

/** Its cards, idle. */
export const samples: CardSample[] = Array.from({ length: CARDS }, (_, index) => ({
  index,
  uuid: `SIM-${index}`,
  model: 'Simulated GPU',
  memory_used_mib: 0,
  memory_total_mib: 81920,
  utilization_pct: 0,
  temperature_c: 30,
  power_w: 50,
  health: 'ok' as const,
  health_reasons: [],
  processes: [],
  simulated: true,
}));

let keys = 0;
const key = () => `enrolled-${++keys}`;

/** The fixture, with one approved task per entry of `counts` (its card count), no outputs required. */
export async function enrolledCluster(counts: number[]): Promise<{ f: BrokerFixture; clock: ManualClock }> {
  const clock = new ManualClock();
  const f = makeBrokerDeps({ clock });
  const alice = f.principal('alice', ['submitter']);
  const rita = f.principal('rita', ['reviewer']);
  f.deps.store.workers.upsertOnHello(
    {
      id: WORKER,
      hostname: 'host',
      provider: 'sim',
      version: '0',
      boot_id: 'boot-0',
      isolation: 'bwrap',
      container_engine: null,
      cards: samples.map((s) => ({
        index: s.index,
        uuid: s.uuid,
        model: s.model,
        memory_total_mib: 81920,
        simulated: true,
      })),
    },
    clock.now(),
  );
  f.deps.cluster.fleet.connected(WORKER, 'boot-0', samples, clock.now());
  for (const count of counts) {
    const r = (await f.invoke(alice, 'create_proposal', {
      spec: validSpec({ cards: { count }, outputs: [] }),
      idempotency_key: key(),
    })) as RevisionResult;
    await f.invoke(alice, 'confirm_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      idempotency_key: key(),
    });
    await f.invoke(rita, 'submit_review', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      decision: 'APPROVE',
      comments: 'ok',
      idempotency_key: key(),
    });
  }
  return { f, clock };
}
