import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { BrokerError, type ErrorBody } from '../../src/contracts/errors.js';
import { createCaTrustingFetch } from '../../src/platform/tls.js';

/**
 * The qualification runner's MCP client: the real SDK `Client` over Streamable HTTP against the
 * master's `/mcp`, with a bearer token, trusting only the master's CA — exactly what an agent uses.
 */

/** A connected client bound to one principal. */
export interface BrokerMcp {
  /** Calls a tool; resolves to its structured result, rejects with the broker's typed error. */
  call<T = Record<string, unknown>>(name: string, args?: Record<string, unknown>): Promise<T>;
  close(): Promise<void>;
}

/** Connects to `<url>/mcp` as the holder of `token`. `caPem` null: the platform's trust store. */
export async function connectBrokerMcp(
  url: string,
  token: string,
  caPem: string | null,
  clientName: string,
): Promise<BrokerMcp> {
  const trusting = caPem === null ? null : createCaTrustingFetch(caPem);
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
    ...(trusting ? { fetch: trusting.fetch } : {}),
  });
  const client = new Client({ name: clientName, version: '1.0.0' });
  try {
    await client.connect(transport);
  } catch (err) {
    await trusting?.close();
    throw err;
  }
  return {
    async call<T>(name: string, args: Record<string, unknown> = {}): Promise<T> {
      const result = await client.callTool({ name, arguments: args });
      if (result.isError === true) {
        const text = (result.content as Array<{ type: string; text?: string }> | undefined)?.find(
          (c) => c.type === 'text',
        )?.text;
        let body: Partial<ErrorBody> = {};
        try {
          body = JSON.parse(text ?? '{}') as ErrorBody;
        } catch {
          body = { message: text ?? 'unknown error' };
        }
        throw new BrokerError(
          body.code ?? 'INTERNAL',
          `${name}: ${body.message ?? 'failed'}`,
          body.hint ?? '',
        );
      }
      if (result.structuredContent === undefined) throw new Error(`${name}: no structured result`);
      return result.structuredContent as T;
    },
    async close() {
      await client.close().catch(() => undefined);
      await trusting?.close();
    },
  };
}
