import {
  type EvidenceDocument,
  evidenceDigest,
  isolationLine,
  rungName,
  summaryRows,
} from '../../../qualification/verify/evidence.js';
import { BrokerError } from '../../contracts/errors.js';
import { cardLabel } from '../../contracts/sample.js';
import type { QualificationRunView } from '../../contracts/tools-qualification.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CliIo, CommandRunner } from '../common/io.js';
import { type MasterClient, withMaster } from '../common/master-client.js';
import { escapeField, escapeText, jsonText, reportError, table } from '../common/output.js';
import { QUALIFY } from './command-specs.js';

/**
 * `gpu-broker qualify [--worker ID] [--cards 1,2,4,8] [--submitter scripted|claude|codex] [--json]`
 * starts a qualification run on the master (start_qualification), follows it with a line per step and
 * its elapsed time, and ends with the summary table and the verdict; `--json` prints the evidence
 * document (progress then goes to stderr). `gpu-broker qualify show RUN_ID [--json]` prints a stored
 * run. Both exit 0 only on PASSED, and both re-check the evidence digest before trusting it.
 */

const USAGE =
  'usage: gpu-broker qualify [--worker ID] [--cards 1,2,4,8] [--submitter scripted|claude|codex] [--json]\n' +
  '       gpu-broker qualify show RUN_ID [--json]\n' +
  '       gpu-broker qualify cancel RUN_ID [--json]';

/** How often a followed run is re-read. */
const POLL_MS = 500;

export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(QUALIFY, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values, positionals } = parsed;
  if (positionals.length > 0 && !QUALIFY.subcommands?.includes(positionals[0] ?? ''))
    return usageError(io, QUALIFY, `unexpected "${positionals[0]}"`);
  if (positionals.length > 2) return usageError(io, QUALIFY, `unexpected "${positionals[2]}"`);
  try {
    if (positionals[0] === 'cancel') {
      const runId = positionals[1];
      if (!runId) throw new BrokerError('INVALID_INPUT', 'which run?', USAGE);
      return await withMaster(values, io, async (c) => {
        const view = await c.post<QualificationRunView>(
          `/api/v1/qualifications/${encodeURIComponent(runId)}/cancel`,
          {},
        );
        if (values.json) io.stdout(`${jsonText(view)}\n`);
        else
          io.stdout(`${escapeField(runId)}: cancelling; its cards stay cordoned until gpu-broker uncordon\n`);
        return 0;
      });
    }
    if (positionals[0] === 'show') {
      const runId = positionals[1];
      if (!runId) throw new BrokerError('INVALID_INPUT', 'which run?', USAGE);
      return await withMaster(values, io, async (c) => {
        const view = await getRun(c, runId);
        if (!values.json) printHeader(view, (t) => io.stdout(t));
        for (const s of view.steps) if (!values.json) io.stdout(`${stepLine(s)}\n`);
        await printFailedRungLogs(c, view, values.json ? io.stderr : io.stdout);
        return finish(io, view, values.json === true);
      });
    }
    if (positionals.length > 0)
      throw new BrokerError('INVALID_INPUT', `unexpected "${positionals[0]}"`, USAGE);
    const cards = values.cards === undefined ? undefined : parseCards(values.cards);
    const submitter = values.submitter ?? 'scripted';
    if (!['scripted', 'claude', 'codex'].includes(submitter))
      throw new BrokerError('INVALID_INPUT', `unknown submitter "${submitter}"`, USAGE);
    return await withMaster(values, io, async (c) => {
      const workerId = values.worker ?? (await onlyWorker(c));
      const started = await c.post<QualificationRunView>('/api/v1/qualifications', {
        worker_id: workerId,
        submitter,
        ...(cards ? { cards } : {}),
      });
      // With --json stdout holds only the evidence document; progress goes to stderr.
      const progress = values.json ? io.stderr : io.stdout;
      printHeader(started, progress);
      const view = await follow(c, io, started, progress);
      if (view === null) return 130;
      await printFailedRungLogs(c, view, progress);
      return finish(io, view, values.json === true);
    });
  } catch (err) {
    // The preflight's refusal says everything in its one line (what is missing and how to fix it).
    if (!values.json && err instanceof BrokerError && isPreflightRefusal(err)) {
      io.stderr(`error: ${escapeText(err.message)}\n`);
      return 1;
    }
    return reportError(io, values.json, err);
  }
};

function isPreflightRefusal(err: BrokerError): boolean {
  const d = err.details as { reason?: unknown } | undefined;
  return d?.reason === 'QUALIFICATION_PYTHON_UNUSABLE';
}

/** Lines of a failed rung's stderr that `qualify` shows (the cause is almost always at the end). */
const STDERR_TAIL_LINES = 20;

/**
 * For every rung that did not pass and has a task, prints the tail of that task's stderr (read through
 * the REST twin of get_task_logs): "qualification.json was not uploaded" alone does not say that torch
 * failed to import.
 */
async function printFailedRungLogs(
  c: MasterClient,
  v: QualificationRunView,
  out: (t: string) => void,
): Promise<void> {
  const doc = v.evidence as EvidenceDocument | null;
  if (doc === null) return;
  for (const r of doc.rungs) {
    if (r.ok || r.task_id === null) continue;
    let tail: string;
    try {
      const logs = await c.get<{ data: string }>(
        `/api/v1/tasks/${encodeURIComponent(r.task_id)}/logs?stream=stderr&tail_lines=${STDERR_TAIL_LINES}`,
      );
      tail = logs.data.trimEnd();
    } catch (err) {
      tail = `(could not read it: ${(err as Error).message})`;
    }
    out(
      `\n${rungName(r)}: stderr of task ${r.task_id} (last ${STDERR_TAIL_LINES} lines):\n` +
        `${tail === '' ? '(empty)' : escapeText(tail).replace(/^/gm, '  ')}\n`,
    );
  }
}

