import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createPrincipal, revokePrincipal } from '../../src/broker/principals.js';
import { brokerTools } from '../../src/broker/tools/catalog.js';
import { EVENTS_PATH, registerEventStream } from '../../src/http/events.js';
import { type BrokerFixture, makeBrokerDeps } from '../support/deps.js';
import { validSpec } from '../support/spec.js';
import { waitFor } from '../support/wait.js';

/**
 * `/api/v1/events` over real HTTP (loopback, no TLS) on the real app: the stream opens with `ready`,
 * names changed topics, hides other owners' ids from submitters, ends when its token is revoked, and
 * never holds up `app.close()`.
 */

interface Stream {
  status: number;
  /** Every `event: change` topic received so far. */
  topics: string[];
  events: string[];
  ended: boolean;
  abort(): void;
}

/** Opens the stream and collects what arrives in the background. */
async function openStream(url: string, token: string | null): Promise<Stream> {
  const controller = new AbortController();
  const res = await fetch(url, {
    headers: token ? { authorization: `Bearer ${token}` } : {},
    signal: controller.signal,
  });
  const stream: Stream = {
    status: res.status,
    topics: [],
    events: [],
    ended: false,
    abort: () => controller.abort(),
  };
  if (res.status !== 200 || !res.body) return stream;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  void (async () => {
    let buffer = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end = buffer.indexOf('\n\n');
        while (end >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event) stream.events.push(event);
          if (event === 'change' && data) stream.topics.push(data);
          end = buffer.indexOf('\n\n');
        }
      }
    } catch {
      // aborted
    }
    stream.ended = true;
  })();
  return stream;
}

