import type { InvalidMessage } from '../../contracts/sequencing.js';
import {
  type MasterMessage,
  PROTOCOL_VERSION,
  WORKER_ID_RULE,
  WorkerIdSchema,
  type WorkerMessage,
} from '../../contracts/worker-protocol.js';
import type { BrokerDeps } from '../deps.js';
import type { Fleet } from '../fleet.js';
import { CARDS_TOPIC } from '../topics.js';
import { sequenceRefOf, WorkerInbox } from './inbox.js';
import { acceptHello, storeHello } from './session.js';

/**
 * The master's live worker sessions (docs/worker-protocol.md; ADR 0006): one per worker, opened by the
 * gateway (src/ws/hub.ts) once the upgrade authenticated as a worker token bound to one worker id. Here:
 * each session's state, a newer session for the same worker replacing the older one (deterministic:
 * newest wins, the old socket is closed with 4000), the hello (checked, then `acceptHello`), every later
 * message handed to the inbox (src/broker/workers/inbox.ts: what a message means), the outbox flushed
 * over the session, and sessions whose token was revoked closed. How the frames of a session are queued,
 * batched, paced and refused while the store cannot write is ingest.ts, above this file.
 */

type HelloMessage = Extract<WorkerMessage, { type: 'hello' }>;

/**
 * The socket of a session, as the gateway's `ws` WebSocket offers it: what this folder writes to it and
 * how it holds the worker back (pause: TCP stops reading).
 */
export interface WorkerSocket {
  readonly readyState: number;
  /** The value of `readyState` while the socket is open. */
  readonly OPEN: number;
  readonly isPaused: boolean;
  send(text: string): void;
  close(code: number, reason: string): void;
  /** Drops the connection at once, without a closing handshake. */
  terminate(): void;
  pause(): void;
  resume(): void;
  /**
   * Holds the connection's writes until `uncork` (the gateway's socket has them): the frames sent in
   * between leave in one write, one TLS record. Absent: each frame is written as it is sent.
   */
  cork?(): void;
  uncork?(): void;
}

/** One worker's session: its socket and what the master remembers of it while it is open. */
export interface LiveSession {
  ws: WorkerSocket;
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
  /** Frames received and not yet handled, oldest first (handled together, see ingest.ts `drain`). */
  queue: Array<string | null>;
  /** Characters in `queue`: past QUEUE_PAUSE_CHARS the socket is paused until it drained. */
  queuedChars: number;
  /** Whether a `drain` is scheduled. */
  drainScheduled: boolean;
}

/** Close codes of a worker session. */
export const CLOSE_REPLACED = 4000;
export const CLOSE_PROTOCOL = 4002;
export const CLOSE_REVOKED = 4001;
export const CLOSE_INTERNAL = 1011;
/**
 * The master's store cannot take the worker's message now (out of disk space): nothing was applied or
 * acknowledged; the worker redials after a longer delay and resends from its outbox.
 */
export const CLOSE_UNAVAILABLE = 4003;

/** The live sessions, by worker id (the gateway's WorkerLink flushes through them). */
export class WorkerSessions {
  private readonly sessions = new Map<string, LiveSession>();
  /** What each message after hello means; one per master (it remembers touch writes). */
  readonly inbox: WorkerInbox;

  constructor(
    private readonly deps: BrokerDeps,
    private readonly fleet: Fleet,
    /** Asks the scheduler for a pass (the gateway forwards it to its hooks). */
    private readonly requestPass: () => void,
  ) {
    this.inbox = new WorkerInbox(deps, fleet);
  }

