import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { BrokerDeps } from '../broker/deps.js';
import { authenticate, bearerToken, canReadAll } from '../broker/principals.js';
import { BrokerError } from '../contracts/errors.js';
import type { Principal } from '../store/principals-repo.js';

/**
 * `GET /api/v1/events`: the dashboard's live updates as server-sent events. Each event names a topic that
 * changed (`event: change`, `data: tasks`, `data: task:<id>`, `data: cards`, …) and nothing else: the page
 * re-reads the affected views through the REST API, with the same authorisation as any other read.
 *
 * The stream needs a bearer token like every data route. The dashboard reads it with fetch (a readable
 * body stream), not EventSource, so the token stays in a header and out of URLs and logs.
 *  - Topics are coalesced per stream over a short window: a burst of log chunks is one event.
 *  - Topics that carry an id reach a submitter only for its own task or proposal (other owners' ids are
 *    not shown to it anywhere else either), and `qualification:<run>` reaches operators only; the
 *    id-less topics reach everyone.
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
}

const ID_TOPIC = /^(task|logs|proposal):(.+)$/;

/** Whether `principal` may learn that `topic` changed. */
function maySee(deps: BrokerDeps, principal: Principal, topic: string): boolean {
  // Qualification runs are operators' business (their tools are operator-only).
  if (topic.startsWith('qualification:')) return principal.roles.includes('operator');
  const m = ID_TOPIC.exec(topic);
  if (!m || canReadAll(principal)) return true;
  const id = m[2] ?? '';
  const owner =
    m[1] === 'proposal' ? deps.store.proposals.get(id)?.owner_id : deps.store.tasks.get(id)?.owner_id;
  return owner === principal.id;
}

/** Registers the event stream route on the app. */
export function registerEventStream(
  app: FastifyInstance,
  deps: BrokerDeps,
  opts: EventStreamOptions = {},
): void {
  const heartbeatMs = opts.heartbeatMs ?? 15_000;
  const flushMs = opts.flushMs ?? 100;
  const maxStreams = opts.maxStreams ?? 256;
  const open = new Set<ServerResponse>();

  app.addHook('preClose', async () => {
    for (const res of open) res.end();
  });

  app.get(EVENTS_PATH, async (req, reply) => {
    if (open.size >= maxStreams)
      throw new BrokerError(
        'UNAVAILABLE',
        'too many open event streams',
        'Close other dashboard tabs, then retry.',
      );
    const principal = req.principal!;
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
        visible = maySee(deps, principal, topic);
      } catch (err) {
        deps.logger.warn({ err, topic }, 'event stream: could not check a topic');
      }
      if (!visible) return;
      pending.add(topic);
      flushTimer ??= setTimeout(flush, flushMs);
    });
    const beat = setInterval(() => {
      try {
        authenticate(deps, token);
      } catch {
        res.end();
        return;
      }
      if (!res.writableNeedDrain) res.write(': ping\n\n');
    }, heartbeatMs);
    res.on('drain', () => {
      if (pending.size > 0) flushTimer ??= setTimeout(flush, 0);
    });
    res.on('close', () => {
      open.delete(res);
      clearInterval(beat);
      clearTimeout(flushTimer);
      unsubscribe();
    });
  });
}
