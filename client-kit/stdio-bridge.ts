import type { Readable, Writable } from 'node:stream';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  CallToolResultSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { ErrorBody } from '../src/contracts/errors.js';

/**
 * The stdio bridge (docs/architecture.md; docs/mcp-tools.md): a stdio MCP server for harnesses that cannot
 * speak Streamable HTTP, forwarding `tools/list` and `tools/call` to a master's `/mcp` endpoint unchanged.
 *
 * Upstream is stateless (a fresh server per POST), so a master restart needs no session recovery: a
 * client whose call failed is simply dropped and the next call builds a new one. Retries are limited
 * so nothing is ever submitted twice behind the agent's back:
 *   - `tools/list` is read-only and is retried once on any failure;
 *   - `tools/call` is retried once only when the failure proves the request never reached the master
 *     (connect refused, DNS, TLS handshake, initialize failed). Any other failure becomes an `isError`
 *     result saying the call may or may not have run, and that replaying it with the same
 *     `idempotency_key` returns the original result.
 */

/** Options of {@link runStdioBridge}. */
export interface StdioBridgeOptions {
  /** The master's MCP endpoint, e.g. `https://gpu-host:8443/mcp`. */
  mcpUrl: URL;
  /** The bearer token sent upstream. Never logged. */
  token: string;
  /** Where the token came from (an env var name), for error messages only. */
  tokenSource: string;
  /** Fetch used for upstream HTTP (one trusting a private CA); the global fetch when absent. */
  fetch?: typeof globalThis.fetch;
  /** The harness's side: MCP messages arrive here… */
  stdin: Readable;
  /** …and replies go here. Nothing else may write to it. */
  stdout: Writable;
  /** Diagnostics (stderr). One line per call, newline added by the callee. */
  log: (line: string) => void;
  /** Resolves when the bridge should stop (SIGTERM/SIGINT). */
  stop?: Promise<void>;
  /** Version reported to the harness. */
  version: string;
}

/** How long one upstream call may take; above the harness timeouts we document (60 s) so theirs fires first. */
const UPSTREAM_TIMEOUT_MS = 90_000;
/** Bound on the best-effort handshake at start, which only fetches the master's instructions. */
const STARTUP_PROBE_MS = 5_000;

/** Error codes (`cause.code` of a failed fetch) that mean no byte of the request reached the server. */
const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * `tools/list` parsed loosely: the SDK's ListToolsResultSchema strips tool fields it does not know
 * (its ToolSchema is a plain object), and a proxy must not drop what a newer master sends.
 */
const LooseListToolsResultSchema = z.looseObject({
  tools: z.array(z.looseObject({ name: z.string() })),
  nextCursor: z.string().optional(),
});

/** Runs the bridge until stdin ends, stdout breaks or `stop` resolves; then closes everything. */
export async function runStdioBridge(opts: StdioBridgeOptions): Promise<void> {
  const upstream = new Upstream(opts);
  const instructions = await upstream.probe();
  const server = new Server(
    { name: 'gpu-broker-stdio-bridge', version: opts.version },
    { capabilities: { tools: {} }, ...(instructions === undefined ? {} : { instructions }) },
  );

  server.setRequestHandler(ListToolsRequestSchema, async (request, extra) => {
    let lastError: unknown;
    for (let attempt = 0; attempt < 2; attempt++) {
      let client: Client | undefined;
      try {
        client = await upstream.client();
        return await client.request(
          { method: 'tools/list', params: request.params },
          LooseListToolsResultSchema,
          {
            signal: extra.signal,
            timeout: UPSTREAM_TIMEOUT_MS,
          },
        );
      } catch (err) {
        lastError = err;
        if (extra.signal.aborted) throw err;
        if (isUpstreamJsonRpcError(err)) throw passThroughError(err);
        await upstream.discard(client);
        if (authStatus(err) !== undefined) break;
        opts.log(`tools/list failed (${describe(err)}); reconnecting and retrying once`);
      }
    }
    const body = bridgeErrorBody(lastError, opts, false);
    throw new McpError(ErrorCode.InternalError, `${body.message} Hint: ${body.hint}`, body);
  });

  server.setRequestHandler(CallToolRequestSchema, async (request, extra): Promise<CallToolResult> => {
    for (let attempt = 0; ; attempt++) {
      let client: Client | undefined;
      let sent = false;
      try {
        client = await upstream.client();
        sent = true;
        return await client.request({ method: 'tools/call', params: request.params }, CallToolResultSchema, {
          signal: extra.signal,
          timeout: UPSTREAM_TIMEOUT_MS,
        });
      } catch (err) {
        if (extra.signal.aborted) throw err;
        // A JSON-RPC error is the master's own answer: hand it to the harness as it came.
        if (isUpstreamJsonRpcError(err)) throw passThroughError(err);
        await upstream.discard(client);
        const reachedMaster = sent && !isNotSentError(err);
        if (attempt === 0 && !reachedMaster && authStatus(err) === undefined) {
          opts.log(`tools/call ${request.params.name}: master unreachable (${describe(err)}); retrying once`);
          continue;
        }
        opts.log(`tools/call ${request.params.name} failed: ${describe(err)}`);
        return toolError(bridgeErrorBody(err, opts, reachedMaster));
      }
    }
  });

  const transport = new StdioServerTransport(opts.stdin, opts.stdout);
  const ended = new Promise<string>((resolve) => {
    opts.stdin.once('end', () => resolve('stdin ended'));
    opts.stdin.once('close', () => resolve('stdin closed'));
    opts.stdin.once('error', () => resolve('stdin failed'));
    // EPIPE here means the harness is gone; writing on would only raise more errors.
    opts.stdout.once('error', () => resolve('stdout failed'));
    opts.stop?.then(() => resolve('stop requested'));
  });
  server.onerror = (err) => opts.log(`protocol error: ${describe(err)}`);
  await server.connect(transport);
  opts.log(`serving MCP on stdio for ${opts.mcpUrl.href}`);

  const reason = await ended;
  opts.log(`shutting down: ${reason}`);
  await server.close().catch(() => undefined);
  await upstream.close();
}

