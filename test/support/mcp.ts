import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { ErrorBody, ErrorCode } from '../../src/contracts/errors.js';

/**
 * The real MCP SDK client against a master over HTTPS, and helpers that turn tool results into
 * `{ok, structured, error}` with our typed error body (`{code, message, hint, retryable}`).
 */

/** A tool call's outcome: the structured result, or the broker's typed error. */
export type ToolOutcome<T> =
  | { ok: true; structured: T; error: null }
  | { ok: false; structured: null; error: ErrorBody };

/** Options of {@link connectMcpClient}. */
export interface McpClientOptions {
  /** Extra request headers (e.g. `Origin`). */
  headers?: Record<string, string>;
  /** Client name sent in `initialize`. */
  name?: string;
}

/**
 * Connects a real SDK `Client` over Streamable HTTP to `<baseUrl>/mcp` with a bearer token (null: none)
 * and the given fetch (one that trusts the master's CA). Rejects when `initialize` fails (e.g. 401).
 */
export async function connectMcpClient(
  baseUrl: string,
  token: string | null,
  fetchFn: typeof globalThis.fetch,
  opts: McpClientOptions = {},
): Promise<Client> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (token !== null) headers['Authorization'] = `Bearer ${token}`;
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', baseUrl), {
    requestInit: { headers },
    fetch: fetchFn,
  });
  const client = new Client({ name: opts.name ?? 'gpu-broker-test', version: '0.0.0' });
  await client.connect(transport);
  return client;
}

/**
 * Calls a tool and classifies the result. Protocol failures (transport errors, a result that breaks
 * the tool's output schema) still throw: they are not tool errors and a test should see them as such.
 */
export async function callTool<T = Record<string, unknown>>(
  client: Client,
  name: string,
  args: Record<string, unknown> = {},
): Promise<ToolOutcome<T>> {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError === true) {
    const content = result.content as Array<{ type: string; text?: string }> | undefined;
    const text = content?.find((c) => c.type === 'text')?.text ?? '';
    let body: ErrorBody;
    try {
      body = JSON.parse(text) as ErrorBody;
    } catch {
      throw new Error(`${name}: error result is not a broker error body: ${text}`);
    }
    if (typeof body.code !== 'string' || typeof body.hint !== 'string' || typeof body.retryable !== 'boolean')
      throw new Error(`${name}: error result lacks code/hint/retryable: ${text}`);
    return { ok: false, structured: null, error: body };
  }
  const structured = result.structuredContent;
  if (structured === undefined) throw new Error(`${name}: success without structuredContent`);
  // The JSON text mirror must say the same as structuredContent (docs/mcp-tools.md "Results").
  const content = result.content as Array<{ type: string; text?: string }> | undefined;
  const mirror = content?.find((c) => c.type === 'text')?.text;
  if (mirror === undefined || JSON.stringify(JSON.parse(mirror)) !== JSON.stringify(structured))
    throw new Error(`${name}: text mirror differs from structuredContent`);
  return { ok: true, structured: structured as T, error: null };
}

/** The structured result of a successful call; throws with the error body otherwise. */
export function expectOk<T>(outcome: ToolOutcome<T>): T {
  if (!outcome.ok)
    throw new Error(
      `expected success, got ${outcome.error.code}: ${outcome.error.message} (hint: ${outcome.error.hint})`,
    );
  return outcome.structured;
}

/** The error body of a failed call; throws unless it failed with exactly `code`. */
export function expectError<T>(outcome: ToolOutcome<T>, code: ErrorCode): ErrorBody {
  if (outcome.ok) throw new Error(`expected ${code}, got success: ${JSON.stringify(outcome.structured)}`);
  if (outcome.error.code !== code)
    throw new Error(`expected ${code}, got ${outcome.error.code}: ${outcome.error.message}`);
  return outcome.error;
}
