import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { type WebSocket, WebSocketServer } from 'ws';
import type { BrokerDeps } from '../broker/deps.js';
import type { Fleet } from '../broker/fleet.js';
import type { WorkerLink } from '../broker/ports.js';
import { authenticateWorker, bearerToken } from '../broker/principals.js';
import { WorkerIngest } from '../broker/workers/ingest.js';
import { WorkerSessions, type WorkerSocket } from '../broker/workers/live-sessions.js';
import { BrokerError } from '../contracts/errors.js';
import { WORKER_CONNECT_PATH } from '../contracts/paths.js';
import { MAX_MESSAGE_BYTES } from '../contracts/worker-protocol.js';

/**
 * The worker gateway (docs/worker-protocol.md; docs/architecture.md "The hub and the reconcile use
 * case"): the WSS endpoint on the master's port (ADR 0005: `noServer`, upgrades of the app's server).
 * An edge: it answers an upgrade to any other path 404, authenticates the upgrade with the broker's
 * rule (`authenticateWorker`: a live worker token bound to one worker id; else 401 or 403), opens the
 * session (src/broker/workers/live-sessions.ts) and hands it every frame as text (a binary frame as
 * null) and its close (src/broker/workers/ingest.ts: queueing, batches, backpressure, the refusal while
 * the store cannot write). What the broker answers it writes to the socket itself, through the
 * `WorkerSocket` this WebSocket is.
 */

/** Hooks the hub calls on the scheduler. */
export interface HubHooks {
  requestPass(): void;
}

/** The hub. Implements the WorkerLink the broker uses to reach workers. */
export class WorkerHub implements WorkerLink {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES });
  private readonly sessions: WorkerSessions;
  private readonly ingest: WorkerIngest;
  hooks: HubHooks = { requestPass: () => {} };

  constructor(
    private readonly deps: BrokerDeps,
    fleet: Fleet,
    readonly bootId: string,
  ) {
    // The hooks are set after construction (the scheduler needs the hub): read them at each call.
    const requestPass = () => this.hooks.requestPass();
    this.sessions = new WorkerSessions(deps, fleet, requestPass);
    this.ingest = new WorkerIngest(deps, this.sessions, requestPass);
  }

  /** Attaches the upgrade handler to the app's server and closes sessions before the app closes. */
  attach(app: FastifyInstance): void {
    app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.upgrade(req, socket, head),
    );
    app.addHook('preClose', async () => {
      this.sessions.closeAll(1001, 'master shutting down');
      this.wss.close();
    });
  }

  /** Ids of workers with an open session. */
  connectedWorkers(): string[] {
    return this.sessions.connectedWorkers();
  }

  /** Sends the worker's unsent outbox entries over its session, in order. */
  flush(workerId: string): void {
    this.sessions.flush(workerId);
  }

  /** Applies the hellos the store could not take before (called when storage recovers). */
  retryPendingHellos(): void {
    this.ingest.retryPendingHellos();
  }

  /** Closes sessions whose worker token was revoked since they opened (called by the sweeper). */
  revalidate(): void {
    this.sessions.revalidate();
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const path = (req.url ?? '').split('?')[0];
    if (path !== WORKER_CONNECT_PATH) {
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    let worker: { workerId: string; principalId: string };
    try {
      worker = authenticateWorker(this.deps, bearerToken(req.headers.authorization));
    } catch (err) {
      const status =
        err instanceof BrokerError && err.code === 'FORBIDDEN' ? '403 Forbidden' : '401 Unauthorized';
      socket.end(
        `HTTP/1.1 ${status}\r\nConnection: close\r\nWWW-Authenticate: Bearer\r\nContent-Length: 0\r\n\r\n`,
      );
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) =>
      this.open(ws, socket, worker.workerId, worker.principalId),
    );
  }

  private open(ws: WebSocket, socket: Duplex, workerId: string, principalId: string): void {
    const session = this.sessions.open(workerSocket(ws, socket), workerId, principalId);
    ws.on('message', (data, isBinary) => this.ingest.received(session, isBinary ? null : data.toString()));
    ws.on('close', () => this.ingest.closed(session));
    ws.on('error', (err) => this.deps.logger.warn({ err, worker_id: workerId }, 'worker socket error'));
  }
}

/**
 * The session's view of a worker's WebSocket, with the connection's cork/uncork: the frames the broker
 * sends in between (a batch's acks, a flush of the outbox) leave in one write and one TLS record
 * instead of one each.
 */
function workerSocket(ws: WebSocket, socket: Duplex): WorkerSocket {
  return {
    get readyState() {
      return ws.readyState;
    },
    OPEN: ws.OPEN,
    get isPaused() {
      return ws.isPaused;
    },
    send: (text) => ws.send(text),
    close: (code, reason) => ws.close(code, reason),
    terminate: () => ws.terminate(),
    pause: () => ws.pause(),
    resume: () => ws.resume(),
    cork: () => socket.cork(),
    uncork: () => socket.uncork(),
  };
}
