import type { FastifyInstance } from 'fastify';
import type { BrokerDeps } from '../broker/deps.js';
import { blobForExecution, putBlob } from '../broker/tools/inputs.js';
import { BrokerError } from '../contracts/errors.js';
import { WORKER_INPUT_ROUTE } from '../contracts/paths.js';

/**
 * The two byte routes of inputs (issue 13), beside the JSON REST mirror:
 *
 *   PUT /api/v1/blobs/{sha256}          a submitter uploads raw bytes (larger files, the CLI); the server
 *                                       recomputes the digest and refuses a mismatch. Content-addressed,
 *                                       so naturally idempotent: no Idempotency-Key.
 *   GET /api/v1/executions/{execution_id}/inputs/{sha256}
 *                                       a worker fetches an input of one of its own executions, with its
 *                                       worker token (auth.ts lets worker tokens in here and nowhere else
 *                                       but the WSS endpoint).
 */

const SHA256 = /^[0-9a-f]{64}$/;

/** Registers the routes; `maxBlobBytes` bounds one PUT body. */
export function registerBlobRoutes(app: FastifyInstance, deps: BrokerDeps, maxBlobBytes: number): void {
  app.addContentTypeParser(
    'application/octet-stream',
    { parseAs: 'buffer', bodyLimit: maxBlobBytes },
    (_req, body, done) => done(null, body),
  );
  app.put<{ Params: { sha256: string } }>(
    '/api/v1/blobs/:sha256',
    { bodyLimit: maxBlobBytes },
    async (req) => {
      const { sha256 } = req.params;
      if (!SHA256.test(sha256))
        throw new BrokerError(
          'INVALID_INPUT',
          `${sha256} is not a sha256`,
          'Use the lowercase hex sha256 of the bytes.',
        );
      const principal = req.principal!;
      if (!principal.roles.includes('submitter'))
        throw new BrokerError(
          'FORBIDDEN',
          'uploading inputs needs the submitter role',
          'Use a submitter token.',
        );
      if (!Buffer.isBuffer(req.body))
        throw new BrokerError(
          'INVALID_INPUT',
          'the body must be the raw bytes',
          'Send Content-Type: application/octet-stream with the file as the body.',
        );
      const body = req.body;
      deps.storage?.assertAcceptsGrowth('input upload');
      return deps.store.transaction(() => putBlob(deps, principal, sha256, body));
    },
  );
  app.get<{ Params: { execution_id: string; sha256: string } }>(WORKER_INPUT_ROUTE, async (req, reply) => {
    const principal = req.principal!;
    const workerId = principal.worker_id;
    if (!principal.roles.includes('worker') || !workerId)
      throw new BrokerError('FORBIDDEN', 'only worker tokens fetch execution inputs', 'Use get_input.');
    const bytes = blobForExecution(deps, workerId, req.params.execution_id, req.params.sha256);
    return reply.header('Content-Type', 'application/octet-stream').send(bytes);
  });
}
