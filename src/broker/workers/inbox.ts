import { BrokerError } from '../../contracts/errors.js';
import {
  type InvalidMessage,
  receiveSequenced,
  repliesToInvalid,
  type SequenceRef,
} from '../../contracts/sequencing.js';
import { type MasterMessage, PROTOCOL_VERSION, type WorkerMessage } from '../../contracts/worker-protocol.js';
import type { BrokerDeps } from '../deps.js';
import type { Fleet } from '../fleet.js';
import { handleExecutionReport, handleLogChunk, handleOutputUpload } from './reports.js';
import { recordProbe, recordSample } from './session.js';

/**
 * What a worker's messages mean on the master, once its session has said hello (live-sessions.ts keeps
 * the session and the hello, ingest.ts batches the messages; docs/worker-protocol.md). For each message
 * after hello:
 *  1. the worker is seen: the fleet's liveness now, its stored `last_seen` at most every
 *     `TOUCH_WRITE_INTERVAL_MS` (a write per message would be a write per sample);
 *  2. `ack` acknowledges the master's outbox up to a seq; `error` is logged, and an `assign` the worker
 *     could not read (INVALID_MESSAGE naming its seq: a worker older than the plan's fields) is rejected
 *     as if the worker had said so (`unreadableAssign`): its task fails SETUP_FAILED saying why, instead
 *     of waiting ASSIGNED forever;
 *  3. a sequenced message (sample, probe, execution, log, output) is applied at most once
 *     (src/contracts/sequencing.ts): the mark raised in the effect's transaction, logs and outputs
 *     refused below the free-space floor, a refusal (BrokerError) answered and acknowledged, `UNAVAILABLE`
 *     rolled back with the mark and thrown unacknowledged for the hub to answer.
 * A frame that does not parse is answered here too, its poison placed in the sequence after hello.
 */

/** A sequenced message: one that carries a place in the worker's sequence. */
export type SequencedWorkerMessage = Exclude<WorkerMessage, { type: 'hello' | 'ack' | 'error' }>;

/** How often a worker's `last_seen` is written while it keeps sending (the fleet is told every time). */
export const TOUCH_WRITE_INTERVAL_MS = 5000;

/** What the hub does after a message: the replies to send, and whether a scheduling pass may help. */
export interface InboxAnswer {
  replies: MasterMessage[];
  requestPass: boolean;
}

/** The master's side of the worker's messages after hello; one per hub (it remembers touch writes). */
export class WorkerInbox {
  private readonly lastTouchWrite = new Map<string, number>();

  constructor(
    private readonly deps: BrokerDeps,
    private readonly fleet: Fleet,
  ) {}

  /** Step 1: the worker sent something at `now`. */
  touched(workerId: string, now: number): void {
    this.fleet.touched(workerId, now);
    if ((this.lastTouchWrite.get(workerId) ?? 0) + TOUCH_WRITE_INTERVAL_MS < now) {
      this.lastTouchWrite.set(workerId, now);
      this.deps.store.workers.touch(workerId, now);
    }
  }

  /** Steps 2 and 3: an `ack`, an `error` or a sequenced message from a worker that said hello. */
  receive(workerId: string, msg: Exclude<WorkerMessage, { type: 'hello' }>, now: number): InboxAnswer {
    switch (msg.type) {
      case 'ack':
        this.deps.store.outbox.ack(workerId, msg.boot_id, msg.seq, now);
        return { replies: [], requestPass: false };
      case 'error': {
        this.deps.logger.warn(
          { worker_id: workerId, code: msg.code, message: msg.message, ref_seq: msg.ref_seq },
          'worker reported an error',
        );
        const rejected =
          msg.code === 'INVALID_MESSAGE' && msg.ref_seq !== undefined
            ? this.unreadableAssign(workerId, msg.ref_seq, msg.message)
            : false;
        return { replies: [], requestPass: rejected };
      }
      default:
        return this.sequenced(workerId, msg, now);
    }
  }

