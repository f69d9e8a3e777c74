import { randomBytes } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import type { ClientRequest } from 'node:http';
import { request } from 'node:https';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { callTool } from './harness.js';
import { outcomeLabel, type RawTarget } from './raw-https.js';

/**
 * The tool floods of the noisy-neighbour bench (issue 35, item 7; `--only noisy-tools`): one principal
 * flooding the tools the agent-speed features added, while the second agent and the second task of
 * noisy-victims.ts are measured as in the other scenarios.
 *
 *   explain    `explain_grant` with a heavy spec (NOISY_EXPLAIN_MIB of the flooder's own text inputs, so
 *              every call's findings read and inspect them, plus NOISY_EXPLAIN_PATHS more input paths),
 *              NOISY_EXPLAIN_CLIENTS loops at once;
 *   grants     `request_grant` with a scope of about NOISY_GRANT_KIB (env rules with many values),
 *              NOISY_GRANT_CLIENTS loops at once; at the end, the master's database growth and the bytes
 *              of one reviewer's page of list_grants (limit 200);
 *   longpolls  NOISY_LONG_POLLS `GET /api/v1/proposals/{id}/wait?timeout_seconds=25` held at once by the
 *              flooder from the neighbours' own address (127.0.0.1), each on its own TLS connection, a new
 *              one as soon as one answers; a refused one (429, a reset) retries after 2 s (a polite client).
 */

const MIB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The tool floods' sizes. */
export interface ToolFloodSizes {
  explainMiB: number;
  explainPaths: number;
  explainClients: number;
  grantKiB: number;
  grantClients: number;
  longPolls: number;
}

/** What the tool floods need, prepared once before the scenarios. */
export interface ToolFloodPrep {
  /** The heavy spec of the explain flood (its inputs are the flooder's). */
  explainSpec: Record<string, unknown> | null;
  /** A revision of the flooder's that a reviewer approved: the base of its grant requests. */
  grantBase: string | null;
  /** A proposal of the flooder's, IN_REVIEW, that nobody decides: what its long-polls wait on. */
  pollProposal: string | null;
}

function counter(): { add(label: string): void; text(): string } {
  const m = new Map<string, number>();
  return {
    add: (label) => m.set(label, (m.get(label) ?? 0) + 1),
    text: () => [...m].map(([k, v]) => `${v} × ${k}`).join(', ') || 'none',
  };
}

/** The label of an MCP tool call's outcome: ok, or the error code. */
async function toolOutcome(c: Client, name: string, args: Record<string, unknown>): Promise<string> {
  try {
    const r = await c.callTool({ name, arguments: args }, undefined, { timeout: 120_000 });
    if (!r.isError) return 'ok';
    const text = (r.content as Array<{ text?: string }>)[0]?.text ?? '';
    return /"code":"([A-Z_]+)"/.exec(text)?.[1] ?? 'tool error';
  } catch (err) {
    return `failed (${String((err as Error).message).slice(0, 60)})`;
  }
}

const trueSpec = (title: string, extra: Record<string, unknown> = {}) => ({
  title,
  objective: 'noisy-tools bench',
  success_criteria: 'exits 0',
  cards: { count: 1 },
  runtime: { kind: 'process', argv: ['/bin/true'] },
  outputs: [],
  time_limit_seconds: 60,
  notes: 'noisy-tools bench: prepared by the flooder',
  ...extra,
});

/** Prepares what the chosen tool floods need, as the flooder (and the reviewer for the grant base). */
export async function prepareToolFloods(
  want: ReadonlySet<string>,
  flooder: Client,
  reviewer: Client,
  sizes: ToolFloodSizes,
  nextKey: () => string,
): Promise<ToolFloodPrep> {
  const prep: ToolFloodPrep = { explainSpec: null, grantBase: null, pollProposal: null };
  if (want.has('explain')) {
    const inputs: unknown[] = [];
    for (let i = 0; i < Math.round(sizes.explainMiB); i++) {
      const content = randomBytes(MIB / 2)
        .toString('hex')
        .slice(0, MIB - 4096);
      const r = await callTool<{ inputs: unknown[] }>(flooder, 'upload_inputs', {
        files: [{ path: `data/part${i}.txt`, content }],
        idempotency_key: nextKey(),
      });
      inputs.push(...r.inputs);
    }
    const tiny = await callTool<{ inputs: Array<{ sha256: string; size: number }> }>(
      flooder,
      'upload_inputs',
      { files: [{ path: 'x.txt', content: 'x\n' }], idempotency_key: nextKey() },
    );
    const t = tiny.inputs[0]!;
    for (let i = 0; i < sizes.explainPaths; i++)
      inputs.push({ path: `src/m${Math.floor(i / 100)}/f${i}.py`, sha256: t.sha256, size: t.size });
    prep.explainSpec = trueSpec('explain flood', { inputs });
  }
  if (want.has('grants')) {
    const p = await callTool<{ proposal_id: string; revision_id: string; digest: string }>(
      flooder,
      'create_proposal',
      { spec: trueSpec('grant base'), idempotency_key: nextKey() },
    );
    await callTool(flooder, 'confirm_revision', {
      proposal_id: p.proposal_id,
      revision_id: p.revision_id,
      idempotency_key: nextKey(),
    });
    await callTool(reviewer, 'submit_review', {
      proposal_id: p.proposal_id,
      revision_id: p.revision_id,
      revision_digest: p.digest,
      decision: 'APPROVE',
      comments: 'bench: the base of the grant flood',
      idempotency_key: nextKey(),
    });
    prep.grantBase = p.revision_id;
  }
  if (want.has('longpolls')) {
    const p = await callTool<{ proposal_id: string; revision_id: string }>(flooder, 'create_proposal', {
      spec: trueSpec('long-poll target'),
      idempotency_key: nextKey(),
    });
    await callTool(flooder, 'confirm_revision', {
      proposal_id: p.proposal_id,
      revision_id: p.revision_id,
      idempotency_key: nextKey(),
    });
    prep.pollProposal = p.proposal_id;
  }
  return prep;
}

