import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BrokerError } from '../contracts/errors.js';
import type { Logger } from '../platform/logger.js';

/**
 * What keeps one peer from holding the master's connections (docs/performance.md "Noisy neighbours"). Node's own timeouts
 * (`headersTimeout`, `requestTimeout`, `keepAliveTimeout`, set in src/app.ts) bound the headers, the
 * whole request and idle keep-alive sockets; this file adds what Node lacks:
 *
 * - a body watchdog: a request whose body is still arriving is cut when no byte came for
 *   `body_timeout_ms`, or when, past its first `body_timeout_ms`, it averages under
 *   `min_body_bytes_per_second` (progress is the socket's `bytesRead`, so nothing is buffered to count);
 *   the peer gets `408 REQUEST_TIMEOUT` and the connection is closed;
 * - a cap on open connections per peer address (`max_connections_per_peer`), enforced at accept: the
 *   excess socket is destroyed before TLS or HTTP reads a byte, so one address cannot use up every file
 *   descriptor while everyone else is still served (`max_connections` bounds all of them, Node's
 *   `server.maxConnections`);
 * - a cap per principal (`max_connections_per_principal`): the principal is known
 *   only once a request's token is read, after the connection was accepted, so what is capped is its
 *   requests in flight (HTTP/1.1: one per connection); the request past the cap is answered 429
 *   QUOTA_EXCEEDED before its body is read and its connection closed, and a connection whose principal
 *   holds more open connections than the cap (idle keep-alive ones) is closed after its answer. 600 long-polls of one principal from one address took the whole per-peer
 *   cap and a third of another principal's calls from that address failed; now that principal holds at
 *   most its cap and the rest of the address's cap is a reserve for everyone else behind it. What cannot
 *   be attributed (connections that never send a valid token) is bounded by the per-peer cap and the
 *   headers timeout only;
 * - `Connection: close` on every answer to a request without a valid token, and on every answer sent
 *   while the request's body is still unread (a refused upload): nothing unauthenticated keeps a socket,
 *   and no refused body is read to its end to keep the connection alive.
 */

/** The settings (master config `http`). */
export interface ConnectionLimits {
  body_timeout_ms: number;
  min_body_bytes_per_second: number;
  max_connections_per_peer: number;
  max_connections_per_principal: number;
  max_connections: number;
}

/** What the watchdog knows about one body still arriving. */
export interface BodyProgress {
  /** Since the request's headers were read. */
  elapsed_ms: number;
  /** Since the last byte arrived (or the headers, before any). */
  idle_ms: number;
  /** Body bytes (approximately: socket bytes) received so far. */
  received: number;
}

/** Why a body is cut: `idle` (nothing for body_timeout_ms) or `slow` (under the minimum average rate). */
export type BodyVerdict = 'idle' | 'slow' | null;

/** The watchdog's decision for one body; pure. */
export function bodyVerdict(p: BodyProgress, limits: ConnectionLimits): BodyVerdict {
  if (p.idle_ms >= limits.body_timeout_ms) return 'idle';
  const rated = p.elapsed_ms - limits.body_timeout_ms;
  if (rated > 0 && p.received < (limits.min_body_bytes_per_second * rated) / 1000) return 'slow';
  return null;
}

interface Watched {
  req: FastifyRequest;
  reply: FastifyReply;
  startedAt: number;
  lastProgressAt: number;
  baseBytes: number;
  lastBytes: number;
}

/** Whether the request announced a body (a length over 0, or a chunked body). */
function hasBody(req: FastifyRequest): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/** The typed error a cut body answers with. */
export function bodyTimeoutError(verdict: Exclude<BodyVerdict, null>, limits: ConnectionLimits): BrokerError {
  return new BrokerError(
    'REQUEST_TIMEOUT',
    verdict === 'idle'
      ? `no body bytes for ${limits.body_timeout_ms} ms`
      : `the body arrived at under ${limits.min_body_bytes_per_second} bytes/s`,
    'Send the body without pauses; the master cuts bodies that idle past http.body_timeout_ms or stay under http.min_body_bytes_per_second.',
  );
}

