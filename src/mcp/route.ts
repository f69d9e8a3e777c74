import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { BrokerDeps } from '../broker/deps.js';
import { BrokerError } from '../contracts/errors.js';
import { MAX_UPLOAD_CALL_BYTES } from '../contracts/tools-inputs.js';
import { createMcpServer, type McpCatalog } from './server.js';

/** Largest `/mcp` request body: an upload_inputs call of MAX_UPLOAD_CALL_BYTES in base64, with room. */
export const MCP_BODY_LIMIT = 2 * MAX_UPLOAD_CALL_BYTES;

/** Whether a request's `Origin` may drive this master (src/app.ts installs the check, src/http/origin.ts). */
export type OriginCheck = (origin: string | undefined, host: string | undefined) => boolean;

/**
 * `/mcp`: Streamable HTTP in stateless JSON mode — a fresh server and transport per POST, nothing to
 * sweep, forward-compatible with the session-less 2026 protocol revision. GET/DELETE answer 405 as the
 * SDK's stateless example does (docs/decisions/0001-stateless-mcp.md). A POST whose Origin
 * `allowOrigin` refuses is FORBIDDEN before anything else happens (DNS-rebinding defence).
 */
export function registerMcpRoute(
  app: FastifyInstance,
  deps: BrokerDeps,
  catalog: McpCatalog,
  allowOrigin: OriginCheck,
  onToolCall?: (tool: string, ms: number, ok: boolean) => void,
): void {
  // upload_inputs carries up to MAX_UPLOAD_CALL_BYTES decoded, i.e. 4/3 of it in base64 plus JSON.
  app.post('/mcp', { bodyLimit: MCP_BODY_LIMIT }, async (req, reply) => {
    if (!allowOrigin(req.headers.origin, req.headers.host))
      throw new BrokerError(
        'FORBIDDEN',
        `Origin ${req.headers.origin} is not allowed`,
        'Add it to allowed_origins in the master config if it is yours.',
      );
    const principal = req.principal!;
    const server = createMcpServer(deps, catalog, principal, onToolCall);
    const transport = new StreamableHTTPServerTransport({ enableJsonResponse: true });
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    const raw = req.raw as typeof req.raw & { auth?: AuthInfo };
    raw.auth = {
      token: 'redacted',
      clientId: principal.name,
      scopes: principal.roles,
      extra: { principal_id: principal.id },
    };
    reply.hijack();
    await transport.handleRequest(raw, reply.raw, req.body);
  });
  // Stateless: no SSE stream to open (GET) and no session to end (DELETE).
  const notAllowed = async (_req: unknown, reply: FastifyReply) =>
    reply
      .code(405)
      .header('Allow', 'POST')
      .send({
        error: {
          code: 'INVALID_STATE',
          message: 'method not allowed; this MCP endpoint is stateless and serves POST only',
          hint: 'Send JSON-RPC requests with POST.',
          retryable: false,
        },
      });
  app.get('/mcp', notAllowed);
  app.delete('/mcp', notAllowed);
}
