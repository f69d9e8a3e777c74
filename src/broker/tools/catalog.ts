import * as AC from '../../contracts/tools-accounts.js';
import * as A from '../../contracts/tools-agent-review.js';
import * as C from '../../contracts/tools-cluster.js';
import * as G from '../../contracts/tools-grants.js';
import * as I from '../../contracts/tools-inputs.js';
import * as P from '../../contracts/tools-proposals.js';
import * as Q from '../../contracts/tools-qualification.js';
import * as T from '../../contracts/tools-tasks.js';
import { createAccount, deleteAccount, getUsage, listAccounts, setAccount } from './accounts.js';
import { getQueue, listCards, listWorkers, removeWorker, setCordon, setDraining } from './cluster.js';
import type { BoundTool } from './dispatch.js';
import { bindTool } from './dispatch.js';
import { confirmRevisionWithGrants, explainGrant } from './grant-approval.js';
import { getGrant } from './grant-receipts.js';
import { decideGrant, listGrants, requestGrant, revokeGrant } from './grants.js';
import { getInput, uploadInputs } from './inputs.js';
import {
  cancelProposal,
  createProposal,
  getProposal,
  inspectionSteps,
  listProposals,
  reviseProposal,
  waitForProposal,
} from './proposals.js';
import {
  cancelQualification,
  getQualificationRun,
  listQualificationRuns,
  startQualification,
} from './qualification.js';
import { getReviewPrompt } from './review-prompt.js';
import { getRevision, listReviewQueue, submitReview } from './reviews.js';
import { getStatus } from './status.js';
import { getTaskLogs, getTaskOutputs } from './task-results.js';
import { cancelTask, getTask, listTasks, reconcileTask, waitForTask } from './tasks.js';

/** Default wait when a client gives no timeout_seconds. */
const DEFAULT_WAIT_SECONDS = 20;

