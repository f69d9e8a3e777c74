import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { type WebSocket, WebSocketServer } from 'ws';
import type { BrokerDeps } from '../broker/deps.js';
import type { Fleet } from '../broker/fleet.js';
import type { WorkerLink } from '../broker/ports.js';
import { authenticate, bearerToken } from '../broker/principals.js';
import { CARDS_TOPIC } from '../broker/topics.js';
import { sequenceRefOf, WorkerInbox } from '../broker/workers/inbox.js';
import { acceptHello, storeHello } from '../broker/workers/session.js';
import { BrokerError } from '../contracts/errors.js';
import { WORKER_CONNECT_PATH } from '../contracts/paths.js';
import { type InvalidMessage, parseMessage, type SequenceRef } from '../contracts/sequencing.js';
import {
  MAX_MESSAGE_BYTES,
  type MasterMessage,
  PROTOCOL_VERSION,
  WORKER_ID_RULE,
  WorkerIdSchema,
  type WorkerMessage,
  WorkerMessageSchema,
} from '../contracts/worker-protocol.js';
import { asStorageUnavailable } from '../store/storage-errors.js';

type HelloMessage = Extract<WorkerMessage, { type: 'hello' }>;

/**
 * The worker hub (docs/worker-protocol.md; docs/architecture.md "The hub and the reconcile use case"): one WSS session
 * per worker on the master's port. An edge: it authenticates the upgrade with a worker token bound to
 * one worker id, parses frames, checks and answers the hello (hello → acceptHello), hands every later
 * message to the inbox (src/broker/workers/inbox.ts: what a message means — touch, ack, the sequencing
 * rules with their marks, the growth gate, the use case per type), sends the replies, and flushes the
 * durable outbox. A newer session for the same worker replaces the older one (deterministic: newest wins, the
 * old socket is closed with 4000).
 * Nothing a worker sends can crash the master: a bad message gets an `error` reply and is logged.
 * While the store cannot write (out of disk space; issue 10, row 4, ADR 0016) a message is neither
 * applied nor acknowledged: `error UNAVAILABLE`, close 4003, the worker resends it later; a hello is
 * welcomed anyway and stored before anything else from its session.
 */

interface Session {
  ws: WebSocket;
  workerId: string;
  /** The worker process's boot id from hello; null until hello. */
  bootId: string | null;
  /** Highest outbox row id sent on this session. */
  sentUpTo: number;
  /** The principal whose token opened the session; re-checked so a revoked token loses its session. */
  principalId: string;
  /** Set once processing failed unexpectedly: the socket is being torn down and nothing more is read. */
  dead: boolean;
  /**
   * A hello whose writes (worker row, reconcile, audit) the store could not take (out of space): the
   * session was welcomed anyway, so the worker stays online and its tasks are not taken for lost, and
   * the writes are applied before anything else from this session, or when storage recovers.
   */
  pendingHello: HelloMessage | null;
  /** Frames received and not yet handled, oldest first (handled together, see `drain`). */
  queue: Array<string | null>;
  /** Characters in `queue`: past QUEUE_PAUSE_CHARS the socket is paused until it drained. */
  queuedChars: number;
  /** Whether a `drain` is scheduled. */
  drainScheduled: boolean;
}

/**
 * A session's messages are handled for at most about this long before its socket is paused until the
 * event loop has run other work (issue 21): a worker streaming logs as fast as the link allows must
 * not starve HTTP requests or other workers.
 */
export const INGEST_SLICE_MS = 10;

/**
 * At most this many of a session's messages are applied in one transaction (issue 21: one commit per
 * report was a third of the master's CPU per task). Each still has its own savepoint, and nothing is
 * acknowledged before the batch committed (docs/decisions/0034-report-batches.md).
 */
export const MAX_BATCH_MESSAGES = 64;

/** A session's queue of unhandled frames holding more characters than this pauses its socket. */
export const QUEUE_PAUSE_CHARS = MAX_MESSAGE_BYTES;

/** Close codes the hub uses. */
export const CLOSE_REPLACED = 4000;
export const CLOSE_PROTOCOL = 4002;
export const CLOSE_REVOKED = 4001;
export const CLOSE_INTERNAL = 1011;
/**
 * The master's store cannot take the worker's message now (out of disk space): nothing was applied or
 * acknowledged; the worker redials after a longer delay and resends from its outbox.
 */