  /**
   * The worker could not read our message at `seq` (this master boot's sequence). When it was an `assign`
   * whose execution the worker never accepted, the execution is rejected exactly as a worker's own
   * `rejected` report would (task FAILED SETUP_FAILED, lease released: nothing ran), with a detail that
   * says why; true when it was. Anything else is only logged.
   */
  private unreadableAssign(workerId: string, seq: number, why: string): boolean {
    const { store } = this.deps;
    const sent = store.outbox.message(workerId, this.deps.cluster.link.bootId, seq);
    if (sent?.type !== 'assign') return false;
    const { plan } = sent;
    if (store.leases.execution(plan.execution_id)?.phase !== 'assigned') return false;
    try {
      handleExecutionReport(this.deps, workerId, {
        type: 'execution',
        protocol_version: PROTOCOL_VERSION,
        boot_id: `unread-${seq}`,
        seq,
        execution_id: plan.execution_id,
        task_id: plan.task_id,
        lease_epoch: plan.lease_epoch,
        phase: 'rejected',
        failure_reason: 'SETUP_FAILED',
        detail: `worker ${workerId} could not read the plan (${why.slice(0, 2000)}): it is older than this master or the spec's fields; upgrade the worker (workers before the master), then submit again`,
      });
      return true;
    } catch (err) {
      this.deps.logger.warn({ worker_id: workerId, err }, 'could not reject an unreadable assign');
      return false;
    }
  }

  /**
   * A frame that does not parse: its replies. A poison message is placed in the sequence (its mark
   * raised) only once the session said hello (`acceptsPoison`); that write may throw UNAVAILABLE.
   */
  invalid(workerId: string, bad: InvalidMessage, acceptsPoison: boolean, now: number): MasterMessage[] {
    return repliesToInvalid(bad, {
      acceptsPoison,
      recordPoison: (ref) => this.deps.store.workers.raiseMark(workerId, ref.boot_id, ref.seq, now),
    });
  }

  /**
   * Step 3: applies one sequenced message at most once: the raised mark and the effect commit together,
   * then error (if refused) and ack. A refusal (BrokerError) rolls back the effect but not the mark: the
   * message is processed and not retried. `UNAVAILABLE` (the store cannot write) is not a refusal: it
   * rolls back the mark too and escapes unacknowledged (rule 5), for the hub to answer.
   */
  private sequenced(workerId: string, msg: SequencedWorkerMessage, now: number): InboxAnswer {
    const { deps } = this;
    const { store } = deps;
    // Whether what this message changed may change a scheduling pass's decision.
    let reschedule = false;
    const received = receiveSequenced<BrokerError>(msg, {
      transaction: (fn) => store.transaction(fn),
      marks: {
        raiseAbove: (bootId, seq) => {
          if (seq <= store.workers.mark(workerId, bootId)) return false;
          store.workers.raiseMark(workerId, bootId, seq, now);
          return true;
        },
      },
      apply: () => {
        try {
          // An illegal execution report is refused without rolling back what the refusal changed.
          return store.transaction(() => {
            // Logs and outputs are what fills a disk: refused below the free-space floor.
            if (msg.type === 'log' || msg.type === 'output')
              deps.storage?.assertAcceptsGrowth(`worker ${msg.type} message`);
            switch (msg.type) {
              case 'sample':
                reschedule = recordSample(deps, workerId, msg, now);
                return null;
              case 'execution': {
                const outcome = handleExecutionReport(deps, workerId, msg);
                reschedule = outcome.reschedule;
                return outcome.answer;
              }
              case 'log':
                handleLogChunk(deps, workerId, msg);
                return null;
              case 'output':
                handleOutputUpload(deps, workerId, msg);
                return null;
              case 'probe':
                recordProbe(deps, workerId, msg, now);
                return null;
            }
          });
        } catch (err) {
          // Out of space is not a refusal of the message: roll back (the mark too), do not acknowledge.
          if (!(err instanceof BrokerError) || err.code === 'UNAVAILABLE') throw err;
          return err;
        }
      },
    });
    if (received.kind === 'applied' && received.refusal !== null)
      deps.logger.warn(
        { worker_id: workerId, code: received.refusal.code, message: received.refusal.message },
        'worker message refused',
      );
    // Set only by an effect that returned (a thrown refusal or a duplicate leaves it false); an
    // illegal report's answer comes with committed moves (lease quarantined), which do count.
    return { replies: received.replies, requestPass: reschedule };
  }
}

/** Where a parsed worker message sits in the worker's sequence; null for hello, ack and error. */
export function sequenceRefOf(msg: WorkerMessage): SequenceRef | null {
  return msg.type === 'hello' || msg.type === 'ack' || msg.type === 'error' ? null : msg;
}
