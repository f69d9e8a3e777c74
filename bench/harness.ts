import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/**
 * What the benches that drive a child master over MCP share (admission.ts, inputs.ts,
 * slurm-broker.ts): MCP clients over the master's TLS, one tool call that throws on a tool error, a
 * bounded wait for the worker's cards, and the propose → confirm → approve path that makes a task.
 */

/** MCP clients of one master, all closed together. */
export class BenchClients {
  private readonly clients: Client[] = [];

  /** `clientName` is what the clients call themselves; `fetch` trusts the master's CA. */
  constructor(
    private readonly masterUrl: string,
    private readonly fetch: typeof globalThis.fetch,
    private readonly clientName: string,
  ) {}

  /** A client of the master's /mcp endpoint, authenticated with `token`. */
  async connect(token: string): Promise<Client> {
    const client = new Client({ name: this.clientName, version: '0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL('/mcp', this.masterUrl), {
        requestInit: { headers: { Authorization: `Bearer ${token}` } },
        fetch: this.fetch,
      }),
    );
    this.clients.push(client);
    return client;
  }

  /** Closes every client connected so far; a failure to close one does not stop the others. */
  async close(): Promise<void> {
    await Promise.allSettled(this.clients.map((c) => c.close()));
  }
}

/** Calls tool `name` and returns its structured content; a tool error is thrown. */
export async function callTool<T>(c: Client, name: string, args: Record<string, unknown>): Promise<T> {
  const r = await c.callTool({ name, arguments: args });
  if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content)}`);
  return r.structuredContent as T;
}

/** The fields of a `list_cards` row the benches look at. */
export interface BenchCard {
  worker_id: string;
  state: string;
}

/** Polls `list_cards` every 50 ms until `ready` holds; throws `failure` after `timeoutMs`. */
export async function waitForCards(
  client: Client,
  ready: (cards: BenchCard[]) => boolean,
  timeoutMs: number,
  failure: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const listed = await callTool<{ cards: BenchCard[] }>(client, 'list_cards', {});
    if (ready(listed.cards)) return;
    if (Date.now() > deadline) throw new Error(failure);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Idempotency keys `${prefix}-0`, `${prefix}-1`, … for one bench run. */
export function keySequence(prefix: string): () => string {
  let n = 0;
  return () => `${prefix}-${n++}`;
}

/**
 * Proposes `spec` as `submitter`, confirms it, and approves it as `reviewer`; returns the task id.
 * Each step takes the next key of `nextKey`.
 */
export async function proposeAndApprove(
  submitter: Client,
  reviewer: Client,
  spec: Record<string, unknown>,
  nextKey: () => string,
): Promise<string> {
  const p = await callTool<{ proposal_id: string; revision_id: string; digest: string }>(
    submitter,
    'create_proposal',
    { spec, idempotency_key: nextKey() },
  );
  await callTool(submitter, 'confirm_revision', {
    proposal_id: p.proposal_id,
    revision_id: p.revision_id,
    idempotency_key: nextKey(),
  });
  const approved = await callTool<{ task_id: string }>(reviewer, 'submit_review', {
    proposal_id: p.proposal_id,
    revision_id: p.revision_id,
    revision_digest: p.digest,
    decision: 'APPROVE',
    comments: 'bench',
    idempotency_key: nextKey(),
  });
  return approved.task_id;
}
