import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  ListToolsRequestSchema,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { z } from 'zod';
import type { BrokerDeps } from '../broker/deps.js';
import { hasAnyRole, type Principal } from '../broker/principals.js';
import { type BoundTool, invokeTool } from '../broker/tools/dispatch.js';
import { BrokerError, toErrorBody } from '../contracts/errors.js';
import { nullableAsAnyOf } from './nullable-any-of.js';

/**
 * The MCP surface over the shared tool catalog. We use the SDK's low-level `Server` instead of
 * `McpServer.registerTool` so that (1) input errors come back as our typed `{code, message, hint,
 * retryable}` results rather than the SDK's generic "-32602 Input validation error" text, and (2) the
 * JSON Schemas are converted once at startup (docs/decisions/0002-low-level-mcp-server.md).
 */

const SERVER_INFO = { name: 'gpu-broker', version: '0.1.0' };
const validator = new AjvJsonSchemaValidator();

/** A tool's MCP listing entry, computed once. */
interface Listed {
  tool: BoundTool;
  entry: Tool;
}

/** The catalog with its MCP listing, built once per process. */
export class McpCatalog {
  private readonly listed: Listed[];
  private readonly byName: Map<string, BoundTool>;

  constructor(tools: readonly BoundTool[]) {
    this.byName = new Map(tools.map((t) => [t.def.name, t]));
    this.listed = tools.map((tool) => ({
      tool,
      entry: {
        name: tool.def.name,
        title: tool.def.title,
        description: tool.def.description,
        inputSchema: nullableAsAnyOf(
          z.toJSONSchema(tool.def.input, { target: 'draft-7', io: 'input' }),
        ) as Tool['inputSchema'],
        outputSchema: nullableAsAnyOf(
          z.toJSONSchema(tool.def.output, { target: 'draft-7', io: 'output' }),
        ) as Tool['outputSchema'],
        annotations: { title: tool.def.title, ...tool.def.annotations },
      },
    }));
  }

  /** Tools this principal may call (tools/list hides the rest). */
  visibleTo(principal: Principal): Tool[] {
    return this.listed.filter((l) => hasAnyRole(principal, l.tool.def.roles)).map((l) => l.entry);
  }

  /** A tool by name. */
  get(name: string): BoundTool | undefined {
    return this.byName.get(name);
  }
}

/** A tool call that took longer than this yields once before its answer is encoded. */
const LONG_CALL_MS = 4;

/** Turns a use-case result or error into an MCP tool result. */
export function toCallToolResult(
  outcome: { ok: true; value: unknown } | { ok: false; error: unknown },
): CallToolResult {
  if (outcome.ok) {
    return {
      content: [{ type: 'text', text: JSON.stringify(outcome.value) }],
      structuredContent: outcome.value as Record<string, unknown>,
    };
  }
  return { isError: true, content: [{ type: 'text', text: JSON.stringify(toErrorBody(outcome.error)) }] };
}

/** The principal a POST was authenticated as, carried to the handlers in the SDK's `authInfo`. */
export function mcpAuthInfo(principal: Principal): AuthInfo {
  return { token: 'redacted', clientId: principal.name, scopes: principal.roles, extra: { principal } };
}

/** The principal `mcpAuthInfo` put in a request's auth; a request without one is refused. */
function principalOf(authInfo: AuthInfo | undefined): Principal {
  const principal = authInfo?.extra?.['principal'] as Principal | undefined;
  if (principal === undefined)
    throw new BrokerError('UNAUTHENTICATED', 'no principal on this MCP request', 'Send a bearer token.');
  return principal;
}

/**
 * Builds the long-lived MCP server for the principals whose instructions are `instructions`
 * (src/mcp/instructions.ts; src/mcp/route.ts keeps one per distinct text). Each request's handlers read
 * the principal from its auth, so tools/list and tools/call answer for the token that sent it
 * (docs/decisions/0045-one-mcp-server-per-instructions.md).
 */
export function createMcpServer(
  deps: BrokerDeps,
  catalog: McpCatalog,
  instructions: string,
  onToolCall?: (tool: string, ms: number, ok: boolean) => void,
): Server {
  const server = new Server(SERVER_INFO, {
    capabilities: { tools: { listChanged: false } },
    jsonSchemaValidator: validator,
    instructions,
  });
  server.setRequestHandler(ListToolsRequestSchema, async (_req, extra) => ({
    tools: catalog.visibleTo(principalOf(extra.authInfo)),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const started = performance.now();
    const tool = catalog.get(req.params.name);
    let result: CallToolResult;
    try {
      const principal = principalOf(extra.authInfo);
      if (!tool)
        throw new BrokerError(
          'NOT_FOUND',
          `no tool named ${req.params.name}`,
          'tools/list shows the tools your token may call.',
        );
      const value = await invokeTool(
        tool,
        { deps, principal, signal: extra.signal },
        req.params.arguments ?? {},
      );
      // A long call (dispatch.ts yields before its output check) yields again before it is encoded:
      // checking and encoding a large answer are then two blocks of the event loop, not one.
      if (performance.now() - started > LONG_CALL_MS) await new Promise((r) => setImmediate(r));
      result = toCallToolResult({ ok: true, value });
    } catch (error) {
      if (!(error instanceof BrokerError))
        deps.logger.error({ err: error, tool: req.params.name }, 'tool call failed');
      result = toCallToolResult({ ok: false, error });
    }
    onToolCall?.(req.params.name, performance.now() - started, result.isError !== true);
    return result;
  });
  return server;
}
