import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { type WebSocket, WebSocketServer } from 'ws';
import type { BrokerDeps } from '../broker/deps.js';
import { handleExecutionReport, handleLogChunk, handleOutputUpload } from '../broker/executions.js';
import type { Fleet } from '../broker/fleet.js';
import { CARDS_TOPIC } from '../broker/leases.js';
import { markExecutionLost } from '../broker/liveness.js';
import { authenticate, bearerToken } from '../broker/principals.js';
import { enqueueForWorker, type WorkerLink } from '../broker/worker-link.js';
import { BrokerError } from '../contracts/errors.js';
import { jsonDepthExceeds, MAX_JSON_DEPTH } from '../contracts/json-depth.js';
import type { CardSample } from '../contracts/sample.js';
import {
  HELLO_MAX_EXECUTIONS,
  MAX_MESSAGE_BYTES,
  PROTOCOL_VERSION,
  type WorkerMessage,
  WorkerMessageSchema,
} from '../contracts/worker-protocol.js';
import { sampleDefect } from '../domain/sample-check.js';
import { WORKER_CONNECT_PATH } from '../http/app.js';

/**
 * The worker hub (DESIGN §8): one WSS session per worker on the master's port. It authenticates the
 * upgrade with a worker token bound to one worker id, sequences and de-duplicates messages, applies each
 * through a broker use case in one transaction together with the raised high-water mark, acknowledges,
 * and flushes the durable outbox. A newer session for the same worker replaces the older one
 * (deterministic: newest wins, the old socket is closed with 4000). Nothing a worker sends can crash
 * the master: a bad message gets an `error` reply and is logged.
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
}

/** Close codes the hub uses. */
export const CLOSE_REPLACED = 4000;
export const CLOSE_PROTOCOL = 4002;
export const CLOSE_REVOKED = 4001;
export const CLOSE_INTERNAL = 1011;

/** Hooks the hub calls on the scheduler. */
export interface HubHooks {
  requestPass(): void;
}

