import * as P from '../contracts/tools-proposals.js';
import * as T from '../contracts/tools-tasks.js';
import type { BoundTool } from './dispatch.js';
import { bindTool } from './dispatch.js';
import {
  cancelProposal,
  confirmRevision,
  createProposal,
  getProposal,
  listProposals,
  reviseProposal,
  waitForProposal,
} from './proposals.js';
import { getRevision, listReviewQueue, submitReview } from './reviews.js';
import { getTask, listTasks, waitForTask } from './tasks.js';

/** Default wait when a client gives no timeout_seconds. */
const DEFAULT_WAIT_SECONDS = 20;

/** The proposal, review and task-reading tools, bound to their use cases. */
export function coreTools(): BoundTool[] {
  return [
    bindTool(P.createProposalTool, ({ deps, principal }, i) => createProposal(deps, principal, i.spec)),
    bindTool(P.reviseProposalTool, ({ deps, principal }, i) =>
      reviseProposal(deps, principal, i.proposal_id, i.spec),
    ),
    bindTool(P.confirmRevisionTool, ({ deps, principal }, i) =>
      confirmRevision(deps, principal, i.proposal_id, i.revision_id),
    ),
    bindTool(P.getProposalTool, ({ deps, principal }, i) => ({
      proposal: getProposal(deps, principal, i.proposal_id),
    })),
    bindTool(P.listProposalsTool, ({ deps, principal }, i) => listProposals(deps, principal, i)),
    bindTool(P.waitForProposalTool, ({ deps, principal, signal }, i) =>
      waitForProposal(deps, principal, i.proposal_id, i.timeout_seconds ?? DEFAULT_WAIT_SECONDS, signal),
    ),
    bindTool(P.cancelProposalTool, ({ deps, principal }, i) =>
      cancelProposal(deps, principal, i.proposal_id),
    ),
    bindTool(P.listReviewQueueTool, ({ deps, principal }, i) => listReviewQueue(deps, principal, i)),
    bindTool(P.getRevisionTool, ({ deps, principal }, i) =>
      getRevision(deps, principal, i.proposal_id, i.revision_id),
    ),
    bindTool(P.submitReviewTool, ({ deps, principal }, i) => submitReview(deps, principal, i)),
    bindTool(T.getTaskTool, ({ deps, principal }, i) => ({
      task: getTask(deps, principal, i.task_id, deps.placement),
    })),
    bindTool(T.listTasksTool, ({ deps, principal }, i) => listTasks(deps, principal, i)),
    bindTool(T.waitForTaskTool, ({ deps, principal, signal }, i) =>
      waitForTask(
        deps,
        principal,
        i.task_id,
        i.timeout_seconds ?? DEFAULT_WAIT_SECONDS,
        deps.placement,
        signal,
      ),
    ),
  ];
}
