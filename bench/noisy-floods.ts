import { createHash, randomBytes } from 'node:crypto';
import { connect, type TLSSocket } from 'node:tls';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { callTool, proposeAndApprove } from './harness.js';
import {
  explainFlood,
  grantFlood,
  longPollFlood,
  type ToolFloodPrep,
  type ToolFloodSizes,
} from './noisy-tool-floods.js';
import { outcomeLabel, putStreamed, type RawTarget } from './raw-https.js';

/**
 * The floods of the noisy-neighbour bench (noisy-neighbour.ts), one starter per scenario. Each starts
 * its flood, returns once the flood is under way, and keeps it going until `stop()`, which ends it and
 * says what it did (counts of answers by status and code, bytes sent, …). A flood that the master
 * refuses (a 413 today or tomorrow) is counted, never thrown: the bench records, it does not judge.
 * Only public interfaces: MCP tools, REST routes, raw TLS to the master's port.
 */

const MIB = 1024 * 1024;

/** What a flood may use. */
export interface FloodContext {
  /** The master, reached from the floods' own loopback address (see noisy-neighbour.ts). */
  target: RawTarget;
  /** The noisy principal (a submitter), its token and MCP session. */
  flooderToken: string;
  flooder: Client;
  /** Approves the log-flood task. */
  reviewer: Client;
  /** Reads the big revision (a reviewer other than the second task's). */
  diffReader: Client;
  /** The revision with many modified files (prepareDiffRevision), or null when not prepared. */
  diff: { proposal_id: string; revision_id: string } | null;
  sizes: FloodSizes;
  nextKey: () => string;
  /** The neighbours' own target (no localAddress): the long-poll flood comes from their address. */
  neighbourTarget: RawTarget;
  /** What the tool floods use (noisy-tool-floods.ts), prepared for the chosen scenarios. */
  tools: ToolFloodPrep;
  /** The master's data dir (the grant flood reports its database growth). */
  dataDir: string;
}

/** The flood sizes (noisy-neighbour.ts reads them from the environment). */
export interface FloodSizes {
  logMiB: number;
  uploads: number;
  uploadMiB: number;
  /**
   * Size of the wrong-digest uploads. Under the quota (the default, see noisy-neighbour.ts) they are
   * admitted, streamed through the hash to a temporary file and refused at the end (DIGEST_MISMATCH);
   * at `uploadMiB` they are over the quota and refused before a byte is read, like the other half.
   */
  wrongUploadMiB: number;
  diffReaders: number;
  slowConnections: number;
  tools: ToolFloodSizes;
}

/** A flood under way. */
export interface RunningFlood {
  /** Ends the flood and says what it did. */
  stop(): Promise<string>;
}

/** Starts one kind of flood. */
export type FloodStarter = (ctx: FloodContext) => Promise<RunningFlood>;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function counter(): { add(label: string): void; text(): string; total(): number } {
  const m = new Map<string, number>();
  return {
    add: (label) => m.set(label, (m.get(label) ?? 0) + 1),
    text: () => [...m].map(([k, v]) => `${v} × ${k}`).join(', ') || 'none',
    total: () => [...m.values()].reduce((a, b) => a + b, 0),
  };
}

/** No flood: the baseline. */
const idle: FloodStarter = async () => ({ stop: async () => 'no flood' });

/**
 * Log flood: one task on another card of the same worker writes `logMiB` MiB to stdout as fast as it
 * can (`yes | head -c`), proposed by the flooder and approved; the flood is under way once it started.
 */
const logs: FloodStarter = async (ctx) => {
  const bytes = Math.round(ctx.sizes.logMiB * MIB);
  const spec = {
    title: 'log flood',
    objective: 'write stdout at full speed',
    success_criteria: 'none',
    cards: { count: 1 },
    runtime: { kind: 'process', argv: ['/bin/sh', '-c', `yes '${'x'.repeat(99)}' | head -c ${bytes}`] },
    outputs: [],
    time_limit_seconds: 600,
    notes: 'noisy-neighbour bench: the noisy task',
  };
  const taskId = await proposeAndApprove(ctx.flooder, ctx.reviewer, spec, ctx.nextKey);
  const t0 = Date.now();
  const view = async () =>
    (
      await callTool<{ task: { state: string; started_at: string | null } }>(ctx.flooder, 'get_task', {
        task_id: taskId,
      })
    ).task;
  while ((await view()).started_at === null && Date.now() - t0 < 30_000) await sleep(100);
  return {
    async stop() {
      const t = await view().catch(() => ({ state: 'unknown (get_task failed)' }));
      if (!['COMPLETED', 'FAILED', 'CANCELLED'].includes(t.state))
        await ctx.flooder
          .callTool(
            { name: 'cancel_task', arguments: { task_id: taskId, idempotency_key: ctx.nextKey() } },
            undefined,
            { timeout: 20_000 },
          )
          .catch(() => undefined);
      return `1 task writing ${ctx.sizes.logMiB} MiB to stdout; it was ${t.state} at the end of the window`;
    },
  };
};

