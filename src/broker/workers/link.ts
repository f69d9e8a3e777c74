import { sequenced } from '../../contracts/sequencing.js';
import type { MasterSequencedBody } from '../../contracts/worker-protocol.js';
import type { BrokerDeps } from '../deps.js';

/**
 * How use cases reach workers: they append a message to the durable outbox inside their transaction;
 * once it commits, the hub is asked to flush that worker's outbox over its live session (if any).
 * A message is therefore sent only if the decision that caused it committed, and never lost if the
 * session is down: it goes out on the next `hello`.
 */
export interface WorkerLink {
  /** This master process's boot id: the sequence space of its outgoing messages. */
  readonly bootId: string;
  /** Sends whatever the worker's outbox holds that this session has not sent yet. */
  flush(workerId: string): void;
}

/** Appends a sequenced message for a worker inside the current transaction. */
export function enqueueForWorker(
  deps: Pick<BrokerDeps, 'store' | 'clock'>,
  link: WorkerLink,
  workerId: string,
  message: MasterSequencedBody,
): number {
  const entry = deps.store.outbox.append(
    workerId,
    link.bootId,
    (seq) => sequenced(message, link.bootId, seq),
    deps.clock.now(),
  );
  deps.store.afterCommit(() => link.flush(workerId));
  return entry.seq;
}