describe('event stream', () => {
  let fx: BrokerFixture;
  let app: FastifyInstance;
  let url: string;
  const streams: Stream[] = [];

  async function start(heartbeatMs = 15_000, limits: { maxStreams?: number } = {}) {
    fx = makeBrokerDeps();
    app = await buildApp(fx.deps, {
      tools: brokerTools(),
      extend: (a) => registerEventStream(a, fx.deps, { heartbeatMs, flushMs: 20, ...limits }),
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}${EVENTS_PATH}`;
  }
  const token = (name: string, roles: Parameters<typeof createPrincipal>[1]['roles'], workerId?: string) =>
    createPrincipal(fx.deps, { name, roles, ...(workerId ? { worker_id: workerId } : {}) }, 'test').token;
  const open = async (t: string | null) => {
    const s = await openStream(url, t);
    streams.push(s);
    return s;
  };

  afterEach(async () => {
    for (const s of streams.splice(0)) s.abort();
    await app?.close();
    fx?.close();
  });

  it('limits streams per principal, and one token cannot lock the operators out', async () => {
    // docs/state-machines.md: one viewer token opened 254 streams and the operator's was refused.
    await start(15_000, { maxStreams: 40 });
    const viewers = Array.from({ length: 5 }, (_, i) => token(`viewer-${i}`, ['viewer']));
    const first = viewers[0]!;
    for (let i = 0; i < 8; i++) expect((await open(first)).status).toBe(200);
    const ninth = await fetch(url, { headers: { authorization: `Bearer ${first}` } });
    expect(ninth.status).toBe(429);
    expect(((await ninth.json()) as { error: { code: string } }).error.code).toBe('QUOTA_EXCEEDED');
    // Many viewers together fill the non-operator share (40 - 16 = 24) …
    for (const v of viewers.slice(1)) for (let i = 0; i < 8; i++) await open(v);
    const opened = streams.filter((x) => x.status === 200).length;
    expect(opened).toBe(24);
    expect(streams.filter((x) => x.status === 503)).toHaveLength(5 * 8 - 24);
    // … and the operator still gets in.
    expect((await open(token('op', ['operator']))).status).toBe(200);
    // A closed stream frees its place for its principal.
    streams[0]!.abort();
    await waitFor(
      async () => (await fetch(url, { headers: { authorization: `Bearer ${first}` } })).status !== 429,
      {
        what: 'the first viewer below its limit again',
      },
    );
  });

  it('answers 401 without a token and 403 to a worker token', async () => {
    await start();
    expect((await open(null)).status).toBe(401);
    expect((await open(token('w', ['worker'], 'w1'))).status).toBe(403);
  });

  it('opens with ready and names the topics that changed', async () => {
    await start();
    const reviewer = fx.principal('rita', ['reviewer']);
    const alice = fx.principal('alice', ['submitter']);
    const s = await open(token('rita2', ['reviewer']));
    expect(s.status).toBe(200);
    await waitFor(() => s.events.includes('ready'), { what: 'ready' });

    const created = (await fx.invoke(alice, 'create_proposal', {
      spec: validSpec(),
      idempotency_key: 'k1',
    })) as {
      proposal_id: string;
      revision_id: string;
    };
    await fx.invoke(alice, 'confirm_revision', {
      proposal_id: created.proposal_id,
      revision_id: created.revision_id,
      idempotency_key: 'k2',
    });
    await waitFor(() => s.topics.includes('review-queue'), { what: 'review-queue topic' });
    expect(s.topics).toContain(`proposal:${created.proposal_id}`);

    await fx.invoke(reviewer, 'submit_review', {
      proposal_id: created.proposal_id,
      revision_id: created.revision_id,
      decision: 'APPROVE',
      comments: 'fine',
      idempotency_key: 'k3',
    });
    await waitFor(() => s.topics.includes('tasks'), { what: 'tasks topic' });

    // Coalesced: a burst of the same topic is one event.
    for (let i = 0; i < 50; i++) fx.deps.notifier.notify('cards');
    await waitFor(() => s.topics.includes('cards'), { what: 'cards topic' });
    fx.deps.notifier.notify('marker');
    await waitFor(() => s.topics.includes('marker'), { what: 'marker topic' });
    expect(s.topics.filter((t) => t === 'cards')).toHaveLength(1);
  });

  it("hides other owners' ids from a submitter but not the id-less topics", async () => {
    await start();
    const alice = fx.principal('alice', ['submitter']);
    const bob = await open(token('bob', ['submitter']));
    const aliceStream = await open(token('alice-2', ['submitter']));
    await waitFor(() => bob.events.includes('ready') && aliceStream.events.includes('ready'), {
      what: 'ready',
    });

    const created = (await fx.invoke(alice, 'create_proposal', {
      spec: validSpec(),
      idempotency_key: 'k1',
    })) as {
      proposal_id: string;
      revision_id: string;
    };
    await fx.invoke(alice, 'confirm_revision', {
      proposal_id: created.proposal_id,
      revision_id: created.revision_id,
      idempotency_key: 'k2',
    });
    await waitFor(() => bob.topics.includes('review-queue'), { what: 'review-queue topic for bob' });
    expect(bob.topics.some((t) => t.includes(created.proposal_id))).toBe(false);
    // alice-2 is another principal too: it does not own the proposal either.
    await waitFor(() => aliceStream.topics.includes('review-queue'), {
      what: 'review-queue topic for alice-2',
    });
    expect(aliceStream.topics.some((t) => t.includes(created.proposal_id))).toBe(false);
  });

  it('ends the stream at the next heartbeat once its token is revoked', async () => {
    await start(50);
    const s = await open(token('viewer', ['viewer']));
    await waitFor(() => s.events.includes('ready'), { what: 'ready' });
    revokePrincipal(fx.deps, 'viewer', 'test');
    await waitFor(() => s.ended, { what: 'the stream to end', timeoutMs: 5_000 });
  });

  it('does not hold up app.close()', async () => {
    await start();
    const s = await open(token('viewer', ['viewer']));
    await waitFor(() => s.events.includes('ready'), { what: 'ready' });
    await app.close();
    await waitFor(() => s.ended, { what: 'the stream to end', timeoutMs: 5_000 });
  });
});
