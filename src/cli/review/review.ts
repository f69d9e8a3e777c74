import { BrokerError } from '../../contracts/errors.js';
import type { FlagValues } from '../../platform/args.js';
import { parseCommand, usageError } from '../common/args.js';
import type { CliIo, CommandRunner } from '../common/io.js';
import { type MasterClient, withMaster } from '../common/master-client.js';
import { emit, reportError, table } from '../common/output.js';
import { printPrompt, runAgent } from './review-agent.js';
import { REVIEW } from './review-command-specs.js';
import { formatRevision } from './review-format.js';
import { printInput, readWholeRevision } from './review-read.js';

const DECISIONS: Record<string, string> = {
  approve: 'APPROVE',
  'request-changes': 'REQUEST_CHANGES',
  reject: 'REJECT',
};

interface QueueItem {
  proposal_id: string;
  revision_id: string;
  revision_number: number;
  title: string;
  owner: string;
  cards: number;
  errors: number;
  warnings: number;
  own: boolean;
  needs_person?: { by: string; reason: string } | null;
}

/** The flags of `gpu-broker review`, as parsed. */
type ReviewFlags = FlagValues<typeof REVIEW.flags>;

/** `review list`: the queue, oldest first, with the reviewer's own proposals marked. */
async function listQueue(c: MasterClient, io: CliIo, json: boolean | undefined): Promise<number> {
  const q = await c.get<{ items: QueueItem[] }>('/api/v1/review-queue');
  emit(io, json, q, () =>
    q.items.length === 0
      ? 'nothing awaits review'
      : table(
          ['PROPOSAL', 'REV', 'REVISION_ID', 'CARDS', 'OWNER', 'FINDINGS', 'NEEDS_PERSON', 'TITLE'],
          q.items.map((i) => [
            i.proposal_id,
            i.revision_number,
            i.revision_id,
            i.cards,
            i.own ? `${i.owner} (you)` : i.owner,
            `${i.errors}E/${i.warnings}W`,
            i.needs_person ? `${i.needs_person.reason} (${i.needs_person.by})` : '',
            i.title,
          ]),
        ),
  );
  return 0;
}

/** `review show` and `review input`: one revision (`--revision`, else the current one), or one of its inputs. */
async function showRevision(
  c: MasterClient,
  io: CliIo,
  values: ReviewFlags,
  sub: 'show' | 'input',
  proposalId: string,
): Promise<number> {
  const revisionId =
    values.revision ??
    (
      await c.get<{ proposal: { current_revision: { revision_id: string } } }>(
        `/api/v1/proposals/${encodeURIComponent(proposalId)}`,
      )
    ).proposal.current_revision.revision_id;
  const base = `/api/v1/proposals/${encodeURIComponent(proposalId)}/revisions/${encodeURIComponent(revisionId)}`;
  if (sub === 'input') return await printInput(c, io, values, base, { proposalId, revisionId });
  const r = await readWholeRevision(c, base);
  emit(io, values.json, r, () => formatRevision(r));
  return 0;
}

/** `review approve|request-changes|reject`: judges one exact revision (`--revision`), saying why (`--comment`). */
async function decide(
  c: MasterClient,
  io: CliIo,
  values: ReviewFlags,
  sub: string | undefined,
  proposalId: string,
): Promise<number> {
  const decision = sub ? DECISIONS[sub] : undefined;
  if (!decision)
    throw new BrokerError(
      'INVALID_INPUT',
      `unknown subcommand "${sub ?? ''}"`,
      'gpu-broker review list|show|input|approve|request-changes|reject',
    );
  if (!values.revision || !values.comment)
    throw new BrokerError(
      'INVALID_INPUT',
      '--revision and --comment are required',
      'You judge one exact revision; say why.',
    );
  const out = await c.post<{ state: string; task_id: string | null }>(
    `/api/v1/proposals/${encodeURIComponent(proposalId)}/reviews`,
    {
      revision_id: values.revision,
      decision,
      comments: values.comment,
    },
  );
  emit(
    io,
    values.json,
    out,
    () => `${proposalId}: ${out.state}${out.task_id ? ` → task ${out.task_id}` : ''}`,
  );
  return 0;
}

/** `gpu-broker review list|show|input|approve|request-changes|reject` for people who review. */
export const run: CommandRunner = async (argv, io) => {
  const parsed = parseCommand(REVIEW, argv, io);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const [sub, ...positionals] = parsed.positionals;
  if (!REVIEW.subcommands?.includes(sub ?? ''))
    return usageError(
      io,
      REVIEW,
      sub
        ? `unknown subcommand "${sub}"`
        : 'which subcommand: list, show, input, approve, request-changes, reject, prompt or agent?',
    );
  const noProposal = sub === 'list' || sub === 'agent';
  if (positionals.length > (noProposal ? 0 : 1))
    return usageError(io, REVIEW, `unexpected "${positionals[noProposal ? 0 : 1]}"`);
  if (!noProposal && !positionals[0]) return usageError(io, REVIEW, 'which proposal?');
  try {
    return await withMaster(values, io, async (c) => {
      if (sub === 'list') return await listQueue(c, io, values.json);
      if (sub === 'agent') return await runAgent(c, io, values);
      const proposalId = positionals[0];
      if (!proposalId)
        throw new BrokerError(
          'INVALID_INPUT',
          'which proposal?',
          `gpu-broker review ${sub ?? 'show'} PROPOSAL_ID`,
        );
      if (sub === 'show' || sub === 'input') return await showRevision(c, io, values, sub, proposalId);
      if (sub === 'prompt') return await printPrompt(c, io, values, proposalId);
      return await decide(c, io, values, sub, proposalId);
    });
  } catch (err) {
    return reportError(io, values.json, err);
  }
};