/** Installs the body watchdog, the close-after-answer rule and the per-peer cap on `app`. */
export function installConnectionLimits(
  app: FastifyInstance,
  limits: ConnectionLimits,
  logger: Logger,
): void {
  const watched = new Set<Watched>();
  const tickMs = Math.max(50, Math.min(1000, Math.floor(limits.body_timeout_ms / 4)));
  let timer: NodeJS.Timeout | null = null;
  const sweep = () => {
    const now = performance.now();
    for (const w of watched) {
      const socket = w.req.raw.socket;
      if (w.req.raw.complete || !socket || socket.destroyed) {
        watched.delete(w);
        continue;
      }
      const bytes = socket.bytesRead;
      if (bytes !== w.lastBytes) {
        w.lastBytes = bytes;
        w.lastProgressAt = now;
      }
      const verdict = bodyVerdict(
        { elapsed_ms: now - w.startedAt, idle_ms: now - w.lastProgressAt, received: bytes - w.baseBytes },
        limits,
      );
      if (verdict === null) continue;
      watched.delete(w);
      logger.info(
        { peer: socket.remoteAddress, url: w.req.url, verdict, received: bytes - w.baseBytes },
        'request body cut',
      );
      cut(w, socket, bodyTimeoutError(verdict, limits));
    }
    if (watched.size === 0 && timer) {
      clearInterval(timer);
      timer = null;
    }
  };
  app.addHook('onRequest', async (req, reply) => {
    const socket = req.raw.socket;
    if (!socket || !hasBody(req)) return;
    const now = performance.now();
    const bytes = socket.bytesRead;
    watched.add({ req, reply, startedAt: now, lastProgressAt: now, baseBytes: bytes, lastBytes: bytes });
    if (!timer) {
      timer = setInterval(sweep, tickMs);
      timer.unref();
    }
  });
  const principals = new PrincipalConnections(limits.max_connections_per_principal);
  // preParsing: after every onRequest hook (the token is read there), before the body is.
  app.addHook('preParsing', async (req, reply) => {
    const socket = req.raw.socket;
    if (!req.principal || !socket) return;
    const id = req.principal.id;
    const refusal = principals.admit(socket, id);
    if (!refusal) {
      let counted = true;
      const done = () => {
        if (counted) principals.done(id);
        counted = false;
      };
      reply.raw.once('finish', done);
      reply.raw.once('close', done);
      return;
    }
    logger.info(
      { peer: socket.remoteAddress, principal: req.principal.name, limit: refusal.limit },
      'request refused: per-principal connection cap',
    );
    reply.header('connection', 'close');
    throw new BrokerError(
      'QUOTA_EXCEEDED',
      `you have ${refusal.used} requests in flight; the cap is ${refusal.limit}`,
      'Send fewer requests at once (hold fewer long-polls; wait for answers before sending more), then retry.',
      { cap: 'http.max_connections_per_principal', limit: refusal.limit, used: refusal.used },
    );
  });
  app.addHook('onSend', async (req, reply) => {
    const socket = req.raw.socket;
    if (!req.principal || !req.raw.complete || (socket && principals.overOpen(socket)))
      reply.header('connection', 'close');
  });
  app.addHook('onClose', async () => {
    if (timer) clearInterval(timer);
  });
  limitPeers(app.server, limits, logger);
}

/**
 * What each principal holds of the master's connections (the per-principal cap): its requests in flight
 * (a request is counted from its token to its answer; one past the cap is refused), and the open
 * connections whose latest request was its (one over the cap is closed after its answer instead of
 * idling, so keep-alive sockets cannot hoard an address's cap either).
 */
export class PrincipalConnections {
  private readonly inFlight = new Map<string, number>();
  private readonly owner = new WeakMap<Socket, string>();
  private readonly open = new Map<string, number>();

  constructor(readonly limit: number) {}

