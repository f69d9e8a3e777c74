import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { CardSample } from '../../../../src/contracts/sample.js';
import { PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import { silentLogger } from '../../../../src/platform/logger.js';
import { CARD_GONE_SAMPLES } from '../../../../worker/executions/card-check.js';
import type { ExecutionExit, ExecutionHandle, Executor } from '../../../../worker/executions/executor.js';
import { ExecutionManager } from '../../../../worker/executions/manager.js';
import { OutboxSender } from '../../../../worker/link/outbox.js';
import { type LocalStore, openLocalStore } from '../../../../worker/store/local-store.js';
import { makePlan } from '../../../support/executor-plan.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/**
 * ExecutionManager.cardsSampled (docs/decisions/0046-mig-slices-as-cards.md §7) on a real local store and
 * outbox with a fake executor: when a run is stopped because its card left the samples, and when not.
 */

const card = (index: number, uuid: string): CardSample => ({
  index,
  uuid,
  model: 'Simulated GPU',
  memory_used_mib: 0,
  memory_total_mib: 81920,
  utilization_pct: 0,
  temperature_c: null,
  power_w: null,
  health: 'ok',
  health_reasons: [],
  processes: [],
  simulated: true,
});
const both = [card(0, 'GPU-sim-0'), card(1, 'GPU-sim-1')];
const withoutZero = [card(1, 'GPU-sim-1')];

const killed: ExecutionExit = {
  exit_code: null,
  signal: 'SIGTERM',
  failure_reason: 'CANCELLED',
  outputs: [],
  output_errors: [],
  log_errors: [],
};

/**
 * A run that lasts until it is cancelled (or `exit` ends it), whose cleanup receipt comes once `clean`
 * is called; records each cancel.
 */
class FakeExecutor implements Executor {
  readonly cancels: string[] = [];
  exit: (e: ExecutionExit) => void = () => {};
  clean: () => void = () => {};
  start(plan: Parameters<Executor['start']>[0]): ExecutionHandle {
    const exited = new Promise<ExecutionExit>((r) => {
      this.exit = r;
    });
    const cleaned = new Promise<void>((r) => {
      this.clean = r;
    });
    const cancels = this.cancels;
    const exit = (e: ExecutionExit) => this.exit(e);
    return {
      executionId: plan.execution_id,
      pid: 4242,
      started: Promise.resolve(4242),
      exited,
      done: exited.then(async (e) => {
        await cleaned;
        return { ...e, cleaned: true, cleanup_detail: 'clean' };
      }),
      cancel(reason: string) {
        cancels.push(reason);
        exit(killed);
      },
    };
  }
}

let stores: LocalStore[] = [];
afterEach(() => {
  for (const s of stores) s.close();
  stores = [];
  removeTempDirs();
});

async function running() {
  const store = openLocalStore(join(makeTempDir('manager-card-lost'), 'worker.db'));
  stores.push(store);
  const outbox = new OutboxSender(
    store,
    'boot-w',
    { send: () => false, bufferedAmount: () => 0 },
    silentLogger(),
  );
  const executor = new FakeExecutor();
  const manager = new ExecutionManager({
    store,
    outbox,
    logger: silentLogger(),
    sampler: { provider: 'sim', sample: async () => both },
    latestCards: () => both,
    executor,
  });
  const plan = makePlan({ argv: ['true'], cards: [{ index: 0, uuid: 'GPU-sim-0' }] });
  const handled = manager.handleAssign({
    type: 'assign',
    protocol_version: PROTOCOL_VERSION,
    boot_id: 'boot-m',
    seq: 1,
    plan,
  });
  handled.after?.();
  outbox.ack('boot-w', 1); // the master recorded the acceptance: the run starts
  const id = plan.execution_id;
  await waitForPhase(store, id, 'started');
  return { store, executor, manager, id };
}

async function waitForPhase(store: LocalStore, id: string, phase: string): Promise<void> {
  for (let i = 0; i < 200 && store.getExecution(id)?.phase !== phase; i++)
    await new Promise((r) => setTimeout(r, 5));
  expect(store.getExecution(id)?.phase).toBe(phase);
}

describe('a run whose leased card leaves the samples', () => {
  it(`is stopped after ${CARD_GONE_SAMPLES} successive samples without it and reported CARD_LOST`, async () => {
    const { store, executor, manager, id } = await running();
    manager.cardsSampled(withoutZero);
    expect(executor.cancels).toEqual([]); // one odd sample never kills a task
    manager.cardsSampled(withoutZero);
    expect(executor.cancels).toEqual(['leased card gone: 0 (GPU-sim-0) is no longer on this worker']);
    manager.cardsSampled(withoutZero);
    expect(executor.cancels).toHaveLength(1);
    executor.clean();
    await waitForPhase(store, id, 'cleaned');
    expect(store.getExecution(id)?.result).toMatchObject({
      failure_reason: 'CARD_LOST',
      detail:
        'leased card gone: 0 (GPU-sim-0) is no longer on this worker; the run ended CANCELLED; cleanup: clean',
    });
  });

  it('is not stopped when the card comes back between two samples without it', async () => {
    const { executor, manager } = await running();
    manager.cardsSampled(withoutZero);
    manager.cardsSampled(both);
    manager.cardsSampled(withoutZero);
    expect(executor.cancels).toEqual([]);
    // Nor by a sample that lists nothing (a sampler that lists nothing is not trusted).
    manager.cardsSampled([]);
    expect(executor.cancels).toEqual([]);
  });

  it('keeps a stop the master asked for first: CANCELLED, never CARD_LOST', async () => {
    const { store, executor, manager, id } = await running();
    const cancel = manager.handleCancel({
      type: 'cancel',
      protocol_version: PROTOCOL_VERSION,
      boot_id: 'boot-m',
      seq: 2,
      execution_id: id,
      lease_epoch: 1,
      reason: 'cancelled by its owner',
    });
    manager.cardsSampled(withoutZero);
    manager.cardsSampled(withoutZero);
    cancel.after?.();
    expect(executor.cancels).toEqual(['cancelled by its owner']);
    executor.clean();
    await waitForPhase(store, id, 'cleaned');
    expect(store.getExecution(id)?.result?.failure_reason).toBe('CANCELLED');
  });

  it('leaves a run that already exited to its cleanup receipt', async () => {
    const { store, executor, manager, id } = await running();
    executor.exit({ ...killed, exit_code: 0, signal: null, failure_reason: null });
    await waitForPhase(store, id, 'exited');
    manager.cardsSampled(withoutZero);
    manager.cardsSampled(withoutZero);
    expect(executor.cancels).toEqual([]);
    executor.clean();
    await waitForPhase(store, id, 'cleaned');
    expect(store.getExecution(id)?.result?.failure_reason).toBeNull();
  });
});
