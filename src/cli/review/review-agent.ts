import { userInfo } from 'node:os';
import { resolve } from 'node:path';
import { BrokerError } from '../../contracts/errors.js';
import type { CliIo } from '../common/io.js';
import { type MasterClient, remoteSettings } from '../common/master-client.js';
import { emit } from '../common/output.js';
import { parseModelNetwork, sandboxedModel, unsandboxedModel } from './model-sandbox.js';
import {
  type LoopOutcome,
  type ModelRunner,
  type PromptAnswer,
  type QueueEntry,
  type ReviewPort,
  reviewPass,
} from './review-agent-loop.js';

/** `gpu-broker review prompt` and `gpu-broker review agent` (client-kit/REVIEWER.md). */

/** The flags these two subcommands read. */
export interface AgentFlags {
  revision?: string | undefined;
  'max-bytes'?: string | undefined;
  command?: string | undefined;
  once?: boolean | undefined;
  'timeout-seconds'?: string | undefined;
  'interval-seconds'?: string | undefined;
  json?: boolean | undefined;
  'model-env'?: string[] | undefined;
  'model-bind'?: string[] | undefined;
  'model-network'?: string | undefined;
  'unsandboxed-model'?: boolean | undefined;
  token?: string | undefined;
  'token-file'?: string | undefined;
}

const enc = encodeURIComponent;

/** The loop's port over REST. */
function restPort(c: MasterClient): ReviewPort {
  return {
    async queue() {
      const items: QueueEntry[] = [];
      let cursor: string | null = null;
      do {
        const q: { items: QueueEntry[]; next_cursor: string | null } = await c.get(
          `/api/v1/review-queue?limit=200${cursor ? `&cursor=${enc(cursor)}` : ''}`,
        );
        items.push(...q.items);
        cursor = q.next_cursor;
      } while (cursor !== null);
      return items;
    },
    prompt: (proposalId, revisionId) =>
      c.get<PromptAnswer>(
        `/api/v1/proposals/${enc(proposalId)}/review-prompt?revision_id=${enc(revisionId)}`,
      ),
    submit: ({ proposal_id, ...body }) => c.post(`/api/v1/proposals/${enc(proposal_id)}/reviews`, body),
  };
}

/** A whole number of seconds from a flag, within bounds. */
function seconds(value: string | undefined, fallback: number, flag: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 86400)
    throw new BrokerError(
      'INVALID_INPUT',
      `--${flag} must be a whole number of seconds from 1 to 86400`,
      `e.g. --${flag} 300`,
    );
  return n;
}

/** `review prompt PROPOSAL`: prints the prompt (or, with --json, the whole answer). */
export async function printPrompt(
  c: MasterClient,
  io: CliIo,
  values: AgentFlags,
  proposalId: string,
): Promise<number> {
  const q = new URLSearchParams();
  if (values.revision) q.set('revision_id', values.revision);
  if (values['max-bytes']) q.set('max_bytes', values['max-bytes']);
  const qs = q.toString();
  const out = await c.get<PromptAnswer>(
    `/api/v1/proposals/${enc(proposalId)}/review-prompt${qs ? `?${qs}` : ''}`,
  );
  if (values.json) emit(io, true, out, () => '');
  else io.stdout(out.prompt);
  return 0;
}

/** Printed on stderr when the operator runs the model outside the sandbox. */
const UNSANDBOXED_WARNING = `WARNING: --unsandboxed-model: the model command runs as you, outside any sandbox. A model with a
shell or file tool, steered by a proposal, can read this loop's reviewer token (its environment, its
command line, the token file) and whatever else you can read, and act with it. Only a model with no
tools at all is safe this way. Install bubblewrap and drop this flag.
`;

/**
 * The model runner for `review agent`: sandboxed (model-sandbox.ts), or with --unsandboxed-model the
 * loop's own user after a warning. Every flag is checked here, before the queue is read.
 */
async function modelRunner(io: CliIo, values: AgentFlags, command: string): Promise<ModelRunner> {
  const timeoutMs = seconds(values['timeout-seconds'], 300, 'timeout-seconds') * 1000;
  const envNames = values['model-env'] ?? [];
  const network = parseModelNetwork(values['model-network']);
  if (values['unsandboxed-model']) {
    if ((values['model-bind'] ?? []).length > 0 || network !== 'none')
      throw new BrokerError(
        'INVALID_INPUT',
        '--model-bind and --model-network shape the sandbox, which --unsandboxed-model turns off',
        'Drop them, or drop --unsandboxed-model.',
      );
    io.stderr(UNSANDBOXED_WARNING);
    return unsandboxedModel({ command, timeoutMs, envNames, parentEnv: io.env });
  }
  return sandboxedModel({
    command,
    timeoutMs,
    network,
    binds: values['model-bind'] ?? [],
    envNames,
    parentEnv: io.env,
    cwd: resolve('.'),
    tokenFile: values['token-file'] ?? io.env['GPU_BROKER_TOKEN_FILE'],
    root: userInfo().uid === 0,
  });
}

const line = (o: LoopOutcome) =>
  `${o.proposal_id} ${o.revision_id}: ${o.outcome} (${o.reason.replace(/\s+/g, ' ').slice(0, 200)})`;

/**
 * `review agent --command CMD [--once]`: the fail-closed loop. With --once, one pass over the queue;
 * otherwise a pass every --interval-seconds until interrupted. Exit 0 unless a call to the master failed.
 * The model runs sandboxed (model-sandbox.ts, ADR 0041); UNAVAILABLE before any pass when it cannot be.
 */
export async function runAgent(c: MasterClient, io: CliIo, values: AgentFlags): Promise<number> {
  if (!values.command)
    throw new BrokerError(
      'INVALID_INPUT',
      '--command is required',
      'e.g. review agent --command \'claude -p --tools ""\'',
    );
  const model = await modelRunner(io, values, values.command);
  // The token this loop holds: a verdict whose reasons carry it (or a piece of it) is never submitted.
  const secrets = [remoteSettings({ ...values }, io).token];
  const port = restPort(c);
  const seen = new Set<string>();
  const interval = seconds(values['interval-seconds'], 10, 'interval-seconds');
  let stopped = false;
  void io.stopSignal?.then(() => {
    stopped = true;
  });
  for (;;) {
    const outcomes = await reviewPass(port, model, seen, secrets);
    for (const o of outcomes) if (!values.json) io.stdout(`${line(o)}\n`);
    if (values.once) {
      if (values.json) emit(io, true, { outcomes }, () => '');
      return outcomes.some((o) => o.outcome === 'ERROR') ? 1 : 0;
    }
    if (stopped) return 0;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([new Promise((r) => (timer = setTimeout(r, interval * 1000))), io.stopSignal]);
    clearTimeout(timer);
    if (stopped) return 0;
  }
}
