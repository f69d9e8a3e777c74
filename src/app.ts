import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, { type FastifyInstance, LogController } from 'fastify';
import type { BrokerDeps } from './broker/deps.js';
import type { BoundTool } from './broker/tools/dispatch.js';
import { WORKER_CONNECT_PATH, WORKER_INPUT_PATH } from './contracts/paths.js';
import { authHook } from './http/auth.js';
import { registerBlobRoutes } from './http/blobs.js';
import { installConnectionLimits } from './http/connection-limits.js';
import { installErrorHandling } from './http/errors.js';
import { answerContinueLate } from './http/expect-continue.js';
import { isAllowedOrigin, ownHostNames } from './http/origin.js';
import { registerRestRoutes } from './http/rest.js';
import { registerMcpRoute } from './mcp/route.js';
import { McpCatalog } from './mcp/server.js';
import { parseListen } from './platform/config.js';

/** Options of the HTTP app. */
export interface AppOptions {
  tools: readonly BoundTool[];
  https?: { key: string; cert: string } | undefined;
  /** Extra registrations (WSS hub, dashboard, metrics) run after the core routes. */
  extend?: ((app: FastifyInstance) => void | Promise<void>) | undefined;
  onToolCall?: ((tool: string, ms: number, ok: boolean) => void) | undefined;
  /** Health details beyond the basics (e.g. audit chain, workers). */
  health?: (() => Record<string, unknown>) | undefined;
  /** Where uploads stream before they are verified (the master's `<data-dir>/uploads`); default a temp dir. */
  uploadDir?: string | undefined;
}

/**
 * On close, fastify ends the keep-alive connections that are idle at that moment; one still serving a
 * request (a `wait_for_*` call, a hijacked MCP reply) goes idle later and then held `close()` — and
 * `gpu-broker serve`'s SIGTERM — open for the whole keep-alive timeout (72 s). Close each connection as
 * soon as it goes idle instead.
 */
function closeConnectionsAsTheyIdle(app: FastifyInstance): void {
  app.addHook('preClose', async () => {
    const timer = setInterval(() => app.server.closeIdleConnections(), 50);
    timer.unref();
    app.server.once('close', () => clearInterval(timer));
  });
}

/** Builds the master's fastify app without listening (tests use `inject()` or listen themselves). */
export async function buildApp(deps: BrokerDeps, opts: AppOptions): Promise<FastifyInstance> {
  const limits = deps.config.http;
  // Node's own bounds (docs/performance.md "Noisy neighbours"): headers, a whole request, idle keep-alive sockets. Node checks
  // the first two every `connectionsCheckingInterval` (30 s by default): a tenth of the headers timeout.
  const server = {
    headersTimeout: limits.headers_timeout_ms,
    requestTimeout: limits.request_timeout_ms,
    connectionsCheckingInterval: Math.max(100, Math.floor(limits.headers_timeout_ms / 10)),
  };
  const app = Fastify({
    loggerInstance: deps.logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: 1024 * 1024,
    keepAliveTimeout: limits.keep_alive_timeout_ms,
    requestTimeout: limits.request_timeout_ms,
    ...(opts.https ? { https: { ...opts.https, ...server } } : { http: server }),
  }) as unknown as FastifyInstance;
  app.decorateRequest('principal', null);
  installErrorHandling(app, deps.logger, (detail) => deps.store.onWriteFailure(detail));
  installConnectionLimits(app, limits, deps.logger);
  answerContinueLate(app);
  app.addHook(
    'onRequest',
    authHook(deps, (path) => path === WORKER_CONNECT_PATH || WORKER_INPUT_PATH.test(path)),
  );
  closeConnectionsAsTheyIdle(app);

  app.get('/healthz', async (_req, reply) => {
    const extra = opts.health?.() ?? {};
    const healthy = Object.values(extra).every(
      (v) => typeof v !== 'object' || v === null || (v as { ok?: boolean }).ok !== false,
    );
    reply.code(healthy ? 200 : 503);
    return { status: healthy ? 'ok' : 'degraded', ...extra };
  });

  const catalog = new McpCatalog(opts.tools);
  // The MCP transport spec's Origin check (DNS rebinding), installed on /mcp from here.
  const ownNames = ownHostNames(parseListen(deps.config.listen).host, deps.config.tls.sans);
  const allowOrigin = (origin: string | undefined, host: string | undefined) =>
    isAllowedOrigin(origin, host, deps.config.allowed_origins, ownNames);
  registerMcpRoute(app, deps, catalog, allowOrigin, opts.onToolCall);
  registerRestRoutes(app, deps, new Map(opts.tools.map((t) => [t.def.name, t])));
  registerBlobRoutes(app, deps, {
    uploadDir: opts.uploadDir ?? join(tmpdir(), `gpu-broker-uploads-${randomUUID()}`),
    maxUploadsPerPrincipal: limits.max_uploads_per_principal,
    uploadBytesPerSecond: limits.upload_bytes_per_second_per_principal,
  });
  await opts.extend?.(app);
  return app;
}
