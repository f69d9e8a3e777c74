import type { BrokerError } from '../../contracts/errors.js';
import { parseMessage, type SequenceRef } from '../../contracts/sequencing.js';
import {
  MAX_MESSAGE_BYTES,
  type MasterMessage,
  type WorkerMessage,
  WorkerMessageSchema,
} from '../../contracts/worker-protocol.js';
import type { BrokerDeps } from '../deps.js';
import { storageRefusal } from '../storage-refusal.js';
import { sequenceRefOf } from './inbox.js';
import { CLOSE_UNAVAILABLE, type LiveSession, type WorkerSessions } from './live-sessions.js';

/**
 * How a worker session's frames are taken in (ADR 0034): queued as they arrive, handled
 * together once the turn's I/O callbacks ran, the messages after hello applied in batches (one
 * transaction, a savepoint each, acknowledged only once committed), a session paused (TCP holds the
 * worker back) when its queue grows or its turn ran long. And what is refused: nothing a worker sends
 * can crash the master (a bad message gets an `error` reply and is logged); while the store cannot write
 * (out of disk space; ADR 0016) a message is neither applied nor acknowledged:
 * `error UNAVAILABLE`, close 4003, the worker resends it later; a hello is welcomed anyway and stored
 * before anything else from its session (`retryPendingHellos` once storage recovers).
 */

/**
 * A session's messages are handled for at most about this long before its socket is paused until the
 * event loop has run other work (docs/performance.md "Noisy neighbours"): a worker streaming logs as fast as the link allows must
 * not starve HTTP requests or other workers.
 */
export const INGEST_SLICE_MS = 10;

/**
 * At most this many of a session's messages are applied in one transaction (one commit per
 * report was a third of the master's CPU per task). Each still has its own savepoint, and nothing is
 * acknowledged before the batch committed (docs/decisions/0034-report-batches.md).
 */
export const MAX_BATCH_MESSAGES = 64;

/** A session's queue of unhandled frames holding more characters than this pauses its socket. */
export const QUEUE_PAUSE_CHARS = MAX_MESSAGE_BYTES;

/** The ingest of every session's frames; one per master, over its live sessions. */
export class WorkerIngest {
  constructor(
    private readonly deps: BrokerDeps,
    private readonly sessions: WorkerSessions,
    /** Asks the scheduler for a pass (the gateway forwards it to its hooks). */
    private readonly requestPass: () => void,
  ) {}

  /**
   * A frame arrived (`null`: a binary one). Frames are queued and handled together once this turn's I/O
   * callbacks have run (`drain`, on setImmediate): the messages of every read of the socket in this poll
   * phase share one transaction. In the `tasks` bench that is ~2.2 transactions per task where handling
   * each read apart (process.nextTick) made ~3.8 (ADR 0034, amendment); a report waits at most for the
   * callbacks already due.
   */
  received(s: LiveSession, text: string | null): void {
    if (s.dead) return;
    s.queue.push(text);
    s.queuedChars += text?.length ?? 0;
    if (s.queuedChars > QUEUE_PAUSE_CHARS && !s.ws.isPaused) s.ws.pause();
    if (!s.drainScheduled) {
      s.drainScheduled = true;
      // After this poll phase: the frames of later reads of the socket in it join the same batch; no
      // timer is waited for (the ack leaves in the same turn of the event loop).
      setImmediate(() => this.drain(s));
    }
  }

  /** The socket closed: what arrived before the close is handled before the worker is taken for disconnected. */
  closed(s: LiveSession): void {
    this.drain(s);
    this.sessions.closed(s);
  }

  /**
   * Applies the hellos the store could not take before (called when storage recovers); a session whose
   * hello still fails is closed like any refused message.
   */
  retryPendingHellos(): void {
    for (const s of this.sessions.all()) {
      if (s.pendingHello === null || s.dead) continue;
      try {
        this.sessions.applyPendingHello(s);
      } catch (err) {
        const unavailable = this.refusal(err);
        if (!unavailable) throw err;
        this.storageRefused(s, unavailable, undefined);
      }
    }
  }

  /**
   * Handles the session's queued frames in order: consecutive messages of a session that said hello
   * in batches (`applyBatch`), anything else (hello, a frame that does not parse, a session whose hello
   * is not stored) alone as before. After INGEST_SLICE_MS the socket waits (TCP holds the worker back)
   * until the event loop has run the requests and timers that were waiting (docs/performance.md "Noisy neighbours").
   */
  private drain(s: LiveSession): void {
    s.drainScheduled = false;
    const started = performance.now();
    while (s.queue.length > 0 && !s.dead) {
      if (this.applyBatch(s) === 0) this.handleMessage(s, this.dequeue(s));
      if (s.queue.length > 0 && performance.now() - started >= INGEST_SLICE_MS) {
        if (!s.ws.isPaused) s.ws.pause();
        s.drainScheduled = true;
        setImmediate(() => this.drain(s));
        return;
      }
    }
    if (s.dead) {
      s.queue = [];
      s.queuedChars = 0;
    }
    if (s.ws.isPaused) s.ws.resume();
  }

  private dequeue(s: LiveSession): string | null {
    const text = s.queue.shift() ?? null;
    s.queuedChars -= text?.length ?? 0;
    return text;
  }

