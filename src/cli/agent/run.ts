import { resolve } from 'node:path';
import { BrokerError } from '../../contracts/errors.js';
import type { TaskView } from '../../contracts/views.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CliIo, CommandRunner } from '../common/io.js';
import { type MasterClient, remoteSettings, withMaster } from '../common/master-client.js';
import { escapeField, jsonText, reportError } from '../common/output.js';
import type { CollectedInputs } from './propose-files.js';
import {
  type ConfirmAnswer,
  collectRunFiles,
  type ProposalLike,
  type RunFlags,
  runSpec,
  type Submitted,
  submitRun,
} from './run-submit.js';
import { leftOutLines, shipListing, shipNotice } from './ship-listing.js';
import {
  type DirMemory,
  hasLegacyMemory,
  LEGACY_MEMORY,
  memoryFile,
  readDirMemory,
  rememberRun,
} from './ship-memory.js';
import { RUN } from './task-command-specs.js';
import { endLine, followTask, LogReader, RUN_EXIT, taskExitCode } from './task-follow.js';
import { downloadOutputs } from './task-outputs.js';

/**
 * `gpu-broker run [--dir DIR] [--cards N] … -- COMMAND [ARG]…` (ADR 0026): one command from code to
 * result. run-submit.ts ships the files and proposes/revises/confirms; this file says who decides, waits
 * for the decision, follows the task (task-follow.ts: state lines, logs by offset), downloads the outputs
 * (task-outputs.ts) and turns the end into an exit code (RUN_EXIT). Its own lines go to stderr prefixed
 * `gpu-broker:`; the task's stdout and stderr go to stdout and stderr (both to stderr with --json, whose
 * stdout is one JSON document). Ctrl-C stops following and leaves the task running.
 *
 * What ships is selected before the master is contacted (propose-files.ts: ignore files, no symbolic
 * links, credentials and private keys refused unless `--include-secret`), listed in full before the
 * first run of a directory and with `--dry-run`, which stops there (ship-listing.ts, ship-memory.ts).
 */

/** What one run needs besides the client. */
interface RunContext {
  io: CliIo;
  values: RunFlags;
  dir: string;
  url: string;
  command: string[];
  abort: AbortController;
  say: (line: string) => void;
  /** Filled as the run goes, for --json. */
  summary: Record<string, unknown>;
}

/** Seconds one wait_for_proposal call may block (the tool allows 25). */
const DECISION_WAIT_S = 20;
/** How often "still waiting for review" is repeated. */
const STILL_WAITING_MS = 120_000;

/** Proposal states and the exit code a run ends with there (APPROVED goes on to the task). */
const DECISION_EXIT: Readonly<Record<string, number>> = {
  CHANGES_REQUESTED: RUN_EXIT.CHANGES_REQUESTED,
  REJECTED: RUN_EXIT.REJECTED,
  CANCELLED: RUN_EXIT.REJECTED,
  EXPIRED: RUN_EXIT.REJECTED,
};

/** The one line saying who decides, right after confirm. */
export function decisionLine(a: ConfirmAnswer): string {
  if (a.state === 'APPROVED' || a.grant?.covered)
    return `covered by grant ${escapeField(a.grant?.grant_id ?? '(unnamed)')} — starting`;
  const failing = a.grant?.failing;
  const clause = failing && !failing.message.includes(failing.clause) ? `${failing.clause}: ` : '';
  const which = a.grant?.grant_id ? `grant ${a.grant.grant_id}` : 'no grant';
  const why = failing ? ` — ${which} does not cover it: ${escapeField(`${clause}${failing.message}`)}` : '';
  return `waiting for review by a reviewer (the review queue: any principal with the reviewer role)${why}`;
}

/** How a review decision reads in a sentence. */
const DECIDED: Readonly<Record<string, string>> = {
  APPROVE: 'approved',
  REQUEST_CHANGES: 'changes requested',
  REJECT: 'rejected',
};

/** The reviews of the proposal's current revision, one line each. */
function reviewLines(p: ProposalLike): string[] {
  return p.reviews
    .filter((r) => r.revision_id === p.current_revision.revision_id)
    .map(
      (r) => `${DECIDED[r.decision] ?? r.decision} by ${escapeField(r.reviewer)}: ${escapeField(r.comments)}`,
    );
}

