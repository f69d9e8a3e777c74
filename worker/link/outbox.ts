import type { Logger } from 'pino';
import { sequenced } from '../../src/contracts/sequencing.js';
import type { WorkerMessage, WorkerSequencedBody } from '../../src/contracts/worker-protocol.js';
import { type Clock, systemClock } from '../../src/platform/clock.js';
import type { LocalStore, OutboxAck, OutboxEntry } from '../store/local-store.js';
import { LogLane } from './log-lane.js';

/**
 * Outgoing sequenced messages (sample, execution, log, output). Every one is written to the local
 * store's outbox first and only then sent, so nothing the worker accepted is lost across reconnects or
 * worker restarts. Sending is a pump over the outbox in append order, with a cursor per session:
 *
 *   1. `startSession` (on welcome): everything at or below the master's `worker_marks` is acknowledged
 *      locally; the cursor goes back to the start, so every other unacknowledged message is resent.
 *   2. `enqueue`: append, then pump. The pump never sends a message before an older unsent one, because
 *      the master drops any seq at or below the highest it processed: out of order would mean lost.
 *   3. `ack` from the master: the entry is acknowledged and kept until pruned. The master acknowledges
 *      every message on its own; the acks of one turn of the event loop are written in one transaction
 *      (`flushAcks`, on setImmediate), or in the transaction of the next message enqueued before that.
 *      An ack not written (the worker died first, or that transaction rolled back) only means that
 *      message is resent: the master drops it as a duplicate (at or below its mark) and acks it again.
 *   4. `endSession` (socket gone): the pump stops; step 1 starts over on the next welcome.
 *
 * The pump pauses while the socket holds more than HIGH_WATER_BYTES unwritten, so a long backlog (or a
 * big output) is paged out of SQLite instead of being copied into memory at once.
 *
 * Log chunks take another road (log-lane.ts): `enqueueLog` queues them without a seq, and the
 * pump moves one fair turn of them into the outbox only when nothing else waits and fewer than
 * LOG_WINDOW_BYTES of log are sent but not acknowledged. The master's acks pace the logs, so a report
 * enqueued during a flood waits behind at most that window, and acknowledged chunks leave the disk at once.
 */

type SequencedMessage = Extract<WorkerMessage, { type: 'sample' | 'execution' | 'log' | 'output' | 'probe' }>;

/** A sequenced message before the outbox gives it its protocol version, boot id and seq. */
export type OutgoingBody = WorkerSequencedBody;

/** Where the pump writes: the connection, or whatever a test puts in its place. */
export interface OutboxTransport {
  /** Sends one message; false when no socket is open. */
  send(text: string): boolean;
  /** Bytes the socket has not written yet. */
  bufferedAmount(): number;
}

const HIGH_WATER_BYTES = 8 * 1024 * 1024;
/**
 * Log bytes sent and not yet acknowledged before the lane waits: what a report may queue behind. At the
 * master's ingest rate (tens of MiB/s on loopback) a few tens of ms; on a 50 ms link it still carries
 * about 20 MiB/s of log.
 */
const LOG_WINDOW_BYTES = 1024 * 1024;
const PAGE_SIZE = 64;
const RETRY_PUMP_MS = 20;
/** Acknowledged messages are kept this long (for debugging a session), then pruned. */
const KEEP_ACKED_MS = 10 * 60_000;
const PRUNE_EVERY_MS = 60_000;

/** The worker's sending side; see the module comment. */
export class OutboxSender {
  private live = false;
  private cursor = 0;
  private pumpTimer: NodeJS.Timeout | undefined;
  private lastPrune = 0;
  private pumpQueued = false;
  private readonly logs: LogLane;
  /** Log messages sent in this session and not yet acknowledged: `boot_id:seq` → bytes. */
  private readonly logsInFlight = new Map<string, number>();
  private logBytesInFlight = 0;
  /** Acknowledgements received and not yet written to the store (step 3). */
  private pendingAcks: OutboxAck[] = [];
  /** Callbacks waiting for one message's acknowledgement (`whenAcked`): `boot_id:seq` → callback. */
  private readonly ackWatch = new Map<string, { boot_id: string; seq: number; fn: () => void }>();
  private ackFlush: NodeJS.Immediate | undefined;

