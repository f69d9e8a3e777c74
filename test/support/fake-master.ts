import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { MemoryMarks, parseMessage, receiveSequenced, sequenced } from '../../src/contracts/sequencing.js';
import type { ExecutionPlan, WorkerMessage } from '../../src/contracts/worker-protocol.js';
import { PROTOCOL_VERSION, WorkerMessageSchema } from '../../src/contracts/worker-protocol.js';

/**
 * A small master for worker daemon tests: a real `ws` server on 127.0.0.1 that checks the bearer token,
 * answers hello with welcome, acknowledges and de-duplicates sequenced worker messages by
 * (boot_id, seq) with the same rules as the real hub (src/contracts/sequencing.ts), and lets a test cut,
 * refuse or black-hole the connection.
 */

/** A message as the fake received it, with whether it was new or a resent duplicate. */
export interface Received {
  readonly message: WorkerMessage;
  readonly duplicate: boolean;
}

type Sequenced = Extract<WorkerMessage, { type: 'sample' | 'execution' | 'log' | 'output' | 'probe' }>;

/** The fake master; see the module comment. */
export class FakeMaster {
  /** Every parsed message, duplicates included, in arrival order. */
  readonly received: Received[] = [];
  /** Texts that did not parse as a worker message. */
  readonly invalid: string[] = [];
  /** Messages that arrived while `blackhole` was on (neither processed nor acknowledged). */
  readonly lost: unknown[] = [];
  /** Bearer tokens of every upgrade attempt, accepted or not. */
  readonly attempts: string[] = [];
  /** Highest processed seq per worker boot (sent back in welcome.worker_marks). */
  readonly marks = new MemoryMarks();
  readonly bootId = 'master-boot-1';
  sampleIntervalMs = 100;
  /** Acknowledge sequenced messages (off: the worker keeps them for resending). */
  autoAck = true;
  /** Drop incoming messages on the floor, as if lost in flight. */
  blackhole = false;
  /** Answer upgrades with this HTTP status instead of accepting them. */
  refuseWith: number | null = null;
  /** Send welcome in reply to hello. */
  autoWelcome = true;
  private seq = 0;
  private socket: WebSocket | null = null;

  private constructor(
    private readonly http: Server,
    private readonly wss: WebSocketServer,
    readonly token: string,
  ) {}

  /** Starts listening on an ephemeral port. */
  static async start(token = 'worker-token'): Promise<FakeMaster> {
    const http = createServer((_req, res) => {
      res.statusCode = 404;
      res.end();
    });
    const wss = new WebSocketServer({ noServer: true, maxPayload: 32 * 1024 * 1024 });
    const master = new FakeMaster(http, wss, token);
    http.on('upgrade', (req, socket, head) => master.upgrade(req, socket, head));
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    return master;
  }

  /** The base URL to give the worker (http:// on loopback). */
  get url(): string {
    return `http://127.0.0.1:${(this.http.address() as AddressInfo).port}`;
  }

  /** Whether a worker socket is open. */
  connected(): boolean {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  /** New (non-duplicate) messages of one type. */
  processed<T extends WorkerMessage['type']>(type: T): Array<Extract<WorkerMessage, { type: T }>> {
    return this.received
      .filter((r) => !r.duplicate && r.message.type === type)
      .map((r) => r.message as Extract<WorkerMessage, { type: T }>);
  }

  /** New execution reports for one execution, in order. */
  phases(executionId: string): Array<Extract<WorkerMessage, { type: 'execution' }>> {
    return this.processed('execution').filter((m) => m.execution_id === executionId);
  }

  /** Concatenated stdout (or stderr) of one execution, ordered by offset. */
  logText(executionId: string, stream: 'stdout' | 'stderr' = 'stdout'): string {
    return this.processed('log')
      .filter((m) => m.execution_id === executionId && m.stream === stream)
      .sort((a, b) => a.offset - b.offset)
      .map((m) => m.data)
      .join('');
  }

  /** Sends a raw text frame. */
  sendRaw(text: string): void {
    this.socket?.send(text);
  }

  /**
   * Sends a sequenced master message under `seq`, or the next seq above every one sent so far (as the
   * real master's outbox numbers them); returns the seq.
   */
  sendSequenced(body: Record<string, unknown> & { type: string }, seq?: number): number {
    const s = seq ?? this.seq + 1;
    this.seq = Math.max(this.seq, s);
    this.sendRaw(JSON.stringify(sequenced(body, this.bootId, s)));
    return s;
  }

  /** Sends `assign` for `plan`; returns the seq. */
  assign(plan: ExecutionPlan, seq?: number): number {
    return this.sendSequenced({ type: 'assign', plan }, seq);
  }

  /** Acks and errors the worker sent back (not sequenced, so not in `received` de-duplication). */
  replies<T extends 'ack' | 'error'>(type: T): Array<Extract<WorkerMessage, { type: T }>> {
    return this.received
      .filter((r) => r.message.type === type)
      .map((r) => r.message as Extract<WorkerMessage, { type: T }>);
  }

  /** Cuts the worker's socket without a close handshake. */
  dropSocket(): void {
    this.socket?.terminate();
    this.socket = null;
  }

  /** Closes the worker's socket with a close code, as the real master does (e.g. 4003: store full). */
  closeSocket(code: number, reason = ''): void {
    this.socket?.close(code, reason);
    this.socket = null;
  }

  /** Closes everything. */
  async close(): Promise<void> {
    for (const client of this.wss.clients) client.terminate();
    this.wss.close();
    this.http.closeAllConnections();
    await new Promise<void>((r) => this.http.close(() => r()));
  }

  private upgrade(
    req: import('node:http').IncomingMessage,
    socket: import('node:stream').Duplex,
    head: Buffer,
  ) {
    const auth = req.headers.authorization ?? '';
    this.attempts.push(auth.replace(/^Bearer /, ''));
    const status =
      this.refuseWith ??
      (auth !== `Bearer ${this.token}` ? 401 : req.url?.endsWith('/api/v1/workers/connect') ? null : 404);
    if (status !== null) {
      socket.end(`HTTP/1.1 ${status} Refused\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      this.socket?.terminate();
      this.socket = ws;
      ws.on('message', (data) => this.onMessage(ws, data.toString()));
    });
  }

  private onMessage(ws: WebSocket, text: string): void {
    const result = parseMessage(WorkerMessageSchema, text);
    if (!result.ok) {
      this.invalid.push(text);
      return;
    }
    const parsed = result.message;
    if (this.blackhole) {
      this.lost.push(parsed);
      return;
    }
    if (parsed.type === 'hello' || parsed.type === 'ack' || parsed.type === 'error') {
      this.received.push({ message: parsed, duplicate: false });
      if (parsed.type === 'hello' && this.autoWelcome) {
        ws.send(
          JSON.stringify({
            type: 'welcome',
            protocol_version: PROTOCOL_VERSION,
            worker_id: parsed.worker_id,
            master_boot_id: this.bootId,
            sample_interval_ms: this.sampleIntervalMs,
            worker_marks: this.marks.list(),
          }),
        );
      }
      return;
    }
    const m = parsed as Sequenced;
    const received = receiveSequenced(m, {
      transaction: (fn) => fn(),
      marks: this.marks,
      apply: () => null,
    });
    this.received.push({ message: m, duplicate: received.kind === 'duplicate' });
    if (this.autoAck) for (const r of received.replies) ws.send(JSON.stringify(r));
  }
}