/**
 * Upload flood: `uploads` concurrent `PUT /api/v1/blobs/{sha}`, streamed with their Content-Length
 * declared, repeated until stopped: half with a wrong digest (`wrongUploadMiB` each: by default under the
 * quota, so the master streams and hashes them whole before refusing), half with the right digest of
 * `uploadMiB` of content, larger than the flooder's quota (noisy-neighbour.ts sets the quota below it).
 */
const uploads: FloodStarter = async (ctx) => {
  const size = Math.round(ctx.sizes.uploadMiB * MIB);
  const chunk = randomBytes(MIB);
  const hash = createHash('sha256');
  for (let left = size; left > 0; left -= chunk.length) hash.update(chunk.subarray(0, Math.min(left, MIB)));
  const rightDigest = hash.digest('hex');
  const wrong = counter();
  const overQuota = counter();
  let sent = 0;
  const stop = new AbortController();
  const wrongSize = Math.round(ctx.sizes.wrongUploadMiB * MIB);
  const slot = async (i: number) => {
    const isWrong = i % 2 === 0;
    while (!stop.signal.aborted) {
      const sha = isWrong ? randomBytes(32).toString('hex') : rightDigest;
      const r = await putStreamed(
        ctx.target,
        `/api/v1/blobs/${sha}`,
        { authorization: `Bearer ${ctx.flooderToken}` },
        chunk,
        isWrong ? wrongSize : size,
        stop.signal,
        300_000,
      );
      sent += r.written;
      const label =
        'error' in r.outcome && r.outcome.error === 'STOPPED' ? 'cut at stop' : outcomeLabel(r.outcome);
      (isWrong ? wrong : overQuota).add(label);
      if (!('status' in r.outcome) && !stop.signal.aborted) await sleep(100);
    }
  };
  const slots = Array.from({ length: ctx.sizes.uploads }, (_, i) => slot(i));
  await sleep(500);
  return {
    async stop() {
      stop.abort();
      await Promise.all(slots);
      return (
        `${ctx.sizes.uploads} concurrent PUTs, ${(sent / 1024 / MIB).toFixed(1)} GiB sent; ` +
        `wrong digest: ${wrong.text()}; over quota: ${overQuota.text()}`
      );
    },
  };
};

/** Diff flood: `diffReaders` reviewers each calling get_revision on the big revision, one call at a time. */
const diffs: FloodStarter = async (ctx) => {
  const diff = ctx.diff;
  if (!diff) throw new Error('the diff revision was not prepared');
  const outcomes = counter();
  const ms: number[] = [];
  const inFlight = new Set<AbortController>();
  let stopped = false;
  const reader = async () => {
    while (!stopped) {
      const t0 = performance.now();
      const abort = new AbortController();
      inFlight.add(abort);
      try {
        const r = await ctx.diffReader.callTool({ name: 'get_revision', arguments: diff }, undefined, {
          timeout: 300_000,
          signal: abort.signal,
        });
        outcomes.add(r.isError ? 'tool error' : 'ok');
        if (!r.isError) ms.push(performance.now() - t0);
      } catch {
        outcomes.add(stopped ? 'cut at stop' : 'failed');
        if (!stopped) await sleep(100);
      } finally {
        inFlight.delete(abort);
      }
    }
  };
  const readers = Array.from({ length: ctx.sizes.diffReaders }, reader);
  await sleep(200);
  return {
    async stop() {
      stopped = true;
      for (const a of inFlight) a.abort();
      await Promise.all(readers);
      const longest = ms.length ? `, longest ${(Math.max(...ms) / 1000).toFixed(1)} s` : '';
      return `${ctx.sizes.diffReaders} reader(s) of get_revision: ${outcomes.text()}${longest}`;
    },
  };
};