/** The hub. Implements the WorkerLink the broker uses to reach workers. */
export class WorkerHub implements WorkerLink {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES });
  private readonly sessions = new Map<string, Session>();
  private readonly lastTouchWrite = new Map<string, number>();
  hooks: HubHooks = { requestPass: () => {} };

  constructor(
    private readonly deps: BrokerDeps,
    private readonly fleet: Fleet,
    readonly bootId: string,
  ) {}

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
    const session: Session = { ws, workerId, bootId: null, sentUpTo: 0, principalId, dead: false };
    this.sessions.set(workerId, session);
    ws.on('message', (data, isBinary) => this.onMessage(session, isBinary ? null : data.toString()));
    ws.on('close', () => {
      if (this.sessions.get(workerId) === session) {
        this.sessions.delete(workerId);
        this.fleet.disconnected(workerId, session.bootId, this.deps.clock.now());
        this.deps.notifier.notify(CARDS_TOPIC);
      }
    });
    ws.on('error', (err) => this.deps.logger.warn({ err, worker_id: workerId }, 'worker socket error'));
  }

  private reply(s: Session, body: Record<string, unknown>): void {
    if (s.ws.readyState === s.ws.OPEN) s.ws.send(JSON.stringify(body));
  }

  private onMessage(s: Session, text: string | null): void {
    if (s.dead) return;
    let msg: WorkerMessage;
    let raw: unknown;
    try {
      if (text === null)
        throw new BrokerError(
          'INVALID_INPUT',
          'binary frames are not part of the protocol',
          'Send JSON text.',
        );
      raw = JSON.parse(text);
      if (jsonDepthExceeds(raw))
        throw new BrokerError(
          'INVALID_INPUT',
          `message nested more than ${MAX_JSON_DEPTH} levels deep`,
          'See docs/worker-protocol.md.',
        );
      const parsed = WorkerMessageSchema.safeParse(raw);
      if (!parsed.success)
        throw new BrokerError(
          'INVALID_INPUT',
          `invalid message: ${parsed.error.issues
            .slice(0, 3)
            .map((i) => `${i.path.join('.')}: ${i.message}`)
            .join('; ')}`,
          'See docs/worker-protocol.md.',
        );
      msg = parsed.data;
    } catch (err) {
      const message =
        err instanceof BrokerError ? err.message : `unparsable message: ${(err as Error).message}`;
      this.deps.logger.warn({ worker_id: s.workerId, message }, 'bad worker message');
      this.refuseInvalid(s, raw, message);
      return;
    }
    try {
      this.dispatch(s, msg);
    } catch (err) {
      this.deps.logger.error({ err, worker_id: s.workerId, type: msg.type }, 'worker message failed');
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
  }

  /**
   * Answers a message that does not parse. A sequenced one (it names a boot id and seq) is also marked
   * processed and acknowledged: it can never parse, so resending it on every reconnect would help nobody.
   */
  private refuseInvalid(s: Session, raw: unknown, message: string): void {
    const fields = (typeof raw === 'object' && raw !== null ? raw : {}) as Record<string, unknown>;
    const seq = fields['seq'];
    const bootId = fields['boot_id'];
    const sequenced =
      s.bootId !== null &&
      Number.isInteger(seq) &&
      (seq as number) >= 1 &&
      typeof bootId === 'string' &&
      bootId.length > 0 &&
      bootId.length <= 128;
    this.reply(s, {
      type: 'error',
      code: 'INVALID_MESSAGE',
      message,
      ...(sequenced ? { ref_seq: seq } : {}),
    });
    if (!sequenced) return;
    this.deps.store.workers.raiseMark(s.workerId, bootId as string, seq as number, this.deps.clock.now());
    this.reply(s, { type: 'ack', boot_id: bootId, seq });
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
    this.fleet.touched(s.workerId, now);
    if ((this.lastTouchWrite.get(s.workerId) ?? 0) + 5000 < now) {
      this.lastTouchWrite.set(s.workerId, now);
      this.deps.store.workers.touch(s.workerId, now);
    }
    switch (msg.type) {
      case 'ack':
        this.deps.store.outbox.ack(s.workerId, msg.boot_id, msg.seq, now);
        return;
      case 'error':
        this.deps.logger.warn(
          { worker_id: s.workerId, code: msg.code, message: msg.message, ref_seq: msg.ref_seq },
          'worker reported an error',
        );
        return;
      default:
        this.sequenced(s, msg, now);
    }
  }

  /** Applies one sequenced message exactly once: mark and effect commit together, then ack. */
  private sequenced(
    s: Session,
    msg: Exclude<WorkerMessage, { type: 'hello' | 'ack' | 'error' }>,
    now: number,
  ): void {
    const { store } = this.deps;
    let refused: BrokerError | null = null;
    let sampleChanged = false;
    store.transaction(() => {
      if (msg.seq <= store.workers.mark(s.workerId, msg.boot_id)) return; // duplicate: ack again, do nothing
      store.workers.raiseMark(s.workerId, msg.boot_id, msg.seq, now);
      try {
        store.transaction(() => {
          switch (msg.type) {
            case 'sample':
              sampleChanged = this.sample(s.workerId, msg.cards, msg.sampler_error, now, msg.held_cards);
              break;
            case 'execution':
              // An illegal report is refused without rolling back what the refusal changed.
              refused = handleExecutionReport(this.deps, s.workerId, msg);
              break;
            case 'log':
              handleLogChunk(this.deps, s.workerId, msg);
              break;
            case 'output':
              handleOutputUpload(this.deps, s.workerId, msg);
              break;
            case 'probe':
              store.workers.setProbe(s.workerId, {
                python: msg.python,
                torch_version: msg.torch_version,
                backend: msg.backend,
                error: msg.error,
                probed_at: now,
              });
              this.deps.logger.info(
                { worker_id: s.workerId, python: msg.python, torch: msg.torch_version, backend: msg.backend },
                msg.torch_version === null
                  ? `worker ${s.workerId}: ${msg.python} cannot import torch (${msg.error ?? 'no reason given'})`
                  : `worker ${s.workerId}: ${msg.python} has torch ${msg.torch_version} (${msg.backend ?? 'no backend'})`,
              );
              break;
          }
        });
      } catch (err) {
        if (!(err instanceof BrokerError)) throw err;
        refused = err; // a refused message is processed: it is acknowledged and not retried
      }
    });
    if (refused) {
      const e = refused as BrokerError;
      this.deps.logger.warn(
        { worker_id: s.workerId, code: e.code, message: e.message },
        'worker message refused',
      );
      this.reply(s, { type: 'error', code: e.code, message: e.message, ref_seq: msg.seq });
    }
    this.reply(s, { type: 'ack', boot_id: msg.boot_id, seq: msg.seq });
    if (msg.type === 'execution' || sampleChanged) this.hooks.requestPass();
  }

  private sample(
    workerId: string,
    cards: CardSample[],
    reported: string | null,
    now: number,
    heldCards: number[],
  ): boolean {
    const samplerError = reported ?? sampleDefect(cards);
    const changed = this.fleet.sampled(workerId, cards, samplerError, now, heldCards);
    if (changed && samplerError === null) {
      const known = this.deps.store.workers.get(workerId)?.cards ?? [];
      const identity = cards.map((c) => ({
        index: c.index,
        uuid: c.uuid,
        model: c.model,
        memory_total_mib: c.memory_total_mib,
        simulated: c.simulated,
      }));
      if (JSON.stringify(known) !== JSON.stringify(identity))
        this.deps.store.workers.setCards(workerId, identity);
    }
    if (changed) this.deps.store.afterCommit(() => this.deps.notifier.notify(CARDS_TOPIC));
    return changed;
  }

  private hello(s: Session, msg: Extract<WorkerMessage, { type: 'hello' }>, now: number): void {
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
    const { store } = this.deps;
    // A card list naming one index or uuid twice is not trusted at all (see sampleDefect).
    const defect = sampleDefect(msg.cards);
    const helloCards = defect === null ? msg.cards : [];
    const identity = helloCards.map((c) => ({
      index: c.index,
      uuid: c.uuid,
      model: c.model,
      memory_total_mib: c.memory_total_mib,
      simulated: c.simulated,
    }));
    store.transaction(() => {
      const prev = store.workers.get(s.workerId);
      store.workers.upsertOnHello(
        {
          id: s.workerId,
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
        },
        now,
      );
      for (const mark of msg.master_marks) store.outbox.ackThrough(s.workerId, mark.boot_id, mark.seq, now);
      // A worker may have seen epochs this master never issued (a restored or rolled-back database):
      // every later lease on those cards must be above them.
      for (const c of msg.card_epochs) store.leases.raiseEpoch(s.workerId, c.index, c.epoch);
      store.audit.append({
        at: now,
        actor: s.workerId,
        action: 'worker.connected',
        subject_type: 'worker',
        subject_id: s.workerId,
        data: {
          boot_id: msg.boot_id,
          hostname: msg.hostname,
          provider: msg.provider,
          cards: identity.length,
          isolation: msg.isolation,
          container_engine: msg.container_engine,
          backend: msg.backend,
          ...(msg.slurm === null ? {} : { partition: msg.slurm.partition }),
        },
      });
      // Executions the master thinks are live here but the worker did not mention. An assign still in
      // the outbox is on its way. Otherwise, when hello listed every execution the worker knows (fewer
      // than the cap), the worker cannot account for it: its fate is unknown (DESIGN §6) — leaving it
      // RUNNING would hold its cards for ever, since an online worker is never swept. With a full list,
      // ask.
      const known = new Set(msg.executions.map((e) => e.execution_id));
      const listedAll = msg.executions.length < HELLO_MAX_EXECUTIONS;
      for (const e of store.leases.unfinishedForWorker(s.workerId)) {
        if (known.has(e.id)) continue;
        if (e.phase === 'assigned' && store.outbox.hasPendingAssign(s.workerId, e.id)) continue;
        if (listedAll)
          markExecutionLost(this.deps, e, 'master', `execution ${e.id} is not known to the worker`, {
            worker_id: s.workerId,
            boot_id: msg.boot_id,
          });
        else enqueueForWorker(this.deps, this, s.workerId, { type: 'query', execution_id: e.id });
      }
    });
    s.bootId = msg.boot_id;
    // Cards its unfinished executions hold are busy, whether or not this master knows them.
    const unfinished = msg.executions.filter(
      (e) => !['rejected', 'cleaned', 'cleanup_failed'].includes(e.phase),
    );
    this.fleet.connected(s.workerId, msg.boot_id, helloCards, now, [
      ...new Set(unfinished.flatMap((e) => e.cards)),
    ]);
    if (defect !== null) {
      this.deps.logger.warn({ worker_id: s.workerId, defect }, 'worker hello: card list refused');
      this.fleet.sampled(s.workerId, [], defect, now);
    }
    this.reply(s, {
      type: 'welcome',
      protocol_version: PROTOCOL_VERSION,
      worker_id: s.workerId,
      master_boot_id: this.bootId,
      sample_interval_ms: this.deps.config.timing.sample_interval_ms,
      worker_marks: store.workers.marks(s.workerId),
      qualification_python: this.deps.config.qualification_python,
    });
    this.flush(s.workerId);
    this.deps.notifier.notify(CARDS_TOPIC);
    this.hooks.requestPass();
  }
}
