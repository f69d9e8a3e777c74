import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { costSharesOf } from '../../../src/broker/tools/tool-cost.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { errorCode, openRaw, type RawConnection, requestHead } from '../../support/raw-http.js';
import { validSpec } from '../../support/spec.js';
import { waitFor } from '../../support/wait.js';

/**
 * docs/security.md "Fair share between principals" with a real master on loopback: connections count per principal as well as per
 * address. One principal has at most `max_connections_per_principal` requests in flight (the next is
 * 429 QUOTA_EXCEEDED and its connection closes) and keeps no more idle connections than that, so another
 * principal behind the same address keeps the rest of the address's cap and is served.
 */

let m: TestMaster;
let flooder: string;
let other: string;

beforeAll(async () => {
  m = await startTestMaster({
    config: {
      tls: { mode: 'off' },
      http: { max_connections_per_peer: 8, max_connections_per_principal: 3, keep_alive_timeout_ms: 30_000 },
    },
  });
  flooder = m.createToken('flooder', ['submitter']);
  other = m.createToken('other', ['submitter']);
});

afterAll(async () => {
  await m?.close();
});

const status = (c: RawConnection, token: string) =>
  c.socket.write(requestHead('GET', '/api/v1/status', { authorization: `Bearer ${token}` }));

/** A long-poll of `token` on `proposalId` (25 s), on its own raw connection. */
async function longPoll(token: string, proposalId: string): Promise<RawConnection> {
  const c = await openRaw(m.url);
  c.socket.write(
    requestHead('GET', `/api/v1/proposals/${proposalId}/wait?timeout_seconds=25`, {
      authorization: `Bearer ${token}`,
    }),
  );
  return c;
}

describe('connections per principal', () => {
  it("one principal's requests in flight are capped; another principal on the same address is served", async () => {
    const rest = m.rest(flooder);
    const created = await rest.post<{ proposal_id: string; revision_id: string }>('/api/v1/proposals', {
      spec: validSpec(),
    });
    const { proposal_id, revision_id } = created.body;
    await rest.post(`/api/v1/proposals/${proposal_id}/confirm`, { revision_id });
    const held = await Promise.all([1, 2, 3].map(() => longPoll(flooder, proposal_id)));
    const flooderId = m.store.principals.findByName('flooder')!.id;
    await waitFor(() => costSharesOf(m.deps).waits.heldBy(flooderId) === 3, { what: 'the polls held' });
    const fourth = await openRaw(m.url);
    status(fourth, flooder);
    const refused = await fourth.response;
    expect(refused.status).toBe(429);
    expect(errorCode(refused)).toBe('QUOTA_EXCEEDED');
    expect(refused.headers['connection']).toBe('close');
    await fourth.closed;
    // The same address, another principal: served, on fresh connections, while the three are held.
    for (let i = 0; i < 3; i++) {
      const c = await openRaw(m.url);
      status(c, other);
      expect((await c.response).status).toBe(200);
      c.socket.destroy();
    }
    expect(held.every((c) => !c.isClosed())).toBe(true);
    // One of the flooder's long-polls goes away: its place is free again.
    held.pop()!.socket.destroy();
    await waitFor(
      async () => {
        const again = await openRaw(m.url);
        status(again, flooder);
        const ok = await again.response.then(
          (r) => r.status === 200,
          () => false,
        );
        again.socket.destroy();
        return ok;
      },
      { what: 'the flooder served again' },
    );
    for (const c of held) c.socket.destroy();
  });

  it("a principal's idle connections over the cap are closed after their answer, not kept alive", async () => {
    const idle: RawConnection[] = [];
    for (let i = 0; i < 4; i++) {
      const c = await openRaw(m.url);
      status(c, other);
      const r = await c.response;
      expect(r.status).toBe(200);
      expect(r.headers['connection']).toBe(i < 3 ? 'keep-alive' : 'close');
      idle.push(c);
    }
    await idle[3]!.closed;
    expect(idle.slice(0, 3).every((c) => !c.isClosed())).toBe(true);
    for (const c of idle) c.socket.destroy();
  });
});
