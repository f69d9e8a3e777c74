import type { FastifyInstance, FastifyReply } from 'fastify';
import type { BrokerDeps } from '../broker/deps.js';
import { BrokerError } from '../contracts/errors.js';
import { MAX_UPLOAD_CALL_BYTES } from '../contracts/tools-inputs.js';
import { serverInstructions } from './instructions.js';
import { createMcpServer, type McpCatalog, mcpAuthInfo } from './server.js';
import { type McpAnswer, McpPostTransport } from './transport.js';

/** Largest `/mcp` request body: an upload_inputs call of MAX_UPLOAD_CALL_BYTES in base64, with room. */
export const MCP_BODY_LIMIT = 2 * MAX_UPLOAD_CALL_BYTES;

/** Whether a request's `Origin` may drive this master (src/app.ts installs the check, src/http/origin.ts). */
export type OriginCheck = (origin: string | undefined, host: string | undefined) => boolean;

/**
 * `/mcp`: Streamable HTTP in stateless JSON mode — every POST stands alone, nothing to sweep,
 * forward-compatible with the session-less 2026 protocol revision; GET/DELETE answer 405 as the SDK's
 * stateless example does (docs/decisions/0001-stateless-mcp.md). A POST whose Origin `allowOrigin`
 * refuses is FORBIDDEN before anything else happens (DNS-rebinding defence). The SDK servers are
 * long-lived, one per distinct instructions text (at most three), each behind a transport that takes one
 * POST at a time (docs/decisions/0045-one-mcp-server-per-instructions.md); the answer is written in
 * one piece.
 */
export function registerMcpRoute(
  app: FastifyInstance,
  deps: BrokerDeps,
  catalog: McpCatalog,
  allowOrigin: OriginCheck,
  onToolCall?: (tool: string, ms: number, ok: boolean) => void,
): void {
  const endpoints = new Map<string, McpPostTransport>();
  const endpointFor = async (instructions: string): Promise<McpPostTransport> => {
    let transport = endpoints.get(instructions);
    if (transport === undefined) {
      transport = new McpPostTransport();
      endpoints.set(instructions, transport);
      await createMcpServer(deps, catalog, instructions, onToolCall).connect(transport);
    }
    return transport;
  };
  app.addHook('onClose', async () => {
    for (const transport of endpoints.values()) await transport.close();
  });
  // upload_inputs carries up to MAX_UPLOAD_CALL_BYTES decoded, i.e. 4/3 of it in base64 plus JSON.
  app.post('/mcp', { bodyLimit: MCP_BODY_LIMIT }, async (req, reply) => {
    if (!allowOrigin(req.headers.origin, req.headers.host))
      throw new BrokerError(
        'FORBIDDEN',
        `Origin ${req.headers.origin} is not allowed`,
        'Add it to allowed_origins in the master config if it is yours.',
      );
    const principal = req.principal!;
    const transport = await endpointFor(serverInstructions(principal));
    reply.hijack();
    const res = reply.raw;
    let answered = false;
    const protocolVersion = req.headers['mcp-protocol-version'];
    const answer = await transport
      .handle(
        req.body,
        {
          accept: req.headers.accept,
          contentType: req.headers['content-type'],
          protocolVersion: typeof protocolVersion === 'string' ? protocolVersion : undefined,
        },
        mcpAuthInfo(principal),
        (cancel) =>
          res.once('close', () => {
            if (!answered) cancel();
          }),
      )
      .catch(
        (err: unknown): McpAnswer => ({
          status: 400,
          body: JSON.stringify({
            jsonrpc: '2.0',
            error: { code: -32700, message: 'Parse error', data: String(err) },
            id: null,
          }),
        }),
      );
    answered = true;
    if (res.destroyed || res.writableEnded) return;
    if (answer.body === null) {
      res.writeHead(answer.status, { 'content-length': '0' });
      res.end();
    } else {
      res.writeHead(answer.status, {
        'content-type': 'application/json',
        'content-length': String(Buffer.byteLength(answer.body)),
      });
      res.end(answer.body);
    }
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