  /** Opens the session of a socket authenticated as `workerId`; an older one of that worker is closed. */
  open(ws: WorkerSocket, workerId: string, principalId: string): LiveSession {
    const old = this.sessions.get(workerId);
    if (old) old.ws.close(CLOSE_REPLACED, 'replaced by a newer session');
    const session: LiveSession = {
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
    return session;
  }

  /** The socket closed (its queued frames handled already): the worker is disconnected unless replaced. */
  closed(s: LiveSession): void {
    if (this.sessions.get(s.workerId) !== s) return;
    this.sessions.delete(s.workerId);
    this.fleet.disconnected(s.workerId, s.bootId, this.deps.clock.now());
    this.deps.notifier.notify(CARDS_TOPIC);
  }

  /** Closes every session (the master shuts down). */
  closeAll(code: number, reason: string): void {
    for (const s of this.sessions.values()) s.ws.close(code, reason);
  }

  /** The open sessions. */
  all(): IterableIterator<LiveSession> {
    return this.sessions.values();
  }

  /** Ids of workers with an open session. */
  connectedWorkers(): string[] {
    return [...this.sessions.keys()];
  }

  /** Sends the worker's unsent outbox entries over its session, in order. */
  flush(workerId: string): void {
    const s = this.sessions.get(workerId);
    if (!s || s.bootId === null || s.ws.readyState !== s.ws.OPEN) return;
    s.ws.cork?.();
    try {
      for (const entry of this.deps.store.outbox.unacked(workerId)) {
        if (entry.id <= s.sentUpTo) continue;
        s.ws.send(JSON.stringify(entry.body));
        s.sentUpTo = entry.id;
      }
    } finally {
      s.ws.uncork?.();
    }
  }

  /** Sends `body` on the session if its socket is still open. */
  reply(s: LiveSession, body: MasterMessage): void {
    if (s.ws.readyState === s.ws.OPEN) s.ws.send(JSON.stringify(body));
  }

  /** Sends `bodies` in order, in one write of the connection (a batch's acks; ADR 0034). */
  replyAll(s: LiveSession, bodies: readonly MasterMessage[]): void {
    if (bodies.length === 0) return;
    s.ws.cork?.();
    try {
      for (const body of bodies) this.reply(s, body);
    } finally {
      s.ws.uncork?.();
    }
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

  /**
   * One message handled alone (a hello, one before hello, one after a hello not stored yet): hello is
   * checked and accepted, anything else needs hello first and goes to the inbox. Throws what the store
   * throws (ingest.ts answers it).
   */
  dispatch(s: LiveSession, msg: WorkerMessage): void {
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
    if (requestPass) this.requestPass();
  }

  /** Stores the session's pending hello, if any (throws UNAVAILABLE while the store still refuses). */
  applyPendingHello(s: LiveSession): void {
    const hello = s.pendingHello;
    if (hello === null) return;
    storeHello(this.deps, s.workerId, hello, this.deps.clock.now());
    s.pendingHello = null;
    this.deps.logger.info({ worker_id: s.workerId }, 'worker hello stored after the store recovered');
    this.flush(s.workerId);
    this.requestPass();
  }

  private hello(s: LiveSession, msg: HelloMessage, now: number): void {
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
    this.requestPass();
  }

  /**
   * Answers a message that does not parse; a poison one is placed in the sequence only after hello
   * (recording it may fail for storage: then ingest.ts refuses it UNAVAILABLE, not acknowledged).
   */
  refuseInvalid(s: LiveSession, text: string | null, bad: InvalidMessage): void {
    this.deps.logger.warn({ worker_id: s.workerId, message: bad.message }, 'bad worker message');
    if (bad.type === 'hello' && this.refuseBadWorkerId(s, text)) return;
    const replies = this.inbox.invalid(s.workerId, bad, s.bootId !== null, this.deps.clock.now());
    for (const r of replies) this.reply(s, r);
  }

  /**
   * A hello whose worker_id breaks the worker id rule (docs/state-machines.md) can never open a session: it is
   * answered with `INVALID_WORKER_ID` naming the rule, not a generic INVALID_MESSAGE, and the socket is
   * closed (4002). Returns whether it was one. (The frame parsed as JSON already: that is how its type
   * is known.)
   */
  private refuseBadWorkerId(s: LiveSession, text: string | null): boolean {
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
}
