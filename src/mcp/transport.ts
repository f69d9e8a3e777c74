import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  isInitializeRequest,
  isJSONRPCErrorResponse,
  isJSONRPCNotification,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type JSONRPCMessage,
  JSONRPCMessageSchema,
  type RequestId,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@modelcontextprotocol/sdk/types.js';

/**
 * The `/mcp` POST transport (docs/decisions/0045-one-mcp-server-per-instructions.md): one long-lived
 * SDK `Server` is connected to one of these, and every POST is handed to it with `handle`. It answers
 * the way the SDK's `StreamableHTTPServerTransport` does in stateless JSON mode (the same status codes,
 * JSON-RPC error codes and messages, in the same order of checks), without building a server, a
 * transport, a web `Request` and a web `Response` per POST: the master's CPU per task (docs/performance.md
 * "e2e").
 *
 * Requests of many clients share the one `Server`, and each client numbers its own requests, so a
 * request's id is replaced by one of this transport's before the server sees it and put back in the
 * response. Client notifications that name an id (`notifications/cancelled`, `notifications/progress`)
 * are dropped: in stateless HTTP they can only name ids of another POST, which may now be another
 * client's. A client that hangs up cancels its POST's requests (their handlers' `signal` aborts).
 */

/** What to write back for one POST: status and JSON text (null: no body, 202). */
export interface McpAnswer {
  status: number;
  body: string | null;
}

/** The request headers the transport checks. */
export interface McpPostHeaders {
  accept: string | undefined;
  contentType: string | undefined;
  protocolVersion: string | undefined;
}

/** The most messages one POST may carry (the SDK's limit). */
export const MAX_BATCH_MESSAGES = 100;

/** A JSON-RPC response (result or error) as it goes back to the client. */
type RpcResponse = { jsonrpc: '2.0'; id: RequestId } & Record<string, unknown>;

interface Pending {
  /** The client's id of this request. */
  clientId: RequestId;
  /** Takes the server's response (its id already the client's). */
  settle(response: RpcResponse): void;
}

/** A JSON-RPC error answer with no id, as the SDK's transport writes it. */
function errorAnswer(status: number, code: number, message: string, data?: string): McpAnswer {
  const error: { code: number; message: string; data?: string } = { code, message };
  if (data !== undefined) error.data = data;
  return { status, body: JSON.stringify({ jsonrpc: '2.0', error, id: null }) };
}

/** `application/json` as the media type's essence (parameters such as charset allowed). */
function isJsonContentType(header: string | undefined): boolean {
  if (header === 'application/json') return true;
  if (header === undefined) return false;
  return header.split(';', 1)[0]!.trim().toLowerCase() === 'application/json';
}

/** The SDK's check, its zod parse only for a message that says it is one. */
function isInitialize(message: JSONRPCMessage): boolean {
  return 'method' in message && message.method === 'initialize' && isInitializeRequest(message);
}

/** Notifications passed on to the server: not the ones that name a request or response id. */
function forwarded(message: JSONRPCMessage): boolean {
  if (!isJSONRPCNotification(message)) return false;
  return message.method !== 'notifications/cancelled' && message.method !== 'notifications/progress';
}

/** One long-lived transport: the POSTs of every client whose server it serves. */
export class McpPostTransport implements Transport {
  onclose?: (() => void) | undefined;
  onerror?: ((error: Error) => void) | undefined;
  onmessage?: Transport['onmessage'];
  private lastId = 0;
  private closed = false;
  private readonly pending = new Map<number, Pending>();

  async start(): Promise<void> {}

  async close(): Promise<void> {
    this.closed = true;
    for (const p of this.pending.values()) p.settle({ jsonrpc: '2.0', id: p.clientId, error: closedError() });
    this.pending.clear();
    this.onclose?.();
  }

