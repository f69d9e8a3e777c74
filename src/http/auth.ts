import type { FastifyReply, FastifyRequest } from 'fastify';
import type { BrokerDeps } from '../broker/deps.js';
import { authenticate, bearerToken, type Principal } from '../broker/principals.js';
import { BrokerError } from '../contracts/errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null;
  }
}

/** Paths answered without a token: health and the dashboard's sign-in page and static assets (no data). */
export function isPublicPath(path: string): boolean {
  return path === '/healthz' || path === '/' || path.startsWith('/assets/') || path === '/favicon.ico';
}

/**
 * The bearer check every non-public route passes before its handler (and before a WebSocket upgrade).
 * Worker tokens are valid only on the worker endpoint; people's tokens never open it.
 */
export function authHook(deps: BrokerDeps, isWorkerPath: (path: string) => boolean) {
  return async (req: FastifyRequest, reply: FastifyReply) => {
    const path = req.url.split('?')[0] ?? '';
    if (isPublicPath(path)) return;
    try {
      const principal = authenticate(deps, bearerToken(req.headers.authorization));
      const isWorker = principal.roles.includes('worker');
      if (isWorker !== isWorkerPath(path))
        throw new BrokerError(
          'FORBIDDEN',
          isWorker
            ? 'worker tokens are valid only on the worker endpoint'
            : 'only worker tokens may connect here',
          'Use a token made for this purpose (gpu-broker token create).',
        );
      req.principal = principal;
    } catch (err) {
      const body = err instanceof BrokerError ? err.toBody() : { code: 'UNAUTHENTICATED' };
      const status = err instanceof BrokerError && err.code === 'FORBIDDEN' ? 403 : 401;
      if (status === 401) reply.header('WWW-Authenticate', 'Bearer realm="gpu-broker"');
      await reply.code(status).send({ error: body });
    }
  };
}