function parseCards(text: string): number[] {
  const counts = text.split(',').map((s) => Number(s.trim()));
  if (counts.length === 0 || counts.some((n) => !Number.isInteger(n) || n < 1 || n > 64))
    throw new BrokerError('INVALID_INPUT', `bad --cards "${text}"`, 'e.g. --cards 1,2,4,8');
  return counts;
}

/** Without --worker: the one online worker, or a clear error naming the choices. */
async function onlyWorker(c: MasterClient): Promise<string> {
  const { workers } = await c.get<{ workers: Array<{ worker_id: string; online: boolean }> }>(
    '/api/v1/workers',
  );
  const online = workers.filter((w) => w.online);
  if (online.length === 1) return online[0]!.worker_id;
  throw new BrokerError(
    'INVALID_INPUT',
    online.length === 0 ? 'no worker is online' : `${online.length} workers are online; which one?`,
    `Pass --worker ID (${workers.map((w) => `${w.worker_id}${w.online ? '' : ' (offline)'}`).join(', ') || 'none enrolled'}).`,
  );
}

function getRun(c: MasterClient, runId: string): Promise<QualificationRunView> {
  return c.get<QualificationRunView>(`/api/v1/qualifications/${encodeURIComponent(runId)}`);
}

function printHeader(v: QualificationRunView, out: (t: string) => void): void {
  const skipped = v.skipped.map((s) => `${s.cards} (${escapeField(s.reason)})`).join('; ');
  // Older masters send no slices.
  const slices = (v.slices ?? []).map((s) => `${escapeField(s.card)} (${escapeField(s.profile ?? 'gone')})`);
  out(
    `qualification run ${v.run_id} on ${escapeField(v.worker_id)}: ` +
      `${slices.length > 0 ? `GEMM on MIG slice(s) ${slices.join(', ')}; ` : ''}ladder ${v.ladder.join(',') || 'none'}` +
      `${v.span ? ` then ${v.span.cards} across 2 nodes (${v.span.per_node} per node)` : ''}` +
      `${skipped ? `; skipped ${skipped}` : ''}; cards ${v.reserved_cards.map(cardLabel).join(',') || 'none'} cordoned; ` +
      `submitter ${escapeField(v.submitter)}\n`,
  );
}

function stepLine(s: QualificationRunView['steps'][number]): string {
  const elapsed = `${(s.elapsed_ms / 1000).toFixed(1)}s`.padStart(8);
  const rung = s.cards === null ? '' : `${s.cards} card${s.cards === 1 ? '' : 's'}: `;
  return `[${elapsed}] ${rung}${escapeText(s.text)}`;
}

/** Prints each new step until the run ends; null when the user interrupted (the run goes on). */
async function follow(
  c: MasterClient,
  io: CliIo,
  started: QualificationRunView,
  out: (t: string) => void,
): Promise<QualificationRunView | null> {
  let shown = 0;
  let interrupted = false;
  void io.stopSignal?.then(() => {
    interrupted = true;
  });
  for (;;) {
    const view = await getRun(c, started.run_id);
    for (const s of view.steps.filter((x) => x.seq > shown)) out(`${stepLine(s)}\n`);
    shown = Math.max(shown, ...view.steps.map((s) => s.seq));
    if (view.state !== 'RUNNING') return view;
    if (interrupted) {
      io.stderr(
        `stopped following; run ${view.run_id} goes on on the master: gpu-broker qualify show ${view.run_id}\n`,
      );
      return null;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** Prints the outcome and returns the exit code: 0 only for PASSED evidence whose digest checks out. */
function finish(io: CliIo, v: QualificationRunView, json: boolean): number {
  const doc = v.evidence as EvidenceDocument | null;
  if (doc === null) {
    if (json)
      io.stdout(
        `${jsonText({ run_id: v.run_id, state: v.state, verdict: null, digest: null, detail: v.detail })}\n`,
      );
    else
      io.stdout(
        `run ${v.run_id}: ${v.state}${v.detail ? ` (${escapeField(v.detail)})` : ''}; no evidence\n${escapeText(v.next_action)}\n`,
      );
    return 1;
  }
  const digestOk = evidenceDigest(doc) === doc.digest && doc.digest === v.digest;
  if (json) io.stdout(`${jsonText(doc)}\n`);
  else {
    io.stdout(
      `\n${table(['CARDS', 'GPU IDS', 'ALL_REDUCE', 'GEMM', 'BUSBW GB/s', 'RESULT'], summaryRows(doc))}\n\n` +
        `verdict: ${doc.verdict}${doc.worker.simulated ? ' (simulated cards: gloo on CPU, not a GPU result)' : ''}\n` +
        `worker: ${escapeField(doc.worker.worker_id)}${doc.worker.hostname ? ` (${escapeField(doc.worker.hostname)})` : ''}${doc.worker.backend === 'slurm' ? '; Slurm pool (each rung a Slurm job)' : ''}; ${isolationLine(doc.worker)}\n` +
        `evidence: sha256 ${doc.digest} (gpu-broker qualify show ${v.run_id} --json)\n` +
        (doc.failed_checks.length > 0
          ? `failed checks:\n${doc.failed_checks.map((f) => `  - ${escapeField(f)}`).join('\n')}\n`
          : '') +
        `${escapeText(v.next_action)}\n`,
    );
  }
  if (!digestOk) {
    io.stderr(`error: the evidence digest does not match its document; do not trust this run\n`);
    return 1;
  }
  return doc.verdict === 'PASSED' ? 0 : 1;
}