/**
 * The upstream MCP client, created on demand and dropped after a failure. Concurrent calls share one
 * connection attempt instead of racing to build several.
 */
class Upstream {
  private current: Promise<Client> | undefined;

  constructor(private readonly opts: StdioBridgeOptions) {}

  /**
   * Connects once at start (an authenticated `initialize`) to learn the master's instructions and
   * check the token. A refused token (401/403) is fatal: it throws {@link BridgeStartError}. Any other
   * failure only logs a line: the harness still gets a working bridge that connects on the first call,
   * e.g. after the master comes up.
   */
  async probe(): Promise<string | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), STARTUP_PROBE_MS);
    });
    try {
      const client = await Promise.race([this.client(), timeout]);
      if (!client) {
        this.opts.log(`master at ${this.opts.mcpUrl.href} did not answer within ${STARTUP_PROBE_MS} ms`);
        return undefined;
      }
      const server = client.getServerVersion();
      this.opts.log(
        `connected to ${server?.name ?? 'MCP server'} ${server?.version ?? ''} at ${this.opts.mcpUrl.href}`,
      );
      return client.getInstructions();
    } catch (err) {
      const body = bridgeErrorBody(err, this.opts, false);
      // A refused token will not start working by itself: exit now, with the hint on stderr, rather
      // than look connected to the harness and fail every call (docs/operations.md).
      if (authStatus(err) !== undefined) throw new BridgeStartError(`${body.message} ${body.hint}`);
      this.opts.log(`${body.message} (will retry on the first call)`);
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The connected client, connecting (initialize) first if there is none. */
  client(): Promise<Client> {
    if (!this.current) {
      const attempt = this.connect();
      this.current = attempt;
      // Forget a failed attempt so the next call starts over rather than replaying the failure.
      attempt.catch(() => {
        if (this.current === attempt) this.current = undefined;
      });
    }
    return this.current;
  }

  /**
   * Drops `client` after a failure so the next call reconnects. A failed connection attempt needs no
   * call (it forgets itself), and a client another call has already replaced is only closed.
   */
  async discard(client: Client | undefined): Promise<void> {
    if (!client) return;
    const current = this.current;
    if (current && (await current.catch(() => undefined)) === client && this.current === current) {
      this.current = undefined;
    }
    await client.close().catch(() => undefined);
  }

  /** Closes the upstream client, if any. */
  async close(): Promise<void> {
    const current = this.current;
    this.current = undefined;
    const client = await current?.catch(() => undefined);
    await client?.close().catch(() => undefined);
  }

  private async connect(): Promise<Client> {
    const transport = new StreamableHTTPClientTransport(this.opts.mcpUrl, {
      requestInit: { headers: { Authorization: `Bearer ${this.opts.token}` } },
      ...(this.opts.fetch ? { fetch: this.opts.fetch } : {}),
    });
    const client = new Client(
      { name: 'gpu-broker-stdio-bridge', version: this.opts.version },
      { capabilities: {} },
    );
    // Every failure that matters also rejects the request that met it, and is logged there with the
    // tool's name; logging the transport's copy as well would print each error twice.
    client.onerror = () => undefined;
    await client.connect(transport, { timeout: UPSTREAM_TIMEOUT_MS });
    return client;
  }
}

