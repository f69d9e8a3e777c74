import type { Logger } from 'pino';
import {
  parseMessage,
  type Reply,
  receiveSequenced,
  repliesToInvalid,
} from '../../src/contracts/sequencing.js';
import type { MasterMessage, WorkerMessage } from '../../src/contracts/worker-protocol.js';
import { MasterMessageSchema } from '../../src/contracts/worker-protocol.js';
import type { ExecutionManager, Handled } from '../executions/manager.js';
import type { OutboxSender } from '../link/outbox.js';
import type { SamplingLoop } from '../samplers/loop.js';
import type { LocalStore } from '../store/local-store.js';
import { probeInterpreter } from './interpreter-probe.js';

/**
 * What the worker does with each message from the master, per session (opened → hello → welcome →
 * live → closed):
 *   1. parse; an invalid message gets a typed refusal, never a crash, and a poison sequenced one is
 *      acknowledged (its mark raised) so that the master does not resend it for ever;
 *   2. `welcome`: the sample interval, the outbox resend from `worker_marks`, the interpreter probe;
 *      `ack` and `error` go to the outbox and the log;
 *   3. `assign`, `cancel`, `query`: applied at most once per (master boot, seq), acknowledged either
 *      way (src/contracts/sequencing.ts); neither processed nor acknowledged while stopping;
 *   4. a message that fails for an unexpected reason drops the session, and what is still buffered on
 *      it is ignored, so no later message raises the master's mark past the failed one; after the
 *      reconnect the master resends everything unacknowledged, in order.
 */

/** The session's socket, as the inbox uses it. */
export interface InboxLink {
  send(message: WorkerMessage): void;
  resetBackoff(): void;
  drop(reason: string): void;
}

/** What the inbox needs. */
export interface InboxDeps {
  readonly workerId: string;
  readonly store: LocalStore;
  readonly outbox: OutboxSender;
  readonly executions: ExecutionManager;
  readonly sampling: Pick<SamplingLoop, 'setInterval'>;
  readonly logger: Logger;
  readonly link: InboxLink;
  /** The hello to send when a socket opens. */
  readonly hello: () => WorkerMessage;
  /** How long after opening a socket the welcome may take before it is redialled. */
  readonly welcomeTimeoutMs: number;
}

/** The master's messages, one session at a time; see the module comment. */
export class MasterInbox {
  private welcomedNow = false;
  private welcomeTimer: NodeJS.Timeout | undefined;
  private dropping = false;
  private stopping = false;
  private probing = false;
  private readonly masterMarks;

  constructor(private readonly deps: InboxDeps) {
    this.masterMarks = {
      raiseAbove: (bootId: string, seq: number) => deps.store.raiseMasterMark(bootId, seq),
    };
  }

  /** Whether this session's welcome has come. */
  get welcomed(): boolean {
    return this.welcomedNow;
  }

  /** A socket opened: hello, and the welcome's deadline. */
  opened(): void {
    this.dropping = false;
    this.deps.link.send(this.deps.hello());
    this.welcomeTimer = setTimeout(
      () => this.deps.link.drop('no welcome from the master'),
      this.deps.welcomeTimeoutMs,
    );
  }

  /** The socket closed. */
  closed(): void {
    clearTimeout(this.welcomeTimer);
    this.welcomedNow = false;
    this.deps.outbox.endSession();
  }

  /** The worker is stopping: sequenced messages are no longer processed, nor probe results queued. */
  stop(): void {
    this.stopping = true;
  }

  /** The last step of a clean stop: no welcome deadline is left running. */
  dispose(): void {
    clearTimeout(this.welcomeTimer);
  }

  /** One text frame from the master. */
  receive(text: string): void {
    if (this.dropping) return;
    const log = this.deps.logger;
    const parsed = parseMessage(MasterMessageSchema, text);
    if (!parsed.ok) {
      const bad = parsed.invalid;
      log.warn(
        { type: bad.type, seq: bad.poison?.seq ?? null, why: bad.message },
        'worker: invalid message from the master',
      );
      try {
        this.sendReplies(
          repliesToInvalid(bad, {
            acceptsPoison: true,
            recordPoison: (ref) => this.deps.store.raiseMasterMark(ref.boot_id, ref.seq),
          }),
        );
      } catch (err) {
        log.error({ err: (err as Error)?.message }, 'worker: could not record an invalid message');
      }
      return;
    }
    const msg = parsed.message;
    try {
      switch (msg.type) {
        case 'welcome':
          this.onWelcome(msg);
          break;
        case 'ack':
          this.deps.outbox.ack(msg.boot_id, msg.seq);
          break;
        case 'error':
          log.warn(
            { code: msg.code, ref_seq: msg.ref_seq, message: msg.message },
            'worker: error from the master',
          );
          // A refused `accepted` report: the master did not record the acceptance, so it never starts.
          // UNAVAILABLE and INTERNAL are not refusals: the message was not processed and is resent.
          if (msg.ref_seq !== undefined && msg.code !== 'UNAVAILABLE' && msg.code !== 'INTERNAL')
            this.deps.executions.acceptanceRefused(this.deps.outbox.bootId, msg.ref_seq, msg.message);
          break;
        default:
          this.onSequenced(msg);
      }
    } catch (err) {
      this.failed(msg, err);
    }
  }