  constructor(
    private readonly store: LocalStore,
    /** This process's boot id: the sequence every new message joins. */
    readonly bootId: string,
    private readonly transport: OutboxTransport,
    private readonly logger: Logger,
    /** When acknowledged messages are old enough to prune (default the system clock). */
    private readonly clock: Clock = systemClock,
  ) {
    this.logs = new LogLane(store);
  }

  /** Appends one message under this boot's next seq and sends it if a session is live. */
  enqueue(body: OutgoingBody): OutboxEntry {
    // Acks waiting for their write join the caller's transaction (usually a report's): one commit less.
    this.flushAcks();
    const entry = this.store.appendOutbox(this.bootId, (seq) => this.stamp(body, seq));
    this.schedulePump();
    return entry;
  }

  /**
   * Like `enqueue`, but first drops every unacknowledged message of the same type, for messages where
   * only the newest matters (samples). A dropped seq is a gap the master never sees, which is harmless:
   * it only compares against the highest seq it processed.
   */
  enqueueLatest(body: OutgoingBody): OutboxEntry {
    const entry = this.store.transaction(() => {
      this.flushAcks();
      this.store.supersedeUnacked(body.type);
      return this.store.appendOutbox(this.bootId, (seq) => this.stamp(body, seq));
    });
    // Superseded samples count as acknowledged, so a worker that never reaches its master prunes too.
    this.maybePrune();
    this.schedulePump();
    return entry;
  }

  /** Queues one log chunk of `executionId` for the log lane (see the module comment). */
  enqueueLog(executionId: string, stream: 'stdout' | 'stderr', offset: number, data: string): void {
    this.logs.queue(executionId, stream, offset, data);
    this.schedulePump();
  }

  /**
   * At an execution's exit, inside the transaction that enqueues its `exited` report (before it): its
   * queued log goes first when small (log-lane.ts `takeAllOf`); a flood's tail keeps its turns.
   */
  enqueueLogsBeforeExit(executionId: string): void {
    for (const body of this.logs.takeAllOf(executionId))
      this.store.appendOutbox(this.bootId, (seq) => this.stamp(body, seq));
  }

  /**
   * Calls `fn` once the master acknowledged the message `entry` (its ack, or a welcome whose marks cover
   * it): "acknowledged" means the master committed what the message changed (src/contracts/sequencing.ts
   * rule 3). Used to start an execution only once the master recorded its acceptance (docs/operations.md "Partitions").
   * `forgetAck` drops the callback.
   */
  whenAcked(entry: { boot_id: string; seq: number }, fn: () => void): void {
    this.ackWatch.set(`${entry.boot_id}:${entry.seq}`, { boot_id: entry.boot_id, seq: entry.seq, fn });
  }

  /** Drops a `whenAcked` callback (the execution will not start after all). */
  forgetAck(entry: { boot_id: string; seq: number }): void {
    this.ackWatch.delete(`${entry.boot_id}:${entry.seq}`);
  }

  private fireAck(key: string): void {
    const watch = this.ackWatch.get(key);
    if (watch === undefined) return;
    this.ackWatch.delete(key);
    watch.fn();
  }

  /** Step 1: the master welcomed us and said what it already has. */
  startSession(workerMarks: ReadonlyArray<{ boot_id: string; seq: number }>): void {
    this.flushAcks();
    for (const [key, watch] of [...this.ackWatch])
      if (workerMarks.some((m) => m.boot_id === watch.boot_id && m.seq >= watch.seq)) this.fireAck(key);
    for (const mark of workerMarks) {
      const n = this.store.ackOutboxThrough(mark.boot_id, mark.seq);
      if (n > 0)
        this.logger.debug({ boot_id: mark.boot_id, seq: mark.seq, n }, 'outbox: master already had these');
    }
    this.cursor = 0;
    this.logsInFlight.clear();
    this.logBytesInFlight = 0;
    this.live = true;
    this.pump();
  }

  /** Step 4: the socket is gone. */
  endSession(): void {
    this.flushAcks();
    this.live = false;
    clearTimeout(this.pumpTimer);
    this.pumpTimer = undefined;
  }

  /**
   * Step 3: the master acknowledged one message. It is written with the other acks of this turn of the
   * event loop, in one transaction; the log window opens at once.
   */
  ack(bootId: string, seq: number): void {
    this.pendingAcks.push({ boot_id: bootId, seq });
    this.ackFlush ??= setImmediate(() => this.flushAcks());
    const key = `${bootId}:${seq}`;
    this.fireAck(key);
    const bytes = this.logsInFlight.get(key);
    if (bytes !== undefined) {
      this.logsInFlight.delete(key);
      this.logBytesInFlight -= bytes;
      this.schedulePump();
    }
  }