/** Every tool, bound to its use case. MCP and REST both serve this list. */
export function brokerTools(): BoundTool[] {
  return [
    bindTool(AC.listAccountsTool, ({ deps }) => listAccounts(deps), 'light'),
    bindTool(
      AC.createAccountTool,
      ({ deps, principal }, i) => createAccount(deps, principal.name, i),
      'light',
    ),
    bindTool(AC.setAccountTool, ({ deps, principal }, i) => setAccount(deps, principal.name, i), 'light'),
    bindTool(
      AC.deleteAccountTool,
      ({ deps, principal }, i) => deleteAccount(deps, principal.name, i.name),
      'light',
    ),
    bindTool(AC.getUsageTool, ({ deps, principal }, i) => getUsage(deps, principal, i), 'heavy'),
    bindTool(
      P.createProposalTool,
      ({ deps, principal, spec }, i) => createProposal(deps, principal, i.spec, spec),
      'heavy',
      ({ deps, principal }, i) => inspectionSteps(deps, principal.id, i.spec),
    ),
    bindTool(
      P.reviseProposalTool,
      ({ deps, principal, spec }, i) => reviseProposal(deps, principal, i.proposal_id, i.spec, spec),
      'heavy',
      ({ deps, principal }, i) => inspectionSteps(deps, principal.id, i.spec),
    ),
    bindTool(
      P.confirmRevisionTool,
      ({ deps, principal }, i) => confirmRevisionWithGrants(deps, principal, i.proposal_id, i.revision_id),
      'light',
    ),
    bindTool(
      P.getProposalTool,
      ({ deps, principal }, i) => ({
        proposal: getProposal(deps, principal, i.proposal_id),
      }),
      'light',
    ),
    bindTool(P.listProposalsTool, ({ deps, principal }, i) => listProposals(deps, principal, i), 'heavy'),
    bindTool(
      P.waitForProposalTool,
      ({ deps, principal, signal }, i) =>
        waitForProposal(deps, principal, i.proposal_id, i.timeout_seconds ?? DEFAULT_WAIT_SECONDS, signal),
      'wait',
    ),
    bindTool(
      P.cancelProposalTool,
      ({ deps, principal }, i) => cancelProposal(deps, principal, i.proposal_id),
      'light',
    ),
    bindTool(I.uploadInputsTool, ({ deps, principal }, i) => uploadInputs(deps, principal, i.files), 'light'),
    bindTool(I.getInputTool, ({ deps, principal }, i) => getInput(deps, principal, i), 'heavy'),
    bindTool(P.listReviewQueueTool, ({ deps, principal }, i) => listReviewQueue(deps, principal, i), 'heavy'),
    bindTool(
      P.getRevisionTool,
      ({ deps, principal, signal }, i) =>
        getRevision(
          deps,
          principal,
          i.proposal_id,
          i.revision_id,
          i.diff_lines,
          { path: i.diff_path, offset: i.diff_offset },
          signal,
        ),
      'heavy',
    ),
    bindTool(P.submitReviewTool, ({ deps, principal }, i) => submitReview(deps, principal, i), 'light'),
    bindTool(A.getReviewPromptTool, ({ deps, principal }, i) => getReviewPrompt(deps, principal, i), 'heavy'),
    bindTool(
      T.getTaskTool,
      ({ deps, principal }, i) => ({
        task: getTask(deps, principal, i.task_id),
      }),
      'light',
    ),
    bindTool(T.listTasksTool, ({ deps, principal }, i) => listTasks(deps, principal, i), 'heavy'),
    bindTool(
      T.waitForTaskTool,
      ({ deps, principal, signal }, i) =>
        waitForTask(deps, principal, i.task_id, i.timeout_seconds ?? DEFAULT_WAIT_SECONDS, signal),
      'wait',
    ),
    bindTool(T.cancelTaskTool, ({ deps, principal }, i) => cancelTask(deps, principal, i.task_id), 'light'),
    bindTool(T.getTaskLogsTool, ({ deps, principal }, i) => getTaskLogs(deps, principal, i), 'heavy'),
    bindTool(T.getTaskOutputsTool, ({ deps, principal }, i) => getTaskOutputs(deps, principal, i), 'heavy'),
    bindTool(C.listCardsTool, ({ deps, principal }, i) => listCards(deps, principal, i.worker_id), 'heavy'),
    bindTool(C.getQueueTool, ({ deps, principal }) => getQueue(deps, principal), 'heavy'),
    bindTool(C.listWorkersTool, ({ deps }) => listWorkers(deps), 'heavy'),
    bindTool(
      C.drainWorkerTool,
      ({ deps, principal }, i) => setDraining(deps, principal, i.worker_id, true),
      'light',
    ),
    bindTool(
      C.undrainWorkerTool,
      ({ deps, principal }, i) => setDraining(deps, principal, i.worker_id, false),
      'light',
    ),
    bindTool(
      C.removeWorkerTool,
      ({ deps, principal }, i) => removeWorker(deps, principal, i.worker_id),
      'light',
    ),
    bindTool(
      C.cordonCardTool,
      ({ deps, principal }, i) => setCordon(deps, principal, i.worker_id, i.index, true, i.reason),
      'light',
    ),
    bindTool(
      C.uncordonCardTool,
      ({ deps, principal }, i) => setCordon(deps, principal, i.worker_id, i.index, false),
      'light',
    ),
    bindTool(C.getStatusTool, ({ deps, principal }) => getStatus(deps, principal), 'heavy'),
    bindTool(
      C.reconcileTaskTool,
      ({ deps, principal }, i) => reconcileTask(deps, principal, i.task_id, i.resolution, i.reason, i.force),
      'light',
    ),
    bindTool(
      Q.startQualificationTool,
      ({ deps, principal }, i) => startQualification(deps, principal, i),
      'light',
    ),
    bindTool(Q.getQualificationRunTool, ({ deps }, i) => getQualificationRun(deps, i.run_id), 'heavy'),
    bindTool(Q.listQualificationRunsTool, ({ deps }, i) => listQualificationRuns(deps, i), 'heavy'),
    bindTool(
      Q.cancelQualificationTool,
      ({ deps, principal }, i) => cancelQualification(deps, principal, i.run_id),
      'light',
    ),
    ...grantTools(),
  ];
}

/** The standing-grant tools (ADR 0029). */
function grantTools(): BoundTool[] {
  return [
    bindTool(G.requestGrantTool, ({ deps, principal }, i) => requestGrant(deps, principal, i), 'heavy'),
    bindTool(G.decideGrantTool, ({ deps, principal }, i) => decideGrant(deps, principal, i), 'light'),
    bindTool(G.revokeGrantTool, ({ deps, principal }, i) => revokeGrant(deps, principal, i), 'light'),
    bindTool(
      G.explainGrantTool,
      ({ deps, principal }, i) => explainGrant(deps, principal, i),
      'heavy',
      // A spec's new inputs are inspected one part each first (a revision's were when it was made).
      ({ deps, principal }, i) => (i.spec ? inspectionSteps(deps, principal.id, i.spec) : []),
    ),
    bindTool(G.listGrantsTool, ({ deps, principal }, i) => listGrants(deps, principal, i), 'heavy'),
    bindTool(G.getGrantTool, ({ deps, principal }, i) => getGrant(deps, principal, i.grant_id), 'heavy'),
  ];
}
