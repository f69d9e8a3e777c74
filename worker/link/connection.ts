import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import WebSocket from 'ws';
import { WORKER_CONNECT_PATH } from '../../src/contracts/paths.js';
import { MAX_MESSAGE_BYTES } from '../../src/contracts/worker-protocol.js';

/**
 * The worker's end of the WSS link to the master (docs/architecture.md; docs/worker-protocol.md): one socket
 * at a time, reconnected for ever. This file knows nothing of the protocol's messages; the daemon gives it
 * text to send and gets text back. States of the link:
 *
 *   connecting   a handshake is under way
 *   open         the socket is up (the daemon then says hello and waits for welcome)
 *   waiting      the socket is gone; the next attempt starts after a jittered backoff
 *   closed       `close()` was called; nothing is attempted any more
 */

/** Reconnect timing; every delay is jittered by ±50 %. Tests shorten them. */
export interface BackoffOptions {
  /** First retry delay after a lost or failed connection (default 200 ms). */
  readonly initialMs?: number;
  /** Ceiling of the doubling delay, jitter included (default 5 s): the longest wait after a heal. */
  readonly maxMs?: number;
  /** Delay after the master refused the handshake (401/403): a bad token will not fix itself (default 30 s). */
  readonly refusedMs?: number;
  /**
   * Delay after the master closed with 4003 (its store cannot take our messages: out of disk space);
   * space comes back when an operator frees it, not in milliseconds (default 5 s).
   */
  readonly unavailableMs?: number;
}

/** Close code of a master whose store cannot take the worker's messages now (src/ws/hub.ts). */
export const CLOSE_MASTER_UNAVAILABLE = 4003;

/** What the link needs; the callbacks are the daemon's. */
export interface ConnectionOptions {
  /** The ws:// or wss:// URL to connect to (see `workerConnectUrl`). */
  readonly url: string;
  /** The worker token, sent as `Authorization: Bearer …`. */
  readonly token: string;
  /** PEM of a private CA to trust (the master's dev CA); the system roots otherwise. */
  readonly ca?: string;
  readonly logger: Logger;
  readonly backoff?: BackoffOptions;
  /** A socket that answers no ping for this long is dropped and redialled (default 10 s). */
  readonly pingIntervalMs?: number;
  /**
   * A dial whose WebSocket handshake (TCP, TLS, HTTP upgrade) has not completed within this long is
   * abandoned and redialled (default 10 s). Enforced by our own timer: ws's `handshakeTimeout` fired at
   * twice its value over TLS (docs/operations.md "Partitions"), so a dial into a silent path waited 20 s.
   */
  readonly handshakeTimeoutMs?: number;
  /** Called once per socket when it opens; the daemon sends hello from here. */
  readonly onOpen: () => void;
  /** Called with every text message of the current socket. */
  readonly onMessage: (text: string) => void;
  /** Called once per socket that had opened, when it is gone. */
  readonly onClose: () => void;
  /** Jitter source in [0, 1); tests may fix it. */
  readonly random?: () => number;
}

/** The running link. */
export interface WorkerConnection {
  /** Sends on the open socket; false when there is none (the caller keeps the message). */
  send(text: string): boolean;
  /** Bytes queued on the socket and not yet written; the daemon pauses sending above a mark. */
  bufferedAmount(): number;
  /** Whether a socket is open. */
  isOpen(): boolean;
  /** Drops the current socket (if any) so that a fresh one is dialled, e.g. when no welcome came. */
  drop(reason: string): void;
  /** The connection works end to end (welcome received): the next failure starts from the shortest delay. */
  resetBackoff(): void;
  /** Closes the socket and stops reconnecting; resolves when the socket is closed. */
  close(): Promise<void>;
}

const DEFAULT_INITIAL_MS = 200;
const DEFAULT_MAX_MS = 5_000;
const DEFAULT_REFUSED_MS = 30_000;
const DEFAULT_UNAVAILABLE_MS = 5_000;
const DEFAULT_PING_MS = 10_000;
const HANDSHAKE_TIMEOUT_MS = 10_000;
/** A close() that the peer never answers must not hang the worker's shutdown. */
const CLOSE_WAIT_MS = 1_000;

/**
 * The master's base URL (`https://host:port[/prefix]`, or `http://` on a loopback address only) →
 * the worker endpoint (`wss://host:port[/prefix]/api/v1/workers/connect`). `ws://` and `wss://` are
 * accepted as they are. Throws `RangeError` saying what is accepted: plain http elsewhere than on
 * loopback would send the worker token in clear.
 */