/** A flood under way (as noisy-floods.ts). */
interface Running {
  stop(): Promise<string>;
}

/** Loops `clients` at once calling `once` until stopped; counts outcomes. */
function loops(clients: number, once: () => Promise<string>): { stop(): Promise<string> } {
  const outcomes = counter();
  let stopped = false;
  let calls = 0;
  const loop = async () => {
    while (!stopped) {
      const label = await once();
      calls++;
      outcomes.add(label);
      if (label !== 'ok' && !stopped) await sleep(100);
    }
  };
  const running = Array.from({ length: clients }, loop);
  return {
    async stop() {
      stopped = true;
      await Promise.all(running);
      return `${calls} calls: ${outcomes.text()}`;
    },
  };
}

/** explain_grant with the heavy spec, `explainClients` loops at once. */
export async function explainFlood(
  flooder: Client,
  prep: ToolFloodPrep,
  s: ToolFloodSizes,
): Promise<Running> {
  const spec = prep.explainSpec;
  if (!spec) throw new Error('the explain flood was not prepared');
  const l = loops(s.explainClients, () => toolOutcome(flooder, 'explain_grant', { spec }));
  await sleep(200);
  return {
    stop: async () =>
      `${s.explainClients} × explain_grant loop (spec: ${s.explainMiB} MiB of inputs + ${s.explainPaths} paths): ${await l.stop()}`,
  };
}

/** Bytes of the master's database files (the store and its WAL). */
function dbBytes(dataDir: string): number {
  let n = 0;
  for (const name of readdirSync(dataDir))
    if (/\.(sqlite|db)(-wal|-shm)?$/.test(name)) n += statSync(join(dataDir, name)).size;
  return n;
}

/** request_grant with a big scope, `grantClients` loops at once; the reviewer's page at the end. */
export async function grantFlood(
  flooder: Client,
  reviewer: Client,
  prep: ToolFloodPrep,
  s: ToolFloodSizes,
  dataDir: string,
  nextKey: () => string,
): Promise<Running> {
  const base = prep.grantBase;
  if (!base) throw new Error('the grant flood was not prepared');
  const values = Array.from({ length: 16 }, (_, j) => `${j}`.padEnd(1000, 'v'));
  const env = Array.from({ length: Math.max(1, Math.min(64, Math.round(s.grantKiB / 16))) }, (_, i) => ({
    name: `BENCH_${i}`,
    values,
  }));
  const before = dbBytes(dataDir);
  const l = loops(s.grantClients, () =>
    toolOutcome(flooder, 'request_grant', {
      base_revision_id: base,
      scope: { env },
      max_runs: 1,
      max_card_hours: 1,
      ttl_seconds: 3600,
      reason: 'noisy-tools bench',
      idempotency_key: nextKey(),
    }),
  );
  await sleep(200);
  return {
    async stop() {
      const calls = await l.stop();
      const page = await callTool<{ grants: unknown[] }>(reviewer, 'list_grants', { limit: 200 }).catch(
        () => null,
      );
      const pageBytes = page ? Buffer.byteLength(JSON.stringify(page)) : Number.NaN;
      return (
        `${s.grantClients} × request_grant loop (scope ~${s.grantKiB} KiB): ${calls}; database ` +
        `+${((dbBytes(dataDir) - before) / MIB).toFixed(1)} MiB; a reviewer's list_grants page: ` +
        `${page?.grants.length ?? '–'} grants, ${(pageBytes / MIB).toFixed(2)} MiB`
      );
    },
  };
}

/**
 * `longPolls` long-polls of the flooder held at once from the neighbours' address (`target` has no
 * localAddress), each on its own connection; stop() destroys the ones still held.
 */
export async function longPollFlood(
  target: RawTarget,
  flooderToken: string,
  proposalId: string,
  longPolls: number,
): Promise<Running> {
  const outcomes = counter();
  const held = new Set<ClientRequest>();
  let stopped = false;
  const url = new URL(`/api/v1/proposals/${proposalId}/wait?timeout_seconds=25`, target.url);
  const once = () =>
    new Promise<string>((resolve) => {
      const req = request(url, {
        ca: target.caPem,
        agent: false,
        headers: { authorization: `Bearer ${flooderToken}` },
        ...(target.localAddress ? { localAddress: target.localAddress } : {}),
      });
      held.add(req);
      const done = (label: string) => {
        held.delete(req);
        resolve(label);
      };
      req.on('response', (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          body += d;
        });
        res.on('end', () => done(outcomeLabel({ status: res.statusCode ?? 0, body })));
        res.on('error', () => done('reset while answering'));
      });
      req.on('error', (err: NodeJS.ErrnoException) => done(err.code ?? 'error'));
      req.end();
    });
  const slot = async (i: number) => {
    await sleep((i % 100) * 5); // opened over ~0.5 s, not in one burst of handshakes
    while (!stopped) {
      const label = await once();
      if (stopped) break;
      outcomes.add(label);
      if (label !== '200') await sleep(2000 + Math.random() * 1000);
    }
  };
  const slots = Array.from({ length: longPolls }, (_, i) => slot(i));
  await sleep(1000);
  return {
    async stop() {
      stopped = true;
      for (const req of held) req.destroy();
      await Promise.all(slots);
      return `${longPolls} long-polls held by one principal from the neighbours' address: answers ${outcomes.text()}`;
    },
  };
}
