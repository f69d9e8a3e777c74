import { BrokerError } from '../../contracts/errors.js';
import type { ProposalRecord } from '../../store/proposals-repo.js';
import type { BrokerDeps } from '../deps.js';
import { DEFAULT_PAGE_SIZE } from './paging.js';

/**
 * The order of the review queue (docs/security.md "Fair share between principals"): owners take turns. Strictly first come, one owner's
 * 500 proposals stood before another's one, and an agent reviewer working down the queue reached the
 * one only after the 500; now the queue is every owner's oldest, then every owner's second oldest, and
 * so on (within a turn, oldest first), so a newcomer's proposal is at most one place per other owner
 * from the front.
 *
 * The cursor is `turn:id`. The order is computed per page, so a proposal that leaves the queue between
 * two pages moves its owner's later ones one turn forward: a reader paging through may miss one of them
 * on this pass (the agent loop reads the queue again on its next pass) and never sees one twice.
 */

/** A page of the queue in turn order and the cursor after it. */
export function reviewQueuePage(
  deps: Pick<BrokerDeps, 'store'>,
  q: { limit?: number | undefined; cursor?: string | undefined },
): { page: ProposalRecord[]; next_cursor: string | null } {
  const size = q.limit ?? DEFAULT_PAGE_SIZE;
  const after = parseCursor(q.cursor);
  const rows = deps.store.proposals.inReviewByTurn(after.turn, after.id, size + 1);
  const page = rows.slice(0, size);
  const last = page.at(-1);
  return {
    page,
    next_cursor: rows.length > size && last ? `${last.turn}:${last.id}` : null,
  };
}

/** `turn:id`; none is the start. */
function parseCursor(cursor: string | undefined): { turn: number; id: string } {
  if (cursor === undefined || cursor === '') return { turn: 0, id: '' };
  const m = /^(\d{1,9}):(.+)$/.exec(cursor);
  if (!m)
    throw new BrokerError(
      'INVALID_INPUT',
      `cursor ${JSON.stringify(cursor.slice(0, 40))} is not a review-queue cursor`,
      'Pass next_cursor from the previous page as it was, or no cursor for the first page.',
    );
  return { turn: Number(m[1]), id: m[2]! };
}