/** Waits (20 s per call) until the proposal leaves IN_REVIEW; 'interrupted' on Ctrl-C. */
async function waitForDecision(
  c: MasterClient,
  ctx: RunContext,
  id: string,
): Promise<ProposalLike | 'interrupted'> {
  const stopped = ctx.io.stopSignal?.then(() => 'interrupted' as const);
  const since = Date.now();
  let told = since;
  for (;;) {
    const call = c.get<{ proposal: ProposalLike }>(
      `/api/v1/proposals/${encodeURIComponent(id)}/wait?timeout_seconds=${DECISION_WAIT_S}`,
    );
    call.catch(() => undefined);
    const got = stopped ? await Promise.race([call, stopped]) : await call;
    if (got === 'interrupted') return got;
    if (got.proposal.state !== 'IN_REVIEW') return got.proposal;
    if (Date.now() - told >= STILL_WAITING_MS) {
      told = Date.now();
      ctx.say(`still waiting for review of ${id} (${Math.round((told - since) / 1000)} s)`);
    }
  }
}

/** Ctrl-C: stop every call in flight and say how to pick the task (or proposal) up again. */
function interrupted(ctx: RunContext, what: { taskId?: string; proposalId: string }): number {
  ctx.abort.abort();
  if (what.taskId) {
    ctx.say(`interrupted; task ${what.taskId} keeps running. Reattach with:`);
    ctx.say(`  gpu-broker task logs ${what.taskId} --follow   # or: gpu-broker task wait ${what.taskId}`);
    ctx.say(`  gpu-broker task outputs ${what.taskId} --dir ${ctx.dir}   # once it ended`);
  } else {
    ctx.say(`interrupted; proposal ${what.proposalId} stays in review.`);
    ctx.say('  Run the same command again to keep waiting (it attaches while the code is unchanged).');
  }
  ctx.summary['interrupted'] = true;
  return RUN_EXIT.INTERRUPTED;
}

/** From the submission to a task id, or the exit code the run ends with before any task. */
async function decide(c: MasterClient, ctx: RunContext, sub: Submitted): Promise<string | number> {
  if (sub.kind === 'findings') {
    for (const f of sub.r.findings)
      ctx.say(
        `${f.severity}: ${f.code} at ${escapeField(f.path)}: ${escapeField(f.message)} — ${escapeField(f.hint)}`,
      );
    ctx.say(`not sent to review: fix the error findings and run again (revises ${sub.r.proposal_id})`);
    return RUN_EXIT.FINDINGS;
  }
  const proposalId = sub.kind === 'attached' ? sub.proposal.proposal_id : sub.r.proposal_id;
  ctx.summary['proposal_id'] = proposalId;
  if (sub.kind === 'attached')
    ctx.say(
      `proposal ${proposalId} revision ${sub.proposal.current_revision.number} is already in review with this code; waiting for the decision`,
    );
  else {
    ctx.summary['revision_id'] = sub.r.revision_id;
    if (sub.answer.grant) ctx.summary['grant'] = sub.answer.grant;
    ctx.say(decisionLine(sub.answer));
    if (sub.answer.state === 'APPROVED' && sub.answer.task_id) return sub.answer.task_id;
  }
  const p =
    sub.kind === 'confirmed' && sub.answer.state === 'APPROVED'
      ? (await c.get<{ proposal: ProposalLike }>(`/api/v1/proposals/${encodeURIComponent(proposalId)}`))
          .proposal
      : await waitForDecision(c, ctx, proposalId);
  if (p === 'interrupted') return interrupted(ctx, { proposalId });
  ctx.summary['proposal_state'] = p.state;
  for (const line of reviewLines(p)) ctx.say(line);
  if (p.state === 'APPROVED' && p.task_id) return p.task_id;
  ctx.say(`proposal ${proposalId} ${p.state}: ${escapeField(p.next_action)}`);
  if (p.state === 'CHANGES_REQUESTED')
    ctx.say('edit the code and run the same command again: it revises this proposal');
  return DECISION_EXIT[p.state] ?? RUN_EXIT.REJECTED;
}

/** Follows the task to its end, downloads its outputs, and returns the run's exit code. */
async function followToEnd(c: MasterClient, ctx: RunContext, taskId: string): Promise<number> {
  ctx.summary['task_id'] = taskId;
  ctx.say(`task ${taskId}: following it (Ctrl-C stops following; the task keeps running)`);
  const out = ctx.values.json ? ctx.io.stderr : ctx.io.stdout;
  const logs = new LogReader(c, taskId, { stdout: out, stderr: ctx.io.stderr });
  const end = await followTask(c, taskId, {
    logs,
    stop: ctx.io.stopSignal,
    onState: (line) => ctx.say(line),
  });
  if (end === 'interrupted')
    return interrupted(ctx, { taskId, proposalId: String(ctx.summary['proposal_id']) });
  const t: TaskView = end.task;
  const code = taskExitCode(t);
  Object.assign(ctx.summary, {
    state: t.state,
    failure_reason: t.failure_reason,
    exit_code: t.exit_code,
    signal: t.signal,
  });
  ctx.say(endLine(t));
  if (t.state !== 'COMPLETED' && t.failure_reason !== 'EXIT_NONZERO')
    ctx.say(`next: ${escapeField(t.next_action)}`);
  if (ctx.values['no-download']) return code;
  try {
    const got = await downloadOutputs(c, taskId, ctx.dir);
    ctx.summary['outputs'] = got.files;
    if (got.files.length > 0) ctx.say(`outputs: ${got.files.length} file(s) in ${got.root} (sha256 checked)`);
  } catch (err) {
    reportError(ctx.io, false, err);
    return code === 0 ? 1 : code;
  }
  return code;
}