export function workerConnectUrl(masterUrl: string): string {
  let url: URL;
  try {
    url = new URL(masterUrl);
  } catch {
    throw new RangeError(`--url must be the master's https://host:port; got "${masterUrl}"`);
  }
  const secure = url.protocol === 'https:' || url.protocol === 'wss:';
  const plain = url.protocol === 'http:' || url.protocol === 'ws:';
  if (!secure && !plain)
    throw new RangeError(`--url must start with https:// (or http:// on loopback); got "${masterUrl}"`);
  if (plain && !isLoopbackHost(url.hostname)) {
    throw new RangeError(
      `--url ${masterUrl} is plain http on a non-loopback address; use https:// so the token is not sent in clear`,
    );
  }
  const base = url.pathname.replace(/\/+$/, '');
  const path = base.endsWith(WORKER_CONNECT_PATH) ? base : `${base}${WORKER_CONNECT_PATH}`;
  return `${secure ? 'wss' : 'ws'}://${url.host}${path}`;
}

function rawToText(data: WebSocket.RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.isBuffer(data) ? data.toString('utf8') : Buffer.from(data).toString('utf8');
}

function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** The delays and the ping interval of one link, defaults filled in. */
interface LinkTiming {
  readonly initialMs: number;
  readonly maxMs: number;
  readonly refusedMs: number;
  readonly unavailableMs: number;
  readonly pingMs: number;
  readonly handshakeMs: number;
}

function linkTiming(opts: ConnectionOptions): LinkTiming {
  return {
    initialMs: opts.backoff?.initialMs ?? DEFAULT_INITIAL_MS,
    maxMs: opts.backoff?.maxMs ?? DEFAULT_MAX_MS,
    refusedMs: opts.backoff?.refusedMs ?? DEFAULT_REFUSED_MS,
    unavailableMs: opts.backoff?.unavailableMs ?? DEFAULT_UNAVAILABLE_MS,
    pingMs: opts.pingIntervalMs ?? DEFAULT_PING_MS,
    handshakeMs: opts.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS,
  };
}

/**
 * The delay before the next attempt, by why the last one ended (before jitter), and the next doubling
 * delay: a refused handshake waits `refusedMs`, a master out of space `unavailableMs`, anything else the
 * doubling backoff.
 */
function retryDelay(
  timing: LinkTiming,
  nextDelay: number,
  refusedStatus: number | null,
  closeCode: number | null,
): { readonly delay: number; readonly nextDelay: number } {
  if (refusedStatus !== null) return { delay: timing.refusedMs, nextDelay };
  // Not doubled from the short initial delay: the welcome before the refusal reset the backoff.
  if (closeCode === CLOSE_MASTER_UNAVAILABLE) return { delay: timing.unavailableMs, nextDelay };
  return { delay: nextDelay, nextDelay: Math.min(timing.maxMs, nextDelay * 2) };
}

/** Dials once. No `handshakeTimeout` here: watchSocket's own timer bounds the handshake (see above). */
function openSocket(opts: ConnectionOptions): WebSocket {
  return new WebSocket(opts.url, {
    headers: { Authorization: `Bearer ${opts.token}` },
    maxPayload: MAX_MESSAGE_BYTES,
    perMessageDeflate: false,
    ...(opts.ca === undefined ? {} : { ca: opts.ca }),
  });
}

/** Logs a handshake the master answered with HTTP; returns the status when it refused the token. */
function handshakeRefusal(res: IncomingMessage, opts: ConnectionOptions): number | null {
  const status = res.statusCode ?? 0;
  res.resume();
  if (status === 401 || status === 403) {
    opts.logger.error(
      { status, url: opts.url },
      `worker: the master refused the worker token (HTTP ${status}); check --token-file / GPU_BROKER_WORKER_TOKEN and that the token has the worker role for this worker id; retrying slowly`,
    );
    return status;
  }
  opts.logger.warn({ status, url: opts.url }, `worker: handshake refused with HTTP ${status}`);
  return null;
}

/**
 * Pings the master every `pingMs` and drops the socket when a ping went unanswered. ws answers the
 * master's pings by itself; our own pings find a master that vanished without a FIN (a half-open socket
 * would otherwise look connected for ever). Any message counts as an answer (`alive`).
 */
function keepAlive(ws: WebSocket, pingMs: number, log: Logger): { alive(): void; stop(): void } {
  let pongSeen = true;
  const timer = setInterval(() => {
    if (!pongSeen) {
      log.warn('worker: the master did not answer a ping; reconnecting');
      ws.terminate();
      return;
    }
    pongSeen = false;
    ws.ping();
  }, pingMs);
  return {
    alive: () => {
      pongSeen = true;
    },
    stop: () => clearInterval(timer),
  };
}

function logDisconnect(code: number, reason: Buffer, log: Logger): void {
  if (code === CLOSE_MASTER_UNAVAILABLE)
    log.warn(
      { code, reason: reason.toString('utf8') },
      'worker: the master cannot store our messages now (out of disk space); they stay in the outbox and are resent after a delay',
    );
  else log.info({ code, reason: reason.toString('utf8') }, 'worker: disconnected from the master');
}