/**
 * Slow connections: `slowConnections` TLS connections each declaring a 1,000,000-byte body for
 * `POST /api/v1/proposals` and sending one byte of it a second; half carry the flooder's token, half no
 * token. Opened 100 at a time (each given 10 s, all of them 20 s) before the window; counted as opened,
 * refused, closed by the server during the window, and still open at its end.
 */
const slow: FloodStarter = async (ctx) => {
  const url = new URL(ctx.target.url);
  const sockets = new Set<TLSSocket>();
  let opened = 0;
  let closedByServer = 0;
  let stopped = false;
  const refused = counter();
  const open = (i: number) =>
    new Promise<void>((resolve) => {
      const s = connect({
        host: url.hostname,
        port: Number(url.port),
        ca: ctx.target.caPem,
        ...(ctx.target.localAddress ? { localAddress: ctx.target.localAddress } : {}),
      });
      const timer = setTimeout(() => {
        refused.add('no TLS in 10 s');
        s.destroy();
        resolve();
      }, 10_000);
      s.once('secureConnect', () => {
        clearTimeout(timer);
        opened++;
        sockets.add(s);
        const auth = i % 2 === 0 ? `Authorization: Bearer ${ctx.flooderToken}\r\n` : '';
        s.write(
          `POST /api/v1/proposals HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\n` +
            `Idempotency-Key: slow-${i}-${Date.now()}\r\n${auth}Content-Length: 1000000\r\n\r\n{`,
        );
        resolve();
      });
      s.on('error', (err: NodeJS.ErrnoException) => {
        if (!sockets.has(s)) {
          clearTimeout(timer);
          refused.add(err.code ?? 'error');
          resolve();
        }
      });
      s.on('close', () => {
        if (sockets.delete(s) && !stopped) closedByServer++;
      });
    });
  const openedBy = performance.now() + 20_000;
  for (let i = 0; i < ctx.sizes.slowConnections; i += 100) {
    if (performance.now() > openedBy) {
      refused.add(`not tried: opening took over 20 s (${ctx.sizes.slowConnections - i} left)`);
      break;
    }
    await Promise.all(
      Array.from({ length: Math.min(100, ctx.sizes.slowConnections - i) }, (_, j) => open(i + j)),
    );
  }
  const trickle = setInterval(() => {
    for (const s of sockets) if (s.writable) s.write(' ');
  }, 1000);
  return {
    async stop() {
      stopped = true;
      clearInterval(trickle);
      const stillOpen = sockets.size;
      for (const s of sockets) s.destroy();
      sockets.clear();
      return (
        `${ctx.sizes.slowConnections} slow bodies: ${opened} opened, refused: ${refused.text()}; ` +
        `${closedByServer} closed by the master during the window, ${stillOpen} still open at its end`
      );
    },
  };
};

/** explain_grant with a heavy spec (issue 35, item 7). */
const explain: FloodStarter = (ctx) => explainFlood(ctx.flooder, ctx.tools, ctx.sizes.tools);

/** request_grant with big scopes (issue 35, item 7). */
const grants: FloodStarter = (ctx) =>
  grantFlood(ctx.flooder, ctx.reviewer, ctx.tools, ctx.sizes.tools, ctx.dataDir, ctx.nextKey);

/** Long-polls held by one principal from the neighbours' address (issue 35, item 7). */
const longpolls: FloodStarter = async (ctx) => {
  const proposal = ctx.tools.pollProposal;
  if (!proposal) throw new Error('the long-poll flood was not prepared');
  return longPollFlood(ctx.neighbourTarget, ctx.flooderToken, proposal, ctx.sizes.tools.longPolls);
};

/**
 * The scenarios (the log flood last of the `noisy` section: on main its backlog outlives the window);
 * explain, grants and longpolls are the `noisy-tools` section's.
 */
export const FLOODS = {
  idle,
  uploads,
  diffs,
  slow,
  logs,
  explain,
  grants,
  longpolls,
} satisfies Record<string, FloodStarter>;

/** A scenario's name. */
export type ScenarioName = keyof typeof FLOODS;