export const CLOSE_UNAVAILABLE = 4003;

/** Hooks the hub calls on the scheduler. */
export interface HubHooks {
  requestPass(): void;
}

/** The hub. Implements the WorkerLink the broker uses to reach workers. */
export class WorkerHub implements WorkerLink {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES });
  private readonly sessions = new Map<string, Session>();
  private readonly inbox: WorkerInbox;
  hooks: HubHooks = { requestPass: () => {} };

  constructor(
    private readonly deps: BrokerDeps,
    private readonly fleet: Fleet,
    readonly bootId: string,
  ) {
    this.inbox = new WorkerInbox(deps, fleet);
  }

  /** Attaches the upgrade handler to the app's server and closes sessions before the app closes. */
  attach(app: FastifyInstance): void {
    app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.upgrade(req, socket, head),
    );
    app.addHook('preClose', async () => {
      for (const s of this.sessions.values()) s.ws.close(1001, 'master shutting down');
      this.wss.close();
    });
  }

  /** Ids of workers with an open session. */
  connectedWorkers(): string[] {
    return [...this.sessions.keys()];
  }

  /** Sends the worker's unsent outbox entries over its session, in order. */
  flush(workerId: string): void {
    const s = this.sessions.get(workerId);
    if (!s || s.bootId === null || s.ws.readyState !== s.ws.OPEN) return;
    for (const entry of this.deps.store.outbox.unacked(workerId)) {
      if (entry.id <= s.sentUpTo) continue;
      s.ws.send(JSON.stringify(entry.body));
      s.sentUpTo = entry.id;
    }
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const path = (req.url ?? '').split('?')[0];
    if (path !== WORKER_CONNECT_PATH) {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    let workerId: string;
    let principalId: string;
    try {
      const principal = authenticate(this.deps, bearerToken(req.headers.authorization));
      if (!principal.roles.includes('worker') || !principal.worker_id)
        throw new BrokerError(
          'FORBIDDEN',
          'not a worker token',
          'Create one with --role worker --worker-id ID.',
        );
      workerId = principal.worker_id;
      principalId = principal.id;
    } catch (err) {
      const status =
        err instanceof BrokerError && err.code === 'FORBIDDEN' ? '403 Forbidden' : '401 Unauthorized';
      socket.end(
        `HTTP/1.1 ${status}\r\nConnection: close\r\nWWW-Authenticate: Bearer\r\nContent-Length: 0\r\n\r\n`,
      );
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.open(ws, workerId, principalId));
  }

  private open(ws: WebSocket, workerId: string, principalId: string): void {
    const old = this.sessions.get(workerId);
    if (old) old.ws.close(CLOSE_REPLACED, 'replaced by a newer session');
    const session: Session = {
      ws,
      workerId,
      bootId: null,
      sentUpTo: 0,
      principalId,
      dead: false,
      pendingHello: null,
      queue: [],
      queuedChars: 0,
      drainScheduled: false,
    };
    this.sessions.set(workerId, session);
    ws.on('message', (data, isBinary) => this.onMessage(session, isBinary ? null : data.toString()));
    ws.on('close', () => {
      // What arrived before the close is handled before the worker is taken for disconnected.
      this.drain(session);
      if (this.sessions.get(workerId) === session) {
        this.sessions.delete(workerId);
        this.fleet.disconnected(workerId, session.bootId, this.deps.clock.now());
        this.deps.notifier.notify(CARDS_TOPIC);
      }
    });
    ws.on('error', (err) => this.deps.logger.warn({ err, worker_id: workerId }, 'worker socket error'));
  }

  private reply(s: Session, body: MasterMessage): void {
    if (s.ws.readyState === s.ws.OPEN) s.ws.send(JSON.stringify(body));
  }

  /**
   * Frames are queued and handled together once this turn's I/O callbacks have run (`drain`, on
   * setImmediate): the messages of every read of the socket in this poll phase share one transaction. In
   * the `tasks` bench that is ~2.2 transactions per task where handling each read apart (process.nextTick)
   * made ~3.8 (ADR 0034, amendment); a report waits at most for the callbacks already due.
   */
  private onMessage(s: Session, text: string | null): void {
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

  /**
   * Handles the session's queued frames in order: consecutive messages of a session that said hello
   * in batches (`applyBatch`), anything else (hello, a frame that does not parse, a session whose hello
   * is not stored) alone as before. After INGEST_SLICE_MS the socket waits (TCP holds the worker back)
   * until the event loop has run the requests and timers that were waiting (issue 21).
   */
  private drain(s: Session): void {
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

  private dequeue(s: Session): string | null {
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
  private applyBatch(s: Session): number {
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
    for (const r of replies) this.reply(s, r);
    if (requestPass) this.hooks.requestPass();
    if (failed !== null) {
      const { err, msg } = failed as { err: unknown; msg: WorkerMessage };
      this.messageFailed(s, err, sequenceRefOf(msg), msg.type);
    }
    return batch.length;
  }

  /** One message after hello: the worker is seen, the inbox applies it; its replies are returned. */
  private receive(s: Session, msg: Exclude<WorkerMessage, { type: 'hello' }>) {
    const now = this.deps.clock.now();
    this.inbox.touched(s.workerId, now);
    return this.inbox.receive(s.workerId, msg, now);
  }

  private handleMessage(s: Session, text: string | null): void {
    const parsed = parseMessage(WorkerMessageSchema, text);
    try {
      if (parsed.ok) this.dispatch(s, parsed.message);
      else this.refuseInvalid(s, text, parsed.invalid);
    } catch (err) {
      const ref = parsed.ok ? sequenceRefOf(parsed.message) : parsed.invalid.poison;
      this.messageFailed(s, err, ref, parsed.ok ? parsed.message.type : parsed.invalid.type);
    }
  }

  /**
   * A message that could not be processed (`ref`: its place in the sequence, if any): refused
   * UNAVAILABLE while the store cannot write, else answered INTERNAL; either way nothing more is read
   * from the session.
   */
  private messageFailed(s: Session, err: unknown, ref: SequenceRef | null, type: string | null): void {
    const unavailable = asStorageUnavailable(err, this.deps.store);
    if (unavailable) {
      this.storageRefused(s, unavailable, ref?.seq);
      return;
    }
    this.deps.logger.error({ err, worker_id: s.workerId, type }, 'worker message failed');
    this.reply(s, {
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
   * The store cannot take a message now (issue 10, row 4): it was neither applied nor acknowledged (the
   * sequencing module's rule 5: the mark rolled back with the effect), so it stays in the worker's
   * outbox. Nothing after it may be processed on this session, so the session is closed — with 4003, on
   * which the worker waits longer before it redials and resends (worker/link/connection.ts).
   */
  private storageRefused(s: Session, err: BrokerError, seq: number | undefined): void {
    this.deps.logger.warn(
      { worker_id: s.workerId, ref_seq: seq, message: err.message },
      'worker message not stored: master storage unavailable; the worker resends it later',
    );
    this.reply(s, {
      type: 'error',
      code: 'UNAVAILABLE',
      message: err.message,
      ...(seq === undefined ? {} : { ref_seq: seq }),
    });
    s.dead = true;
    s.ws.close(CLOSE_UNAVAILABLE, 'master storage unavailable');
  }

  /**
   * Applies the hellos the store could not take before (called when storage recovers); a session whose
   * hello still fails is closed like any refused message.
   */
  retryPendingHellos(): void {
    for (const s of this.sessions.values()) {
      if (s.pendingHello === null || s.dead) continue;
      try {
        this.applyPendingHello(s);
      } catch (err) {
        const unavailable = asStorageUnavailable(err, this.deps.store);
        if (!unavailable) throw err;
        this.storageRefused(s, unavailable, undefined);
      }
    }
  }

  /** Stores the session's pending hello, if any (throws UNAVAILABLE while the store still refuses). */
  private applyPendingHello(s: Session): void {
    const hello = s.pendingHello;
    if (hello === null) return;
    storeHello(this.deps, s.workerId, hello, this.deps.clock.now());
    s.pendingHello = null;
    this.deps.logger.info({ worker_id: s.workerId }, 'worker hello stored after the store recovered');
    this.flush(s.workerId);
    this.hooks.requestPass();
  }

  /**
   * Answers a message that does not parse; a poison one is placed in the sequence only after hello
   * (recording it may fail for storage: then it is refused UNAVAILABLE by onMessage, not acknowledged).
   */
  private refuseInvalid(s: Session, text: string | null, bad: InvalidMessage): void {
    this.deps.logger.warn({ worker_id: s.workerId, message: bad.message }, 'bad worker message');
    if (bad.type === 'hello' && this.refuseBadWorkerId(s, text)) return;
    const replies = this.inbox.invalid(s.workerId, bad, s.bootId !== null, this.deps.clock.now());
    for (const r of replies) this.reply(s, r);
  }

  /**
   * A hello whose worker_id breaks the worker id rule (issue 10, row 7) can never open a session: it is
   * answered with `INVALID_WORKER_ID` naming the rule, not a generic INVALID_MESSAGE, and the socket is
   * closed (4002). Returns whether it was one. (The frame parsed as JSON already: that is how its type
   * is known.)
   */
  private refuseBadWorkerId(s: Session, text: string | null): boolean {
    let raw: unknown;
    try {
      raw = JSON.parse(text ?? '');
    } catch {
      return false;
    }
    if (typeof raw !== 'object' || raw === null) return false;
    const id = (raw as Record<string, unknown>)['worker_id'];
    if (WorkerIdSchema.safeParse(id).success) return false;
    const shown =
      typeof id === 'string' ? JSON.stringify(id.length > 140 ? `${id.slice(0, 140)}…` : id) : 'missing';
    this.reply(s, {
      type: 'error',
      code: 'INVALID_WORKER_ID',
      message: `hello: worker_id ${shown} breaks the rule: ${WORKER_ID_RULE}; create a worker token with a valid --worker-id`,
    });
    s.ws.close(CLOSE_PROTOCOL, 'invalid worker id');
    return true;
  }

  /** Closes sessions whose worker token was revoked since they opened (called by the sweeper). */
  revalidate(): void {
    for (const s of this.sessions.values()) {
      const p = this.deps.store.principals.findById(s.principalId);
      if (!p || p.revoked_at !== null) {
        this.deps.logger.warn({ worker_id: s.workerId }, 'worker token revoked; closing its session');
        s.ws.close(CLOSE_REVOKED, 'token revoked');
      }
    }
  }

  private dispatch(s: Session, msg: WorkerMessage): void {
    const now = this.deps.clock.now();
    if (msg.type === 'hello') {
      this.hello(s, msg, now);
      return;
    }
    if (s.bootId === null) {
      this.reply(s, { type: 'error', code: 'HELLO_REQUIRED', message: 'send hello first' });
      return;
    }
    this.inbox.touched(s.workerId, now);
    // What the hello could not store comes first: nothing may build on a worker row or epochs not stored.
    if (sequenceRefOf(msg) !== null) this.applyPendingHello(s);
    const { replies, requestPass } = this.inbox.receive(s.workerId, msg, now);
    for (const r of replies) this.reply(s, r);
    if (requestPass) this.hooks.requestPass();
  }

  private hello(s: Session, msg: HelloMessage, now: number): void {
    if (msg.protocol_version !== PROTOCOL_VERSION) {
      this.reply(s, {
        type: 'error',
        code: 'PROTOCOL_VERSION',
        message: `master speaks protocol ${PROTOCOL_VERSION}, worker ${msg.protocol_version}`,
      });
      s.ws.close(CLOSE_PROTOCOL, 'protocol version');
      return;
    }
    if (msg.worker_id !== s.workerId) {
      this.reply(s, {
        type: 'error',
        code: 'FORBIDDEN',
        message: `this token is bound to worker ${s.workerId}, not ${msg.worker_id}`,
      });
      s.ws.close(CLOSE_PROTOCOL, 'worker id mismatch');
      return;
    }
    // The outbox is flushed only once the session knows the boot (below), so that a query decided by
    // the reconcile goes out after the welcome. A hello the store cannot take is welcomed anyway.
    const { welcome, stored } = acceptHello(this.deps, s.workerId, msg, now);
    s.pendingHello = stored ? null : msg;
    s.bootId = msg.boot_id;
    this.reply(s, welcome);
    this.flush(s.workerId);
    this.hooks.requestPass();
  }
}