  /** The server's messages: a response settles its POST's request; anything else has nowhere to go. */
  async send(message: JSONRPCMessage): Promise<void> {
    if (!isJSONRPCResultResponse(message) && !isJSONRPCErrorResponse(message)) return;
    if (typeof message.id !== 'number') return;
    const p = this.pending.get(message.id);
    if (p === undefined) return;
    this.pending.delete(message.id);
    p.settle({ ...message, id: p.clientId } as RpcResponse);
  }

  /**
   * One POST: its body (already parsed from JSON), the headers that matter and the caller's auth.
   * `onHangUp` receives the function that cancels this POST's requests once the client hung up.
   */
  async handle(
    body: unknown,
    headers: McpPostHeaders,
    authInfo: AuthInfo,
    onHangUp: (cancel: () => void) => void,
  ): Promise<McpAnswer> {
    if (this.closed) return errorAnswer(503, -32000, 'Connection closed');
    const accept = headers.accept;
    if (!accept?.includes('application/json') || !accept.includes('text/event-stream'))
      return errorAnswer(
        406,
        -32000,
        'Not Acceptable: Client must accept both application/json and text/event-stream',
      );
    if (!isJsonContentType(headers.contentType))
      return errorAnswer(415, -32000, 'Unsupported Media Type: Content-Type must be application/json');
    if (body === undefined) return errorAnswer(400, -32700, 'Parse error: Invalid JSON');
    if (Array.isArray(body) && body.length > MAX_BATCH_MESSAGES)
      return errorAnswer(
        400,
        -32600,
        `Invalid Request: Batch must not exceed ${MAX_BATCH_MESSAGES} messages`,
      );
    let messages: JSONRPCMessage[];
    try {
      messages = (Array.isArray(body) ? body : [body]).map((m) => JSONRPCMessageSchema.parse(m));
    } catch {
      return errorAnswer(400, -32700, 'Parse error: Invalid JSON-RPC message');
    }
    if (messages.some(isInitialize)) {
      if (messages.length > 1)
        return errorAnswer(400, -32600, 'Invalid Request: Only one initialization request is allowed');
    } else {
      const version = headers.protocolVersion;
      if (version !== undefined && !SUPPORTED_PROTOCOL_VERSIONS.includes(version))
        return errorAnswer(
          400,
          -32000,
          `Bad Request: Unsupported protocol version: ${version} (supported versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`,
        );
    }
    const extra = { authInfo };
    if (!messages.some(isJSONRPCRequest)) {
      for (const m of messages) if (forwarded(m)) this.onmessage?.(m, extra);
      return { status: 202, body: null };
    }
    return new Promise<McpAnswer>((resolve) => {
      const ids: number[] = [];
      const responses: RpcResponse[] = [];
      let open = 0;
      const settleOne = (slot: number) => (response: RpcResponse) => {
        responses[slot] = response;
        if (--open === 0) {
          const out = responses.length === 1 ? responses[0] : responses;
          resolve({ status: 200, body: JSON.stringify(out) });
        }
      };
      const toServer: JSONRPCMessage[] = [];
      for (const m of messages) {
        if (isJSONRPCRequest(m)) {
          const id = ++this.lastId;
          ids.push(id);
          this.pending.set(id, { clientId: m.id, settle: settleOne(open++) });
          toServer.push({ ...m, id });
        } else if (forwarded(m)) toServer.push(m);
      }
      onHangUp(() => {
        for (const id of ids) {
          if (!this.pending.delete(id)) continue;
          this.onmessage?.(
            {
              jsonrpc: '2.0',
              method: 'notifications/cancelled',
              params: { requestId: id, reason: 'the client closed the connection' },
            },
            extra,
          );
        }
        resolve({ status: 499, body: null });
      });
      for (const m of toServer) this.onmessage?.(m, extra);
    });
  }
}

/** The error a request still open when the transport closes is answered with. */
function closedError(): { code: number; message: string } {
  return { code: -32000, message: 'Connection closed' };
}