  private onWelcome(msg: Extract<MasterMessage, { type: 'welcome' }>): void {
    const { logger: log, link, outbox } = this.deps;
    clearTimeout(this.welcomeTimer);
    if (msg.worker_id !== this.deps.workerId)
      log.warn({ master_says: msg.worker_id }, 'worker: the master knows this worker under another id');
    this.deps.sampling.setInterval(msg.sample_interval_ms);
    this.welcomedNow = true;
    link.resetBackoff();
    log.info(
      { master_boot_id: msg.master_boot_id, sample_interval_ms: msg.sample_interval_ms },
      'worker: welcomed by the master',
    );
    if (msg.max_log_bytes_per_task !== undefined) this.deps.executions.setLogCap(msg.max_log_bytes_per_task);
    outbox.startSession(msg.worker_marks);
    if (msg.qualification_python !== undefined) this.probeOnce(msg.qualification_python);
  }

  /**
   * A hello makes the master forget the previous answer, so every session probes again (torch may have
   * been installed meanwhile); one probe at a time. The report sits in the outbox like any message, so
   * a session that drops before the ack resends it.
   */
  private probeOnce(python: string): void {
    if (this.probing) return; // its answer is sent after this welcome's hello, so it still counts
    this.probing = true;
    void probeInterpreter(python).then((result) => {
      this.probing = false;
      if (this.stopping) return;
      this.deps.logger.info(result, 'worker: qualification interpreter probed');
      this.deps.outbox.enqueueLatest({ type: 'probe', ...result });
    });
  }

  /** assign, cancel and query: applied at most once per (master boot, seq); see src/contracts/sequencing.ts. */
  private onSequenced(msg: Extract<MasterMessage, { type: 'assign' | 'cancel' | 'query' }>): void {
    // Neither processed nor acknowledged while stopping: the master resends it to the next session.
    if (this.stopping) return;
    const { store, executions, logger: log } = this.deps;
    let after: (() => void) | undefined;
    const received = receiveSequenced(msg, {
      transaction: (fn) => store.transaction(fn),
      marks: this.masterMarks,
      apply: () => {
        const handled: Handled =
          msg.type === 'assign'
            ? executions.handleAssign(msg)
            : msg.type === 'cancel'
              ? executions.handleCancel(msg)
              : executions.handleQuery(msg);
        after = handled.after;
        return handled.error ?? null;
      },
    });
    if (received.kind === 'duplicate')
      log.debug({ type: msg.type, boot_id: msg.boot_id, seq: msg.seq }, 'worker: duplicate from the master');
    else if (received.refusal !== null)
      log.warn({ type: msg.type, seq: msg.seq, ...received.refusal }, 'worker: master message refused');
    this.sendReplies(received.replies);
    after?.();
  }

  /**
   * A bug or a broken store must not take the worker down. Nothing was acknowledged: drop the session
   * so that the master resends this message (and everything after it) on the next one.
   */
  private failed(msg: MasterMessage, err: unknown): void {
    this.deps.logger.error(
      { err: (err as Error)?.stack ?? String(err), type: msg.type },
      'worker: message handling failed',
    );
    this.deps.link.send({
      type: 'error',
      code: 'INTERNAL',
      message: `worker could not process ${msg.type}: ${(err as Error)?.message ?? String(err)}`.slice(
        0,
        4096,
      ),
      ...('seq' in msg ? { ref_seq: msg.seq } : {}),
    });
    if ('seq' in msg) {
      this.dropping = true;
      this.deps.link.drop(`could not process ${msg.type} seq ${msg.seq}`);
    }
  }

  private sendReplies(replies: readonly Reply[]): void {
    for (const r of replies) this.deps.link.send(r);
  }
}
