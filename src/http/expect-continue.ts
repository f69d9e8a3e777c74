import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * `Expect: 100-continue` answered by the master, not by Node (uploads refused before a byte is
 * read). Node answers `100 Continue` on its own before any handler runs, so a client that waits for it
 * (`curl -T`) starts sending a body the route then refuses (over the quota, too large, no token). Here the
 * server's `checkContinue` passes the request on without answering, and:
 *
 *   - every route sends `100 Continue` when it starts reading the body (preParsing: after the
 *     authentication of onRequest, so a request without a valid token is answered, and closed, first);
 *   - a route that reads its body itself (`config: { continueInHandler: true }`: the blob upload) sends it
 *     only once it has admitted the upload (continueNow), so a refused upload costs its client nothing.
 */

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The handler sends `100 Continue` itself, after its own checks (continueNow). */
    continueInHandler?: boolean;
  }
}

/** Installs the above on `app` (before its routes). */
export function answerContinueLate(app: FastifyInstance): void {
  app.server.on('checkContinue', (req, res) => app.server.emit('request', req, res));
  app.addHook('preParsing', async (req, reply, payload) => {
    if (req.routeOptions.config?.continueInHandler !== true) continueNow(req, reply);
    return payload;
  });
}

/** Sends `100 Continue` when the client asked for it and nothing was answered yet. */
export function continueNow(req: FastifyRequest, reply: FastifyReply): void {
  if (req.headers.expect?.toLowerCase() !== '100-continue' || reply.raw.headersSent) return;
  reply.raw.writeContinue();
}