/** What each scenario's flood is, for the table. */
export function floodLabel(name: ScenarioName, s: FloodSizes): string {
  const labels: Record<ScenarioName, string> = {
    idle: 'none',
    uploads: `${s.uploads} × PUT: wrong digest ${s.wrongUploadMiB} MiB, over quota ${s.uploadMiB} MiB`,
    diffs: `${s.diffReaders} × get_revision loop`,
    slow: `${s.slowConnections} slow bodies`,
    logs: `${s.logMiB} MiB stdout`,
    explain: `${s.tools.explainClients} × explain_grant, ${s.tools.explainMiB} MiB of inputs + ${s.tools.explainPaths} paths`,
    grants: `${s.tools.grantClients} × request_grant, scope ~${s.tools.grantKiB} KiB`,
    longpolls: `${s.tools.longPolls} long-polls, one principal, the neighbours' address`,
  };
  return labels[name];
}

/**
 * The big revision of the diff flood, made by `owner` through MCP: revision 1 with `files` text files of
 * `lines` lines each, sent back by `reader` (REQUEST_CHANGES, so it is revision 2's diff base), then
 * revision 2 with every file changed in its first, last and every 50th line, confirmed. Each file's
 * middle is then compared whole (lines × lines cells of the LCS table).
 */
export async function prepareDiffRevision(
  owner: Client,
  reader: Client,
  files: number,
  lines: number,
  nextKey: () => string,
): Promise<{ proposal_id: string; revision_id: string }> {
  const manifest = async (version: number) => {
    const all: Array<{ path: string; sha256: string; size: number }> = [];
    let batch: Array<{ path: string; content: string }> = [];
    let batchBytes = 0;
    const flush = async () => {
      if (batch.length === 0) return;
      const r = await callTool<{ inputs: typeof all }>(owner, 'upload_inputs', {
        files: batch,
        idempotency_key: nextKey(),
      });
      all.push(...r.inputs);
      batch = [];
      batchBytes = 0;
    };
    for (let f = 0; f < files; f++) {
      const text = diffFileText(f, lines, version);
      if (batch.length === 200 || batchBytes + text.length > 900 * 1024) await flush();
      batch.push({ path: `src/f${String(f).padStart(5, '0')}.txt`, content: text });
      batchBytes += text.length;
    }
    await flush();
    return all;
  };
  const spec = (inputs: unknown) => ({
    title: 'big diff',
    objective: 'many modified files',
    success_criteria: 'none',
    cards: { count: 1 },
    runtime: { kind: 'process', argv: ['/bin/true'] },
    inputs,
    outputs: [],
    time_limit_seconds: 60,
    notes: 'noisy-neighbour bench: the diff flood',
  });
  const p = await callTool<{ proposal_id: string; revision_id: string; digest: string }>(
    owner,
    'create_proposal',
    { spec: spec(await manifest(1)), idempotency_key: nextKey() },
  );
  await callTool(owner, 'confirm_revision', { ...ids(p), idempotency_key: nextKey() });
  await callTool(reader, 'submit_review', {
    ...ids(p),
    revision_digest: p.digest,
    decision: 'REQUEST_CHANGES',
    comments: 'change every file',
    idempotency_key: nextKey(),
  });
  const r2 = await callTool<{ revision_id: string }>(owner, 'revise_proposal', {
    proposal_id: p.proposal_id,
    spec: spec(await manifest(2)),
    idempotency_key: nextKey(),
  });
  await callTool(owner, 'confirm_revision', {
    proposal_id: p.proposal_id,
    revision_id: r2.revision_id,
    idempotency_key: nextKey(),
  });
  return { proposal_id: p.proposal_id, revision_id: r2.revision_id };
}

/** File `f` of the big revision in `version` (1 or 2). */
function diffFileText(f: number, lines: number, version: number): string {
  return Array.from({ length: lines }, (_, l) =>
    l === 0 || l === lines - 1 || l % 50 === 0 ? `line ${l} of ${f} v${version}` : `line ${l} of ${f}`,
  ).join('\n');
}

/** Bytes of one revision of the big diff (the larger of the two), for sizing the input quota. */
export function diffRevisionBytes(files: number, lines: number): number {
  let total = 0;
  for (let f = 0; f < files; f++) total += Buffer.byteLength(diffFileText(f, lines, 2));
  return total;
}

function ids(p: { proposal_id: string; revision_id: string }) {
  return { proposal_id: p.proposal_id, revision_id: p.revision_id };
}