/** Closes `ws` politely (terminates one still connecting); gives up waiting after CLOSE_WAIT_MS. */
function closeSocket(ws: WebSocket): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      ws.terminate();
      resolve();
    }, CLOSE_WAIT_MS);
    ws.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
    if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
    else ws.close(1001, 'worker stopping');
  });
}

/** What one socket's life tells the link that dialled it. */
interface SocketHooks {
  /** Whether `close()` was called on the link. */
  isClosed(): boolean;
  /** The socket opened; called before `opts.onOpen`. */
  opened(): void;
  /** The socket is gone: `wasOpen` when it had opened, `refusedStatus` when the master refused the token. */
  gone(code: number, wasOpen: boolean, refusedStatus: number | null): void;
}

/** Follows one socket from handshake to close: logs, keeps it alive, hands messages to the daemon. */
function watchSocket(
  ws: WebSocket,
  opts: ConnectionOptions,
  timing: LinkTiming,
  attempt: number,
  hooks: SocketHooks,
): void {
  const log = opts.logger;
  let refusedStatus: number | null = null;
  let opened = false;
  let ping: ReturnType<typeof keepAlive> | undefined;
  // The handshake's deadline, from the dial: a silent path (SYNs or the TLS hello dropped) is given up
  // after exactly `handshakeMs`, and the next dial follows after the backoff.
  const handshake = setTimeout(() => {
    log.warn({ url: opts.url, timeout_ms: timing.handshakeMs }, 'worker: handshake timed out; redialling');
    ws.terminate();
  }, timing.handshakeMs);

  ws.on('unexpected-response', (_req, res: IncomingMessage) => {
    refusedStatus = handshakeRefusal(res, opts);
    ws.terminate();
  });
  ws.on('open', () => {
    clearTimeout(handshake);
    if (hooks.isClosed()) {
      ws.close(1001, 'worker stopping');
      return;
    }
    opened = true;
    hooks.opened();
    log.info({ url: opts.url, attempt }, 'worker: connected to the master');
    ping = keepAlive(ws, timing.pingMs, log);
    opts.onOpen();
  });
  ws.on('pong', () => ping?.alive());
  ws.on('message', (data) => {
    ping?.alive();
    // A binary frame is decoded like text: the daemon answers what it cannot parse with an error.
    opts.onMessage(rawToText(data));
  });
  ws.on('error', (err) => {
    if (refusedStatus === null && !hooks.isClosed())
      log.warn({ err: err.message, url: opts.url }, 'worker: connection error');
  });
  ws.on('close', (code, reason) => {
    clearTimeout(handshake);
    ping?.stop();
    if (opened) logDisconnect(code, reason, log);
    hooks.gone(code, opened, refusedStatus);
  });
}

/** Starts dialling at once and keeps a socket up until `close()`; see the module comment. */
export function connectForever(opts: ConnectionOptions): WorkerConnection {
  const timing = linkTiming(opts);
  const random = opts.random ?? Math.random;
  const log = opts.logger;

  let socket: WebSocket | null = null;
  let open = false;
  let closed = false;
  let nextDelay = timing.initialMs;
  let retryTimer: NodeJS.Timeout | undefined;
  let attempt = 0;

  // ±50 %, but never past the ceiling: `maxMs` is the longest a worker waits to redial after a heal.
  const jitter = (ms: number) => Math.min(Math.max(ms, timing.maxMs), Math.round(ms * (0.5 + random())));

  const scheduleRetry = (refusedStatus: number | null, closeCode: number | null) => {
    if (closed) return;
    const next = retryDelay(timing, nextDelay, refusedStatus, closeCode);
    const delay = jitter(next.delay);
    nextDelay = next.nextDelay;
    log.debug({ delay_ms: delay }, 'worker: reconnecting after a delay');
    retryTimer = setTimeout(dial, delay);
  };

  function dial(): void {
    if (closed) return;
    attempt += 1;
    const ws = openSocket(opts);
    socket = ws;
    watchSocket(ws, opts, timing, attempt, {
      isClosed: () => closed,
      opened: () => {
        open = true;
      },
      gone: (code, wasOpen, refusedStatus) => {
        if (socket === ws) socket = null;
        if (wasOpen) {
          open = false;
          opts.onClose();
        }
        scheduleRetry(refusedStatus, code);
      },
    });
  }

  dial();

  return {
    send(text) {
      if (!open || socket === null || socket.readyState !== WebSocket.OPEN) return false;
      socket.send(text);
      return true;
    },
    bufferedAmount: () => socket?.bufferedAmount ?? 0,
    isOpen: () => open,
    drop(reason) {
      if (socket === null) return;
      log.warn({ reason }, 'worker: dropping the connection');
      socket.terminate();
    },
    resetBackoff() {
      nextDelay = timing.initialMs;
    },
    async close() {
      closed = true;
      clearTimeout(retryTimer);
      const ws = socket;
      if (ws === null || ws.readyState === WebSocket.CLOSED) return;
      await closeSocket(ws);
    },
  };
}
