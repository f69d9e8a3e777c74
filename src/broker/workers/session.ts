import type { CardSample } from '../../contracts/sample.js';
import {
  HELLO_MAX_EXECUTIONS,
  type MasterMessage,
  PROTOCOL_VERSION,
  type WorkerMessage,
} from '../../contracts/worker-protocol.js';
import { sampleDefect } from '../../domain/machines/sample-check.js';
import { heldCards, type ReconcileAction, reconcileHello } from '../../domain/machines/worker-reconcile.js';
import { asStorageUnavailable } from '../../store/storage-errors.js';
import type { KnownCard } from '../../store/workers-repo.js';
import type { BrokerDeps } from '../deps.js';
import { markExecutionLost, resumeExecution } from '../machines/execution.js';
import { CARDS_TOPIC } from '../topics.js';
import { enqueueForWorker } from './link.js';

/**
 * The use cases behind a worker session (live-sessions.ts and ingest.ts keep the session and its frames):
 *  - `acceptHello`: records the worker, applies `reconcileHello` (src/domain/machines/worker-reconcile.ts) in one
 *    transaction (`storeHello`), and returns the welcome to send — also when the store cannot take the
 *    hello (out of disk space), which the hub then stores later with `storeHello`;
 *  - `recordSample`, `recordProbe`: what the sequenced `sample` and `probe` messages change.
 * Call them with the session's worker id (the one its token is bound to), never one a message names.
 */

type Hello = Extract<WorkerMessage, { type: 'hello' }>;
type Sample = Extract<WorkerMessage, { type: 'sample' }>;
type Probe = Extract<WorkerMessage, { type: 'probe' }>;
type Welcome = Extract<MasterMessage, { type: 'welcome' }>;

/** The identity half of a card sample, as the workers table keeps it. */
function identityOf(cards: readonly CardSample[]): KnownCard[] {
  return cards.map((c) => ({
    index: c.index,
    uuid: c.uuid,
    model: c.model,
    memory_total_mib: c.memory_total_mib,
    simulated: c.simulated,
    ...(c.mig === undefined ? {} : { mig: { profile: c.mig.profile, compute_slices: c.mig.compute_slices } }),
  }));
}

/** What `acceptHello` did: the welcome to send, and whether the hello's writes were stored. */
export interface AcceptedHello {
  welcome: Welcome;
  /**
   * False when the store could not take the hello (out of disk space): the worker is
   * welcomed anyway (online, its tasks not taken for lost) and the caller must `storeHello` it before
   * anything else from this session, or once storage recovers.
   */
  stored: boolean;
}

/**
 * A worker said hello on a session authenticated as `workerId` (protocol version and worker id already
 * checked by the hub). `storeHello` writes it in one transaction; then the fleet learns the session,
 * with the cards the worker's own executions hold. Returns the welcome; the caller sends it, then
 * flushes the outbox (a `query` decided here goes out after the welcome).
 */
export function acceptHello(deps: BrokerDeps, workerId: string, msg: Hello, now: number): AcceptedHello {
  const fleet = deps.cluster.fleet;
  // A card list naming one index or uuid twice is not trusted at all (see sampleDefect).
  const defect = sampleDefect(msg.cards);
  const helloCards = defect === null ? msg.cards : [];
  let held: readonly number[];
  let stored = true;
  try {
    held = storeHello(deps, workerId, msg, now);
  } catch (err) {
    const unavailable = asStorageUnavailable(err, deps.store);
    if (!unavailable) throw err;
    // The scheduler grants nothing while the store refuses writes; the cards hello lists as held by the
    // worker's own executions stay held all the same.
    deps.logger.warn(
      { worker_id: workerId, message: unavailable.message },
      'worker hello not stored (master storage unavailable); stored once the store takes writes',
    );
    held = heldCards(msg.executions);
    stored = false;
  }
  fleet.connected(workerId, msg.boot_id, helloCards, now, [...held], msg.starts_after_ack === true);
  if (defect !== null) {
    deps.logger.warn({ worker_id: workerId, defect }, 'worker hello: card list refused');
    fleet.sampled(workerId, [], defect, now);
  }
  deps.notifier.notify(CARDS_TOPIC);
  return {
    stored,
    welcome: {
      type: 'welcome',
      protocol_version: PROTOCOL_VERSION,
      worker_id: workerId,
      master_boot_id: deps.cluster.link.bootId,
      sample_interval_ms: deps.config.timing.sample_interval_ms,
      worker_marks: deps.store.workers.marks(workerId),
      qualification_python: deps.config.qualification_python,
      max_log_bytes_per_task: deps.config.storage.max_log_bytes_per_task,
    },
  };
}

/**
 * Everything a hello writes, in one transaction: the worker row, the reconcile decisions
 * (`reconcileHello`, src/domain/machines/worker-reconcile.ts), an audit row. Returns the cards the worker's own
 * executions hold. Throws UNAVAILABLE when the store cannot take it (nothing is written then).
 */