/** The master refused the bridge's token at start; the message carries the hint. */
export class BridgeStartError extends Error {}

/** A JSON-RPC error response from the master (not one the local SDK made up for a timeout or a close). */
function isUpstreamJsonRpcError(err: unknown): err is McpError {
  return (
    err instanceof McpError &&
    err.code !== ErrorCode.RequestTimeout &&
    err.code !== ErrorCode.ConnectionClosed
  );
}

/**
 * Re-raises an upstream JSON-RPC error with its original code, message and data. Throwing the
 * McpError itself would prefix "MCP error N:" a second time on the way out.
 */
function passThroughError(err: McpError): Error {
  const prefix = `MCP error ${err.code}: `;
  const message = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
  return Object.assign(new Error(message), { code: err.code, data: err.data });
}

/** The HTTP status when the master refused the token (401) or the role (403). */
function authStatus(err: unknown): number | undefined {
  if (err instanceof StreamableHTTPError && (err.code === 401 || err.code === 403)) return err.code;
  return undefined;
}

/** True when the error proves the request was never delivered (connect-phase failure). */
function isNotSentError(err: unknown): boolean {
  if (authStatus(err) !== undefined) return true;
  if (err instanceof StreamableHTTPError && err.code !== undefined && err.code >= 400 && err.code < 500)
    return true;
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as NodeJS.ErrnoException).code;
    if (typeof code === 'string' && NOT_SENT_CODES.has(code)) return true;
  }
  return false;
}

/** The error vocabulary of the master (src/contracts/errors.ts), so agents read bridge failures alike. */
function bridgeErrorBody(err: unknown, opts: StdioBridgeOptions, reachedMaster: boolean): ErrorBody {
  const where = opts.mcpUrl.href;
  const status = authStatus(err);
  if (status === 401) {
    return {
      code: 'UNAUTHENTICATED',
      message: `The gpu-broker master at ${where} refused the token in ${opts.tokenSource} (HTTP 401).`,
      hint: `Ask an operator for a token (gpu-broker token create --name NAME --role submitter), export it as ${opts.tokenSource} and restart the harness.`,
      retryable: false,
    };
  }
  if (status === 403) {
    return {
      code: 'FORBIDDEN',
      message: `The gpu-broker master at ${where} does not allow this token here (HTTP 403).`,
      hint: 'Use a submitter, reviewer or operator token; worker tokens are valid only on the worker endpoint.',
      retryable: false,
    };
  }
  if (reachedMaster) {
    return {
      code: 'UNAVAILABLE',
      message: `The connection to the gpu-broker master at ${where} failed after the call was sent (${describe(err)}); it may or may not have taken effect.`,
      hint: 'Retry the same call with the same idempotency_key: if it already ran you get its original result, never a second submission. Read-only calls can simply be retried.',
      retryable: true,
    };
  }
  return {
    code: 'UNAVAILABLE',
    message: `The gpu-broker master at ${where} is unreachable (${describe(err)}).`,
    hint: 'The master may be restarting: wait a few seconds and retry. If it persists, check the URL, that the master is running, and that its CA certificate is trusted (--ca-file).',
    retryable: true,
  };
}

function toolError(body: ErrorBody): CallToolResult {
  // No structuredContent: a harness would validate it against the tool's success outputSchema.
  return { isError: true, content: [{ type: 'text', text: JSON.stringify(body) }] };
}

/** A one-line description of an error and its causes, for logs and messages; never includes headers. */
function describe(err: unknown): string {
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; e !== undefined && depth < 4; depth++) {
    if (e instanceof Error) {
      const code = (e as NodeJS.ErrnoException).code;
      parts.push(
        code !== undefined && !e.message.includes(String(code)) ? `${e.message} [${code}]` : e.message,
      );
      e = e.cause;
    } else {
      parts.push(String(e));
      break;
    }
  }
  return parts.join(': ');
}
