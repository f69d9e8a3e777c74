import { sequenced } from '../../contracts/sequencing.js';
import type { MasterSequencedBody } from '../../contracts/worker-protocol.js';
import type { BrokerDeps } from '../deps.js';
import type { WorkerLink } from '../ports.js';

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