  /** Writes the acknowledgements received so far, in one transaction (see step 3). */
  flushAcks(): void {
    clearImmediate(this.ackFlush);
    this.ackFlush = undefined;
    if (this.pendingAcks.length === 0) return;
    const acks = this.pendingAcks;
    this.pendingAcks = [];
    try {
      this.store.ackOutboxMany(acks);
    } catch (err) {
      // The store is closing or broken: those messages are resent and acknowledged again next session.
      this.logger.error({ err: (err as Error)?.message, acks: acks.length }, 'outbox: cannot record acks');
      return;
    }
    this.maybePrune();
  }

  /** Whether any message still waits for its acknowledgement. */
  hasUnacked(): boolean {
    this.flushAcks();
    return this.store.hasUnackedOutbox();
  }

  /** Whether a session is live (welcome received, socket open). */
  isLive(): boolean {
    return this.live;
  }

  private maybePrune(): void {
    const now = this.clock.now();
    if (now - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = now;
    this.store.pruneOutbox(now - KEEP_ACKED_MS);
  }

  private stamp(body: OutgoingBody, seq: number): SequencedMessage {
    return sequenced(body, this.bootId, seq) as SequencedMessage;
  }

  /**
   * Pumps once the current synchronous work is over. `enqueue` is often called inside a caller's
   * transaction: sending from there could put a message on the wire that a rollback then erases, and
   * whose seq would be handed out again for another message, which the master would drop as a duplicate.
   */
  private schedulePump(): void {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    queueMicrotask(() => {
      this.pumpQueued = false;
      this.pump();
    });
  }

  /**
   * Moves one turn of the log lane into the outbox when the window has room; whether it moved any. A
   * full window waits for acks (`ack` pumps again), not for a timer.
   */
  private moveLogTurn(): boolean {
    if (this.logBytesInFlight >= LOG_WINDOW_BYTES || !this.logs.mayHaveTurn()) return false;
    try {
      return this.store.transaction(() => {
        const bodies = this.logs.takeTurn();
        for (const body of bodies) this.store.appendOutbox(this.bootId, (seq) => this.stamp(body, seq));
        return bodies.length > 0;
      });
    } catch (err) {
      // The store is closing or broken: the chunks stay queued (the transaction rolled back).
      this.logger.error({ err: (err as Error)?.message }, 'outbox: cannot move queued log chunks');
      return false;
    }
  }

  private pump(): void {
    if (!this.live || this.pumpTimer !== undefined) return;
    for (;;) {
      if (this.transport.bufferedAmount() > HIGH_WATER_BYTES) {
        this.pumpTimer = setTimeout(() => {
          this.pumpTimer = undefined;
          this.pump();
        }, RETRY_PUMP_MS);
        return;
      }
      let page: ReturnType<LocalStore['listUnackedOutboxAfter']>;
      try {
        page = this.store.listUnackedOutboxAfter(this.cursor, PAGE_SIZE);
      } catch (err) {
        // The store is closing (shutdown) or broken; the next session starts over from the outbox.
        this.logger.error({ err: (err as Error)?.message }, 'outbox: cannot read queued messages');
        return;
      }
      for (const entry of page) {
        // The stored text is the message: sent as it was written, never parsed and serialised again.
        if (!this.transport.send(entry.text)) {
          // The socket closed under us; endSession follows from its close event.
          this.live = false;
          return;
        }
        this.cursor = entry.id;
        if (entry.kind === 'log') {
          this.logsInFlight.set(`${entry.boot_id}:${entry.seq}`, entry.text.length);
          this.logBytesInFlight += entry.text.length;
        }
        if (this.transport.bufferedAmount() > HIGH_WATER_BYTES) break;
      }
      // A short page sent whole was the end of the outbox (sending appends nothing): no need to read an
      // empty page to know it. Then the log lane's turn, if it has one.
      const sentAll = page.length === 0 || this.cursor === page[page.length - 1]!.id;
      if (sentAll && page.length < PAGE_SIZE && !this.moveLogTurn()) return;
    }
  }
}
