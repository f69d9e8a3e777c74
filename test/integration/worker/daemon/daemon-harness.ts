import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { silentLogger } from '../../../../src/platform/logger.js';
import type { RunningWorker, WorkerOptions } from '../../../../worker/daemon/start-worker.js';
import { startWorker } from '../../../../worker/daemon/start-worker.js';
import type { CardSampler } from '../../../../worker/samplers/card-sampler.js';
import { SimSampler, simCardUuid } from '../../../../worker/samplers/sim-sampler.js';
import { type PlanOptions as MakePlanOptions, makePlan } from '../../../support/executor-plan.js';
import { FakeMaster } from '../../../support/fake-master.js';

/** Shared set-up of the daemon tests: a temp dir, a fake master and workers that are closed afterwards. */

/** Seed of the simulated cards, so plans can name their uuids. */
export const SIM_SEED = 'worker-test';
/** The uuid of simulated card `index`. */
export const simUuid = (index: number): string => simCardUuid(SIM_SEED, index);

/** One test's resources. */
export interface Harness {
  readonly dir: string;
  readonly master: FakeMaster;
  /** Starts a worker against the fake master (sim:4 unless a sampler is given). */
  worker(overrides?: Partial<WorkerOptions>): Promise<RunningWorker>;
  /** Closes workers, the master and removes the temp dir. */
  dispose(): Promise<void>;
}

/** Creates a harness; call `dispose` in afterEach. */
export async function harness(): Promise<Harness> {
  const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-daemon-'));
  const master = await FakeMaster.start();
  const workers: RunningWorker[] = [];
  return {
    dir,
    master,
    async worker(overrides = {}) {
      const sampler: CardSampler = overrides.sampler ?? new SimSampler({ count: 4, seed: SIM_SEED });
      const w = await startWorker({
        masterUrl: master.url,
        token: master.token,
        workerId: 'w1',
        dataDir: join(dir, 'data'),
        logger: silentLogger(),
        sampleIntervalMs: 100,
        backoff: { initialMs: 20, maxMs: 100, refusedMs: 50 },
        cleanupPollMs: 20,
        ...overrides,
        sampler,
      });
      workers.push(w);
      return w;
    },
    async dispose() {
      await Promise.all(workers.map((w) => w.close()));
      await master.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Options of `plan`: those of `makePlan`, with cards named by index. */
export type PlanOptions = Omit<MakePlanOptions, 'cards'> & { cards?: number[] };

/** `makePlan` on the harness's simulated cards (default card 0), with short grace and cleanup bounds. */
export function plan(o: PlanOptions): ExecutionPlan {
  const cards = (o.cards ?? [0]).map((index) => ({ index, uuid: simUuid(index) }));
  return makePlan({ grace: 0.2, cleanupTimeout: 2, ...o, cards });
}