  /**
   * Applies the longest run (at most MAX_BATCH_MESSAGES) of queued messages that need no hello handling
   * in ONE transaction, each in its own savepoint, and sends their replies (acks) only once it
   * committed: "acknowledged" still means "committed" (rule 3 of src/contracts/sequencing.ts). A
   * message that fails unexpectedly rolls back its own savepoint only; the ones before it commit and
   * are acknowledged, it and everything after it are not (rule 5: the session is dropped as before).
   * If the commit itself fails (out of space), nothing of the batch is acknowledged. Returns how many
   * messages it took from the queue (0: the first one must be handled alone).
   */
  private applyBatch(s: LiveSession): number {
    const batch: Array<{ msg: Exclude<WorkerMessage, { type: 'hello' }> }> = [];
    while (batch.length < MAX_BATCH_MESSAGES && s.queue.length > 0) {
      if (s.bootId === null || s.pendingHello !== null) break;
      const text = s.queue[0]!;
      const parsed = parseMessage(WorkerMessageSchema, text);
      if (!parsed.ok || parsed.message.type === 'hello') break;
      this.dequeue(s);
      batch.push({ msg: parsed.message });
    }
    if (batch.length === 0) return 0;
    const replies: MasterMessage[] = [];
    let requestPass = false;
    let failed: { err: unknown; msg: WorkerMessage } | null = null;
    try {
      this.deps.store.transaction(() => {
        for (const { msg } of batch) {
          try {
            const answer = this.deps.store.transaction(() => this.receive(s, msg));
            replies.push(...answer.replies);
            requestPass ||= answer.requestPass;
          } catch (err) {
            failed = { err, msg };
            return;
          }
        }
      });
    } catch (err) {
      // The commit failed: nothing of the batch was applied or acknowledged.
      const first = batch[0]!.msg;
      this.messageFailed(s, err, sequenceRefOf(first), first.type);
      return batch.length;
    }
    this.sessions.replyAll(s, replies);
    if (requestPass) this.requestPass();
    if (failed !== null) {
      const { err, msg } = failed as { err: unknown; msg: WorkerMessage };
      this.messageFailed(s, err, sequenceRefOf(msg), msg.type);
    }
    return batch.length;
  }

  /** One message after hello: the worker is seen, the inbox applies it; its replies are returned. */
  private receive(s: LiveSession, msg: Exclude<WorkerMessage, { type: 'hello' }>) {
    const now = this.deps.clock.now();
    this.sessions.inbox.touched(s.workerId, now);
    return this.sessions.inbox.receive(s.workerId, msg, now);
  }

  /** One frame handled alone (live-sessions.ts `dispatch`, or `refuseInvalid` for one that does not parse). */
  private handleMessage(s: LiveSession, text: string | null): void {
    const parsed = parseMessage(WorkerMessageSchema, text);
    try {
      if (parsed.ok) this.sessions.dispatch(s, parsed.message);
      else this.sessions.refuseInvalid(s, text, parsed.invalid);
    } catch (err) {
      const ref = parsed.ok ? sequenceRefOf(parsed.message) : parsed.invalid.poison;
      this.messageFailed(s, err, ref, parsed.ok ? parsed.message.type : parsed.invalid.type);
    }
  }

  /** `err` as the UNAVAILABLE the store refused a write with, or null (src/broker/storage-refusal.ts). */
  private refusal(err: unknown): BrokerError | null {
    return storageRefusal(err, (detail) => this.deps.store.onWriteFailure(detail));
  }

  /**
   * A message that could not be processed (`ref`: its place in the sequence, if any): refused
   * UNAVAILABLE while the store cannot write, else answered INTERNAL; either way nothing more is read
   * from the session.
   */
  private messageFailed(s: LiveSession, err: unknown, ref: SequenceRef | null, type: string | null): void {
    const unavailable = this.refusal(err);
    if (unavailable) {
      this.storageRefused(s, unavailable, ref?.seq);
      return;
    }
    this.deps.logger.error({ err, worker_id: s.workerId, type }, 'worker message failed');
    this.sessions.reply(s, {
      type: 'error',
      code: 'INTERNAL',
      message: 'the master could not process this message; it will be retried',
    });
    // Nothing was applied or acknowledged. Stop reading this socket: a later message must not raise
    // the mark past this one. The worker reconnects and resends everything unacknowledged, in order.
    s.dead = true;
    s.ws.terminate();
  }

  /**
   * The store cannot take a message now (ADR 0016): it was neither applied nor acknowledged (the
   * sequencing module's rule 5: the mark rolled back with the effect), so it stays in the worker's
   * outbox. Nothing after it may be processed on this session, so the session is closed — with 4003, on
   * which the worker waits longer before it redials and resends (worker/link/connection.ts).
   */
  private storageRefused(s: LiveSession, err: BrokerError, seq: number | undefined): void {
    this.deps.logger.warn(
      { worker_id: s.workerId, ref_seq: seq, message: err.message },
      'worker message not stored: master storage unavailable; the worker resends it later',
    );
    this.sessions.reply(s, {
      type: 'error',
      code: 'UNAVAILABLE',
      message: err.message,
      ...(seq === undefined ? {} : { ref_seq: seq }),
    });
    s.dead = true;
    s.ws.close(CLOSE_UNAVAILABLE, 'master storage unavailable');
  }
}