export function storeHello(deps: BrokerDeps, workerId: string, msg: Hello, now: number): readonly number[] {
  const { store } = deps;
  // A card list naming one index or uuid twice is not trusted at all (see sampleDefect).
  const identity = identityOf(sampleDefect(msg.cards) === null ? msg.cards : []);
  let held: readonly number[] = [];
  store.transaction(() => {
    const prev = store.workers.get(workerId);
    store.workers.upsertOnHello(
      {
        id: workerId,
        hostname: msg.hostname,
        provider: msg.provider,
        version: msg.version,
        boot_id: msg.boot_id,
        cards: identity.length ? identity : (prev?.cards ?? []),
        isolation: msg.isolation,
        container_engine: msg.container_engine,
        mounts: msg.mounts,
        backend: msg.backend,
        slurm: msg.slurm,
        seccomp: msg.seccomp,
        host: msg.host,
      },
      now,
    );
    store.audit.append({
      at: now,
      actor: workerId,
      action: 'worker.connected',
      subject_type: 'worker',
      subject_id: workerId,
      data: {
        boot_id: msg.boot_id,
        hostname: msg.hostname,
        provider: msg.provider,
        cards: identity.length,
        isolation: msg.isolation,
        container_engine: msg.container_engine,
        backend: msg.backend,
        // What its tasks' syscall filter is, and which of its groups the operator allowed again:
        // a widened filter is on the record at every connection.
        seccomp: msg.seccomp,
        host: msg.host,
        ...(msg.slurm === null ? {} : { partition: msg.slurm.partition }),
      },
    });
    const unfinished = store.leases.unfinishedForWorker(workerId);
    const byId = new Map(unfinished.map((e) => [e.id, e]));
    const actions = reconcileHello({
      reported: msg.executions,
      listed_all: msg.executions.length < HELLO_MAX_EXECUTIONS,
      unfinished: unfinished.flatMap((e) => {
        const task = store.tasks.get(e.task_id);
        const lease = store.leases.lease(e.lease_id);
        if (!task || !lease) return [];
        const code = task.reason?.code;
        return [
          {
            execution_id: e.id,
            phase: e.phase,
            pending_assign:
              e.phase === 'assigned' ? (store.outbox.pendingAssign(workerId, e.id) ?? null) : null,
            lease_epoch: e.lease_epoch,
            task_state: task.state,
            task_reason: typeof code === 'string' ? code : null,
            lease_state: lease.state,
            cards: lease.cards.map((c) => c.index),
          },
        ];
      }),
      master_marks: msg.master_marks,
      card_epochs: msg.card_epochs,
    });
    for (const action of actions)
      held = applyReconcile(deps, workerId, msg.boot_id, action, byId, now) ?? held;
  });
  return held;
}

/** Applies one reconcile decision inside the hello transaction; returns the held cards for hold_cards. */
function applyReconcile(
  deps: BrokerDeps,
  workerId: string,
  bootId: string,
  action: ReconcileAction,
  unfinished: ReadonlyMap<string, Parameters<typeof markExecutionLost>[1]>,
  now: number,
): readonly number[] | undefined {
  const { store } = deps;
  switch (action.kind) {
    case 'ack_outbox_through':
      store.outbox.ackThrough(workerId, action.boot_id, action.seq, now);
      return undefined;
    case 'raise_epoch':
      store.leases.raiseEpoch(workerId, action.index, action.epoch);
      return undefined;
    case 'mark_lost': {
      const e = unfinished.get(action.execution_id);
      if (e) markExecutionLost(deps, e, 'master', action.reason, { worker_id: workerId, boot_id: bootId });
      return undefined;
    }
    case 'resume': {
      const e = unfinished.get(action.execution_id);
      if (e) resumeExecution(deps, e, action.event, action.phase, { worker_id: workerId, boot_id: bootId });
      return undefined;
    }
    case 'query':
      enqueueForWorker(deps, deps.cluster.link, workerId, {
        type: 'query',
        execution_id: action.execution_id,
      });
      return undefined;
    case 'hold_cards':
      return action.cards;
  }
}

/**
 * A sequenced `sample`: the fleet's live view, and the workers table when the card identities changed.
 * A sample whose card list is defective counts as a sampler error. Call inside the hub's transaction;
 * returns whether anything scheduling depends on changed.
 */
export function recordSample(deps: BrokerDeps, workerId: string, msg: Sample, now: number): boolean {
  const samplerError = msg.sampler_error ?? sampleDefect(msg.cards);
  const changed = deps.cluster.fleet.sampled(workerId, msg.cards, samplerError, now, msg.held_cards);
  if (changed && samplerError === null) {
    const known = deps.store.workers.get(workerId)?.cards ?? [];
    const identity = identityOf(msg.cards);
    if (JSON.stringify(known) !== JSON.stringify(identity)) deps.store.workers.setCards(workerId, identity);
  }
  if (changed) deps.store.afterCommit(() => deps.notifier.notify(CARDS_TOPIC));
  return changed;
}

/** A sequenced `probe`: what the qualification interpreter can do on this worker. */
export function recordProbe(deps: BrokerDeps, workerId: string, msg: Probe, now: number): void {
  deps.store.workers.setProbe(workerId, {
    python: msg.python,
    torch_version: msg.torch_version,
    backend: msg.backend,
    error: msg.error,
    probed_at: now,
  });
  deps.logger.info(
    { worker_id: workerId, python: msg.python, torch: msg.torch_version, backend: msg.backend },
    msg.torch_version === null
      ? `worker ${workerId}: ${msg.python} cannot import torch (${msg.error ?? 'no reason given'})`
      : `worker ${workerId}: ${msg.python} has torch ${msg.torch_version} (${msg.backend ?? 'no backend'})`,
  );
}