/** The whole run against a connected master, with the files already selected and announced. */
async function runWith(
  c: MasterClient,
  ctx: RunContext,
  collected: CollectedInputs,
  memory: DirMemory | undefined,
): Promise<number> {
  const { files } = collected;
  const spec = runSpec(ctx.values, ctx.command, files, ctx.dir);
  const sub = await submitRun(c, ctx.say, {
    values: ctx.values,
    files,
    spec,
    remembered: memory?.proposals[ctx.url],
    remember: (proposalId) =>
      rememberRun(ctx.io.env, ctx.dir, { shipped: files.map((f) => f.path), url: ctx.url, proposalId }),
  });
  ctx.summary['uploaded'] = sub.uploaded;
  ctx.summary['files'] = files.length;
  const taskOrCode = await decide(c, ctx, sub);
  if (typeof taskOrCode === 'number') return taskOrCode;
  return followToEnd(c, ctx, taskOrCode);
}

/** `--dry-run`: what would ship (every file), and nothing sent; needs no master and no token. */
function dryRun(ctx: RunContext, collected: CollectedInputs): number {
  const { io, values } = ctx;
  if (values.json)
    io.stdout(
      `${jsonText({
        dir: ctx.dir,
        count: collected.files.length,
        total_bytes: collected.totalBytes,
        files: collected.files.map((f) => ({ path: f.path, size: f.size, sha256: f.sha256 })),
        left_out: collected.leftOut,
      })}\n`,
    );
  else io.stdout(`${[...shipListing(ctx.dir, collected), ...leftOutLines(collected.leftOut)].join('\n')}\n`);
  return 0;
}

/** Says what ships before anything is sent: the listing on a first run, else the new files. */
function announce(ctx: RunContext, collected: CollectedInputs, memory: DirMemory | undefined): void {
  if (memory === undefined && hasLegacyMemory(ctx.dir))
    ctx.say(
      `ignoring ${LEGACY_MEMORY}: it could have come with the repository; this user's runs are remembered in ${memoryFile(ctx.io.env, ctx.dir)}`,
    );
  for (const line of shipNotice(ctx.dir, collected, memory)) ctx.say(line);
  for (const line of leftOutLines(collected.leftOut)) ctx.say(line);
}

/** Checks the numeric flags before anything is sent. */
function checkNumbers(values: RunFlags): void {
  for (const [flag, v] of [
    ['--cards', values.cards],
    ['--time-limit', values['time-limit']],
  ] as const)
    if (v !== undefined && !/^[1-9]\d{0,6}$/.test(v))
      throw new BrokerError(
        'INVALID_INPUT',
        `${flag} must be a whole number ≥ 1, not ${JSON.stringify(v)}`,
        `e.g. ${flag} 1`,
      );
}

/** `gpu-broker run`: see the module comment. */
export const run: CommandRunner = async (argv, io) => {
  const end = argv.indexOf('--');
  const parsed = parseCommand(RUN, end === -1 ? argv : argv.slice(0, end), io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const command = end === -1 ? [] : argv.slice(end + 1);
  const noCommand = command.length === 0 || command[0] === '';
  if (parsed.positionals.length > 0 || (noCommand && !values['dry-run']))
    return usageError(io, RUN, 'put the command after --, e.g. gpu-broker run -- python3 train.py');
  const ctx: RunContext = {
    io,
    values,
    command,
    dir: resolve(values.dir ?? '.'),
    url: '',
    abort: new AbortController(),
    say: (line) => io.stderr(`gpu-broker: ${line}\n`),
    summary: {},
  };
  try {
    checkNumbers(values);
    const collected = collectRunFiles(ctx.dir, values);
    if (values['dry-run']) return dryRun(ctx, collected);
    ctx.url = remoteSettings(values, io).url;
    const memory = readDirMemory(io.env, ctx.dir);
    announce(ctx, collected, memory);
    const code = await withMaster(values, io, (c) => runWith(c, ctx, collected, memory), ctx.abort.signal);
    if (values.json) io.stdout(`${jsonText({ ...ctx.summary, exit: code })}\n`);
    return code;
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
