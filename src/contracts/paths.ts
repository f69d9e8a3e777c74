/**
 * The HTTP paths both ends of the worker link use: the WSS endpoint a worker connects to and the route
 * it fetches inputs from with its worker token. Defined once, here, for the master (src/app.ts,
 * src/ws/hub.ts, src/http/blobs.ts) and the worker.
 */

/** The path workers connect to over WSS. */
export const WORKER_CONNECT_PATH = '/api/v1/workers/connect';

/** The route (fastify pattern) a worker fetches an input of one of its own executions from. */
export const WORKER_INPUT_ROUTE = '/api/v1/executions/:execution_id/inputs/:sha256';

/** Paths a worker token may use besides the WSS endpoint: {@link WORKER_INPUT_ROUTE} with a sha256. */
export const WORKER_INPUT_PATH = /^\/api\/v1\/executions\/[^/]+\/inputs\/[0-9a-f]{64}$/;

/** The path of one input of one execution, as a worker requests it ({@link WORKER_INPUT_ROUTE}). */
export function workerInputPath(executionId: string, sha256: string): string {
  return `/api/v1/executions/${encodeURIComponent(executionId)}/inputs/${sha256}`;
}
