import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startChildMaster } from './child-master.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * MCP load (issue 2): 32 concurrent SDK clients over HTTPS on loopback against a master in its own
 * process; calls/s and p50/p99 of get_proposal and of create_proposal, and the master's RSS.
 * Each client issues one call at a time (a closed loop), so 32 calls are in flight at any moment.
 * Every phase is bounded both in calls and in seconds.
 */

const CLIENTS = 32;
const SEEDED_PROPOSALS = 64;
const GET = { warmup: 1_000, calls: 12_000, maxSeconds: 15 };
const CREATE = { warmup: 300, calls: 4_000, maxSeconds: 12 };
const LOW_CLIENTS = 4;
const GET_LOW = { warmup: 200, calls: 3_000, maxSeconds: 8 };

const SPEC = {
  title: 'bench',
  objective: 'measure the control plane',
  success_criteria: 'none',
  cards: { count: 1 },
  runtime: { kind: 'process', argv: ['/bin/sh', '-c', 'true'] },
  outputs: [{ path: 'out.json', required: false }],
  time_limit_seconds: 60,
  notes: 'benchmark proposal',
};

/** Runs `total` calls of `call` spread over the clients; returns latencies (ms), errors and wall time. */
async function closedLoop(
  clients: Client[],
  total: number,
  maxSeconds: number,
  call: (c: Client, i: number) => Promise<boolean>,
): Promise<{ latencies: number[]; errors: number; seconds: number }> {
  const latencies: number[] = [];
  let errors = 0;
  let issued = 0;
  const started = performance.now();
  const deadline = started + maxSeconds * 1000;
  await Promise.all(
    clients.map(async (c) => {
      while (issued < total && performance.now() < deadline) {
        const i = issued++;
        const t0 = performance.now();
        let ok = false;
        try {
          ok = await call(c, i);
        } catch {
          ok = false;
        }
        latencies.push(performance.now() - t0);
        if (!ok) errors++;
      }
    }),
  );
  return { latencies, errors, seconds: (performance.now() - started) / 1000 };
}

async function runMcpLoad(): Promise<OpResult[]> {
  const master = await startChildMaster({ executables: [{ path: '/bin/sh' }] });
  const trusting = createCaTrustingFetch(master.caPem);
  const clients: Client[] = [];
  try {
    const token = await master.createToken('bench-submitter', ['submitter']);
    for (let i = 0; i < CLIENTS; i++) {
      const transport = new StreamableHTTPClientTransport(new URL('/mcp', master.url), {
        requestInit: { headers: { Authorization: `Bearer ${token}` } },
        fetch: trusting.fetch,
      });
      const client = new Client({ name: `bench-${i}`, version: '0' });
      await client.connect(transport);
      clients.push(client);
    }
    const idle = master.memory();

    let keyN = 0;
    const create = async (c: Client) => {
      const r = await c.callTool({
        name: 'create_proposal',
        arguments: { spec: SPEC, idempotency_key: `bench-${process.pid}-${keyN++}` },
      });
      return r.isError !== true;
    };
    const ids: string[] = [];
    for (let i = 0; i < SEEDED_PROPOSALS; i++) {
      const r = await clients[0]!.callTool({
        name: 'create_proposal',
        arguments: { spec: SPEC, idempotency_key: `seed-${i}` },
      });
      if (r.isError) throw new Error(`seeding failed: ${JSON.stringify(r.content)}`);
      ids.push((r.structuredContent as { proposal_id: string }).proposal_id);
    }
    const get = async (c: Client, i: number) => {
      const r = await c.callTool({ name: 'get_proposal', arguments: { proposal_id: ids[i % ids.length] } });
      return r.isError !== true;
    };

    /** One measured phase: the calls, then the master's memory and its share of the CPU meanwhile. */
    const phase = async (
      spec: typeof GET,
      users: Client[],
      call: (c: Client, i: number) => Promise<boolean>,
    ) => {
      await closedLoop(users, spec.warmup, spec.maxSeconds, call);
      const masterCpu0 = master.cpuSeconds();
      const ownCpu0 = process.cpuUsage();
      const run = await closedLoop(users, spec.calls, spec.maxSeconds, call);
      const masterCpu = (master.cpuSeconds() - masterCpu0) / run.seconds;
      const own = process.cpuUsage(ownCpu0);
      const ownCpu = (own.user + own.system) / 1e6 / run.seconds;
      const m = master.memory();
      const notes =
        `master RSS ${m.rssMiB.toFixed(0)} MiB (peak ${m.peakMiB.toFixed(0)}, idle ${idle.rssMiB.toFixed(0)}); ` +
        `CPU: master ${(masterCpu * 100).toFixed(0)} %, clients ${(ownCpu * 100).toFixed(0)} %`;
      return { ...run, notes };
    };
    const g = await phase(GET, clients, get);
    const c = await phase(CREATE, clients, create);
    // For reference: the same read at lower concurrency shows how much of the latency is queueing.
    const low = await phase(GET_LOW, clients.slice(0, LOW_CLIENTS), get);
    return [
      summarise('mcp-load', `get_proposal, ${CLIENTS} clients`, g.latencies, g.errors, g.seconds, g.notes),
      summarise('mcp-load', `create_proposal, ${CLIENTS} clients`, c.latencies, c.errors, c.seconds, c.notes),
      summarise(
        'mcp-load',
        `get_proposal, ${LOW_CLIENTS} clients`,
        low.latencies,
        low.errors,
        low.seconds,
        low.notes,
      ),
    ];
  } finally {
    await Promise.allSettled(clients.map((c) => c.close()));
    await trusting.close();
    await master.stop();
  }
}

/** The section run by `npm run bench`. */
export const mcpLoadSection: BenchSection = {
  name: 'mcp-load',
  description: `${CLIENTS} concurrent MCP SDK clients over HTTPS on loopback: get_proposal and create_proposal`,
  run: runMcpLoad,
};
