import type { FastifyError, FastifyInstance } from 'fastify';
import { storageRefusal } from '../broker/storage-refusal.js';
import { BrokerError, HTTP_STATUS, toErrorBody } from '../contracts/errors.js';
import type { Logger } from '../platform/logger.js';

/** Fastify's refusal of a request as the BrokerError it answers, or null for any other error. */
function requestRefusal(err: FastifyError): BrokerError | null {
  if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
    return new BrokerError(
      'PAYLOAD_TOO_LARGE',
      'request body too large',
      'Specs are limited to 256 KiB; bodies to 1 MiB.',
    );
  if (err.code?.startsWith('FST_ERR_CTP') || err.statusCode === 400 || err.validation)
    return new BrokerError(
      'INVALID_INPUT',
      `bad request: ${err.message}`,
      'Send a JSON body with Content-Type: application/json.',
    );
  return null;
}

/** Maps every error to `{error: {code, message, hint, retryable}}` with the status from the one table. */
export function installErrorHandling(
  app: FastifyInstance,
  logger: Logger,
  /** Told about a storage write failure that escaped a store transaction (the storage guard listens). */
  onStorageFailure: (detail: string) => void = () => undefined,
): void {
  app.setErrorHandler<FastifyError>((err, _req, reply) => {
    // A BrokerError is itself; a write outside a store transaction that failed for space (transactions
    // map it themselves) is the retryable UNAVAILABLE; then fastify's own refusals of a request.
    const mapped =
      err instanceof BrokerError ? err : (storageRefusal(err, onStorageFailure) ?? requestRefusal(err));
    if (mapped === null) {
      logger.error({ err }, 'unhandled error');
      return reply.code(500).send({ error: toErrorBody(err) });
    }
    return reply.code(HTTP_STATUS[mapped.code]).send({ error: mapped.toBody() });
  });
  app.setNotFoundHandler((req, reply) => {
    reply.code(404).send({
      error: new BrokerError(
        'NOT_FOUND',
        `no route ${req.method} ${req.url.split('?')[0]}`,
        'See docs/mcp-tools.md for the REST routes.',
      ).toBody(),
    });
  });
}
