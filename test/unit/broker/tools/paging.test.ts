import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../../src/broker/tools/proposals.js';
import type { Principal } from '../../../../src/store/principals-repo.js';
import { type BrokerFixture, makeBrokerDeps } from '../../../support/deps.js';
import { validSpec } from '../../../support/spec.js';

/** Cursor paging of the listing tools: pages in order, no row twice, none lost, a null cursor at the end. */

let f: BrokerFixture;
let alice: Principal;
let bob: Principal;
let rita: Principal;
let n = 0;
const key = () => `p${++n}`;

beforeEach(() => {
  f = makeBrokerDeps();
  alice = f.principal('alice', ['submitter']);
  bob = f.principal('bob', ['submitter']);
  rita = f.principal('rita', ['reviewer']);
});
afterEach(() => f.close());

async function collect(who: Principal, tool: string, field: string, limit: number): Promise<string[][]> {
  const pages: string[][] = [];
  let cursor: string | null = null;
  do {
    const out = (await f.invoke(who, tool, { limit, ...(cursor ? { cursor } : {}) })) as Record<
      string,
      unknown
    >;
    const rows = out[field] as Array<{ proposal_id: string }>;
    pages.push(rows.map((r) => r.proposal_id));
    cursor = out['next_cursor'] as string | null;
  } while (cursor !== null);
  return pages;
}

describe('list paging', () => {
  it('walks list_proposals newest first and list_review_queue oldest first, each row once', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const owner = i % 2 === 0 ? alice : bob;
      const r = (await f.invoke(owner, 'create_proposal', {
        spec: validSpec(),
        idempotency_key: key(),
      })) as RevisionResult;
      await f.invoke(owner, 'confirm_revision', {
        proposal_id: r.proposal_id,
        revision_id: r.revision_id,
        idempotency_key: key(),
      });
      ids.push(r.proposal_id);
    }
    const mine = await collect(alice, 'list_proposals', 'proposals', 2);
    expect(mine.map((p) => p.length)).toEqual([2, 2]);
    expect(mine.flat()).toEqual(ids.filter((_, i) => i % 2 === 0).reverse());

    const queue = await collect(rita, 'list_review_queue', 'items', 3);
    expect(queue.map((p) => p.length)).toEqual([3, 3, 1]);
    expect(queue.flat()).toEqual(ids);
  });
});
