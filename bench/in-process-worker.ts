import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { silentLogger } from '../src/platform/logger.js';
import { startWorker } from '../worker/daemon/start-worker.js';
import { SimSampler } from '../worker/samplers/sim-sampler.js';
import { prepareSandbox } from '../worker/sandbox/setup.js';
import type { ChildMaster } from './child-master.js';
import { waitForCards } from './harness.js';

/**
 * A worker in the bench process with `cards` simulated cards, tasks in the real bubblewrap sandbox (so
 * what a section measures includes setting it up), started and waited for until every card is AVAILABLE
 * to `viewer`. The admission, inputs and agent-loop sections share it; the noisy-neighbour and tasks
 * sections use a worker in its own process (child-worker.ts) instead.
 */
export interface BenchWorker {
  close(): Promise<void>;
}

export async function startBenchWorker(
  master: ChildMaster,
  viewer: Client,
  opts: { workerId: string; cards: number },
): Promise<BenchWorker> {
  const dataDir = mkdtempSync(join(tmpdir(), `gpu-broker-bench-${opts.workerId}-`));
  const sampler = new SimSampler({ count: opts.cards, seed: opts.workerId });
  try {
    const sandbox = await prepareSandbox({ isolation: 'bwrap', dataDir, sampler });
    const worker = await startWorker({
      sandbox: sandbox.setup,
      masterUrl: master.url,
      token: await master.createToken(`${opts.workerId}-token`, ['worker'], opts.workerId),
      workerId: opts.workerId,
      dataDir,
      sampler,
      ca: master.caPem,
      logger: silentLogger(),
    });
    const close = async () => {
      await worker.close();
      rmSync(dataDir, { recursive: true, force: true });
    };
    await waitForCards(
      viewer,
      (cards) => cards.filter((c) => c.state === 'AVAILABLE').length === opts.cards,
      15_000,
      `the bench worker ${opts.workerId} never became available`,
    ).catch(async (err: unknown) => {
      await close();
      throw err;
    });
    return { close };
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
}