  /**
   * Counts a request of `principalId` on `socket` until `done` is called; answers the refusal when it
   * would pass the cap (then nothing is counted).
   */
  admit(socket: Socket, principalId: string): { limit: number; used: number } | null {
    const used = this.inFlight.get(principalId) ?? 0;
    if (used >= this.limit) return { limit: this.limit, used };
    this.inFlight.set(principalId, used + 1);
    const current = this.owner.get(socket);
    if (current !== principalId) {
      if (current === undefined) socket.once('close', () => this.closed(socket));
      else bump(this.open, current, -1);
      this.owner.set(socket, principalId);
      bump(this.open, principalId, 1);
    }
    return null;
  }

  /** The counted request of `principalId` was answered (or its connection closed). */
  done(principalId: string): void {
    bump(this.inFlight, principalId, -1);
  }

  /** Whether `socket`'s principal holds more open connections than the cap (close it after this answer). */
  overOpen(socket: Socket): boolean {
    const id = this.owner.get(socket);
    return id !== undefined && (this.open.get(id) ?? 0) > this.limit;
  }

  /** Requests `principalId` has in flight now. */
  inFlightOf(principalId: string): number {
    return this.inFlight.get(principalId) ?? 0;
  }

  private closed(socket: Socket): void {
    const id = this.owner.get(socket);
    if (id === undefined) return;
    this.owner.delete(socket);
    bump(this.open, id, -1);
  }
}

/** Adds `by` to a count, dropping it at 0. */
function bump(counts: Map<string, number>, id: string, by: number): void {
  const n = (counts.get(id) ?? 0) + by;
  if (n > 0) counts.set(id, n);
  else counts.delete(id);
}

/**
 * Answers 408 (when nothing was answered yet) and closes the connection. The request is destroyed with
 * the socket: once its answer is written, Node no longer ends a request whose socket closes, so a handler
 * still reading the body (an upload) would wait for ever, holding its slot, its disk reservation and its
 * temporary file.
 */
function cut(w: Watched, socket: Socket, err: BrokerError): void {
  const close = () => {
    w.req.raw.destroy();
    socket.destroy();
  };
  if (w.reply.sent || w.reply.raw.headersSent) {
    close();
    return;
  }
  w.reply.raw.once('finish', close);
  void w.reply.code(408).header('connection', 'close').send({ error: err.toBody() });
  // The peer may not read its answer either: the socket goes anyway.
  setTimeout(close, 1000).unref();
}

/**
 * What the per-peer cap counts as one peer: an IPv4 address (also when written IPv4-mapped, `::ffff:a.b.c.d`),
 * or an IPv6 address's /64 — one host is usually given a whole /64, so counting each of its addresses apart
 * would let one client open any number of "peers". Pure.
 */
export function peerKey(address: string | undefined): string {
  if (address === undefined) return 'unknown';
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (!address.includes(':')) return address;
  const [head = '', tail] = address.split('%')[0]!.toLowerCase().split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups =
    tail === undefined
      ? left
      : [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

/** The per-peer cap and the total cap, at accept. */
function limitPeers(server: Server, limits: ConnectionLimits, logger: Logger): void {
  if (limits.max_connections > 0) server.maxConnections = limits.max_connections;
  const open = new Map<string, number>();
  const warned = new Set<string>();
  server.on('connection', (socket: Socket) => {
    const peer = peerKey(socket.remoteAddress);
    const n = open.get(peer) ?? 0;
    if (n >= limits.max_connections_per_peer) {
      if (!warned.has(peer)) {
        warned.add(peer);
        logger.warn({ peer, limit: limits.max_connections_per_peer }, 'connections refused: per-peer cap');
      }
      socket.destroy();
      return;
    }
    open.set(peer, n + 1);
    socket.once('close', () => {
      const left = (open.get(peer) ?? 1) - 1;
      if (left > 0) open.set(peer, left);
      else {
        open.delete(peer);
        warned.delete(peer);
      }
    });
  });
}
