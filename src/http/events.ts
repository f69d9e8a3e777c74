import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { BrokerDeps } from '../broker/deps.js';
import { admitStream, authenticate, bearerToken, maySeeTopic, type Principal } from '../broker/principals.js';
import { BrokerError } from '../contracts/errors.js';

/**
 * `GET /api/v1/events`: the dashboard's live updates as server-sent events. Each event names a topic that
 * changed (`event: change`, `data: tasks`, `data: task:<id>`, `data: cards`, …) and nothing else: the page
 * re-reads the affected views through the REST API, with the same authorisation as any other read.
 *
 * The stream needs a bearer token like every data route. The dashboard reads it with fetch (a readable
 * body stream), not EventSource, so the token stays in a header and out of URLs and logs.
 *  - Topics are coalesced per stream over a short window: a burst of log chunks is one event.
 *  - Which topics reach which principal, and whether one more stream may open, are the broker's
 *    principal rules (`maySeeTopic`, `admitStream` in src/broker/principals.ts): this route only counts
 *    its streams, asks, and writes.
 *  - A comment line every `heartbeatMs` keeps proxies from closing an idle stream; at each heartbeat the
 *    token is checked again, so a revoked token loses its stream within one interval.
 *  - Streams are ended before the server closes (an open response would hold `app.close()` for ever).
 */

/** Path of the event stream. */
export const EVENTS_PATH = '/api/v1/events';

/** Tunables of the stream (tests shorten them). */
export interface EventStreamOptions {
  /** Default 15 s. */
  heartbeatMs?: number;
  /** Coalescing window, default 100 ms. */
  flushMs?: number;
  /** Open streams at most, default 256; more answer UNAVAILABLE. */
  maxStreams?: number;
  /** Open streams of one principal at most, default 8; more answer QUOTA_EXCEEDED. */
  maxStreamsPerPrincipal?: number;
  /** Of `maxStreams`, how many only operators may take, default 16: nobody else can lock them out. */
  operatorReserve?: number;
}

/** Why a stream is refused: the principal's own limit, or the whole master's. */
function streamRefusal(
  code: 'QUOTA_EXCEEDED' | 'UNAVAILABLE',
  principal: Principal,
  mine: number,
  perPrincipal: number,
): BrokerError {
  return code === 'QUOTA_EXCEEDED'
    ? new BrokerError(
        'QUOTA_EXCEEDED',
        `${principal.name} already has ${mine} open event streams (the limit is ${perPrincipal})`,
        'Close other dashboard tabs of this token, then retry.',
      )
    : new BrokerError(
        'UNAVAILABLE',
        'too many open event streams',
        'Close other dashboard tabs, then retry; operators keep a reserve of streams.',
      );
}

/**
 * Feeds one open stream: the topics this principal may see, each once per flush (`flushMs` after the
 * first), held while the socket drains; a heartbeat that also ends the stream once the token no longer
 * authenticates. Returns what stops it.
 */
function pumpChanges(
  deps: BrokerDeps,
  principal: Principal,
  token: string | undefined,
  res: ServerResponse,
  timing: { flushMs: number; heartbeatMs: number },
): () => void {
  const pending = new Set<string>();
  let flushTimer: NodeJS.Timeout | undefined;
  const flush = () => {
    flushTimer = undefined;
    if (res.writableNeedDrain) return; // 'drain' resumes; meanwhile the set holds each topic once
    const text = [...pending].map((t) => `event: change\ndata: ${t}\n\n`).join('');
    pending.clear();
    if (text) res.write(text);
  };
  const unsubscribe = deps.notifier.onAny((topic) => {
    let visible = false;
    try {
      visible = maySeeTopic(deps, principal, topic);
    } catch (err) {
      deps.logger.warn({ err, topic }, 'event stream: could not check a topic');
    }
    if (!visible) return;
    pending.add(topic);
    flushTimer ??= setTimeout(flush, timing.flushMs);
  });
  const beat = setInterval(() => {
    try {
      authenticate(deps, token);
    } catch {
      res.end();
      return;
    }
    if (!res.writableNeedDrain) res.write(': ping\n\n');
  }, timing.heartbeatMs);
  res.on('drain', () => {
    if (pending.size > 0) flushTimer ??= setTimeout(flush, 0);
  });
  return () => {
    clearInterval(beat);
    clearTimeout(flushTimer);
    unsubscribe();
  };
}

/** Registers the event stream route on the app. */
export function registerEventStream(
  app: FastifyInstance,
  deps: BrokerDeps,
  opts: EventStreamOptions = {},
): void {
  const timing = { heartbeatMs: opts.heartbeatMs ?? 15_000, flushMs: opts.flushMs ?? 100 };
  const limits = {
    max: opts.maxStreams ?? 256,
    perPrincipal: opts.maxStreamsPerPrincipal ?? 8,
    operatorReserve: opts.operatorReserve ?? 16,
  };
  const open = new Set<ServerResponse>();
  const perPrincipal = new Map<string, number>();

  app.addHook('preClose', async () => {
    for (const res of open) res.end();
  });

  app.get(EVENTS_PATH, async (req, reply) => {
    const principal = req.principal!;
    const mine = perPrincipal.get(principal.id) ?? 0;
    const admitted = admitStream({ total: open.size, ofPrincipal: mine }, principal, limits);
    if (!admitted.ok) throw streamRefusal(admitted.code, principal, mine, limits.perPrincipal);
    const token = bearerToken(req.headers.authorization);
    const res = reply.raw;
    reply.hijack();
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store, no-transform',
      'x-accel-buffering': 'no',
    });
    // `ready` tells the page the stream is live: it re-reads everything it may have missed meanwhile.
    res.write('retry: 2000\n\nevent: ready\ndata: ok\n\n');
    open.add(res);
    perPrincipal.set(principal.id, mine + 1);

    const stop = pumpChanges(deps, principal, token, res, timing);
    res.on('close', () => {
      open.delete(res);
      const left = (perPrincipal.get(principal.id) ?? 1) - 1;
      if (left > 0) perPrincipal.set(principal.id, left);
      else perPrincipal.delete(principal.id);
      stop();
    });
  });
}
