import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { BrokerDeps } from '../broker/deps.js';
import { type BoundTool, invokeTool } from '../broker/tools/dispatch.js';
import { BrokerError } from '../contracts/errors.js';

/**
 * REST mirrors the tools under /api/v1 with the same schemas and the same dispatcher. A route names a
 * tool and says where its input comes from (path params, query, body); mutating routes take the
 * `Idempotency-Key` header as `idempotency_key`.
 */

/** One REST route onto one tool. */
export interface RestRoute {
  method: 'GET' | 'POST';
  url: string;
  tool: string;
}

/** The routes. Adding a tool to REST is one line here. */
export const REST_ROUTES: RestRoute[] = [
  { method: 'GET', url: '/api/v1/proposals', tool: 'list_proposals' },
  { method: 'POST', url: '/api/v1/proposals', tool: 'create_proposal' },
  { method: 'GET', url: '/api/v1/proposals/:proposal_id', tool: 'get_proposal' },
  { method: 'GET', url: '/api/v1/proposals/:proposal_id/wait', tool: 'wait_for_proposal' },
  { method: 'POST', url: '/api/v1/proposals/:proposal_id/revisions', tool: 'revise_proposal' },
  { method: 'GET', url: '/api/v1/proposals/:proposal_id/revisions/:revision_id', tool: 'get_revision' },
  {
    method: 'GET',
    url: '/api/v1/proposals/:proposal_id/revisions/:revision_id/input',
    tool: 'get_input',
  },
  { method: 'POST', url: '/api/v1/inputs', tool: 'upload_inputs' },
  { method: 'POST', url: '/api/v1/proposals/:proposal_id/confirm', tool: 'confirm_revision' },
  { method: 'POST', url: '/api/v1/proposals/:proposal_id/reviews', tool: 'submit_review' },
  { method: 'POST', url: '/api/v1/proposals/:proposal_id/cancel', tool: 'cancel_proposal' },
  { method: 'GET', url: '/api/v1/review-queue', tool: 'list_review_queue' },
  { method: 'GET', url: '/api/v1/proposals/:proposal_id/review-prompt', tool: 'get_review_prompt' },
  { method: 'GET', url: '/api/v1/tasks', tool: 'list_tasks' },
  { method: 'GET', url: '/api/v1/tasks/:task_id', tool: 'get_task' },
  { method: 'GET', url: '/api/v1/tasks/:task_id/wait', tool: 'wait_for_task' },
  { method: 'POST', url: '/api/v1/tasks/:task_id/cancel', tool: 'cancel_task' },
  { method: 'GET', url: '/api/v1/tasks/:task_id/logs', tool: 'get_task_logs' },
  { method: 'GET', url: '/api/v1/tasks/:task_id/outputs', tool: 'get_task_outputs' },
  { method: 'GET', url: '/api/v1/cards', tool: 'list_cards' },
  { method: 'GET', url: '/api/v1/queue', tool: 'get_queue' },
  { method: 'GET', url: '/api/v1/workers', tool: 'list_workers' },
  { method: 'GET', url: '/api/v1/status', tool: 'get_status' },
  { method: 'POST', url: '/api/v1/workers/:worker_id/drain', tool: 'drain_worker' },
  { method: 'POST', url: '/api/v1/workers/:worker_id/undrain', tool: 'undrain_worker' },
  { method: 'POST', url: '/api/v1/workers/:worker_id/remove', tool: 'remove_worker' },
  { method: 'POST', url: '/api/v1/workers/:worker_id/cards/:index/cordon', tool: 'cordon_card' },
  { method: 'POST', url: '/api/v1/workers/:worker_id/cards/:index/uncordon', tool: 'uncordon_card' },
  { method: 'POST', url: '/api/v1/tasks/:task_id/reconcile', tool: 'reconcile_task' },
  { method: 'GET', url: '/api/v1/qualifications', tool: 'list_qualification_runs' },
  { method: 'POST', url: '/api/v1/qualifications', tool: 'start_qualification' },
  { method: 'GET', url: '/api/v1/qualifications/:run_id', tool: 'get_qualification_run' },
  { method: 'POST', url: '/api/v1/qualifications/:run_id/cancel', tool: 'cancel_qualification' },
  { method: 'GET', url: '/api/v1/grants', tool: 'list_grants' },
  { method: 'POST', url: '/api/v1/grants', tool: 'request_grant' },
  { method: 'POST', url: '/api/v1/grants/explain', tool: 'explain_grant' },
  { method: 'GET', url: '/api/v1/grants/:grant_id', tool: 'get_grant' },
  { method: 'POST', url: '/api/v1/grants/:grant_id/decide', tool: 'decide_grant' },
  { method: 'POST', url: '/api/v1/grants/:grant_id/revoke', tool: 'revoke_grant' },
  { method: 'GET', url: '/api/v1/accounts', tool: 'list_accounts' },
  { method: 'POST', url: '/api/v1/accounts', tool: 'create_account' },
  { method: 'POST', url: '/api/v1/accounts/:name', tool: 'set_account' },
  { method: 'POST', url: '/api/v1/accounts/:name/delete', tool: 'delete_account' },
  { method: 'GET', url: '/api/v1/usage', tool: 'get_usage' },
];

const NUMERIC = /^(limit|timeout_seconds|offset|tail_lines|max_bytes|index|diff_lines|diff_offset)$/;

/** Query strings carry text; numeric parameters are converted before the schema sees them. */
function coerce(values: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(values)) {
    out[k] = typeof v === 'string' && NUMERIC.test(k) && /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v;
  }
  return out;
}

function inputOf(req: FastifyRequest, route: RestRoute, tool: BoundTool): Record<string, unknown> {
  const body = req.body ?? {};
  if (route.method === 'POST' && (typeof body !== 'object' || Array.isArray(body)))
    throw new BrokerError(
      'INVALID_INPUT',
      'the body must be a JSON object',
      'Send Content-Type: application/json.',
    );
  const input: Record<string, unknown> = {
    ...coerce(req.query as Record<string, unknown>),
    ...(route.method === 'POST' ? (body as Record<string, unknown>) : {}),
    ...coerce(req.params as Record<string, unknown>),
  };
  if (tool.mutating) {
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string' || key.length === 0)
      throw new BrokerError(
        'INVALID_INPUT',
        'missing Idempotency-Key header',
        'Send a unique Idempotency-Key (e.g. a UUID) with every mutating call.',
      );
    input['idempotency_key'] = key;
  }
  return input;
}

/** Registers every REST route whose tool exists in the catalog. */
export function registerRestRoutes(
  app: FastifyInstance,
  deps: BrokerDeps,
  tools: ReadonlyMap<string, BoundTool>,
): void {
  for (const route of REST_ROUTES) {
    const tool = tools.get(route.tool);
    if (!tool) continue;
    app.route({
      method: route.method,
      url: route.url,
      handler: async (req, reply) => {
        // The response closing before we answered means the client went away: stop waiting.
        const abort = new AbortController();
        reply.raw.on('close', () => abort.abort());
        return invokeTool(
          tool,
          { deps, principal: req.principal!, signal: abort.signal },
          inputOf(req, route, tool),
        );
      },
    });
  }
}
