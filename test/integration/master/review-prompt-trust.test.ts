import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fences } from '../../../src/domain/review/prompt.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';

/**
 * docs/security.md "What a reviewer must read, and what the broker guarantees" through a real master and the real MCP SDK client: the trusted part of an agent
 * reviewer's prompt (everything outside the fenced block) holds nothing a submitter wrote. Every field a
 * submitter controls carries a canary (`zqcanary` and a field tag); the test walks them all, across a
 * revision diffed against an earlier one a person decided on, with error findings that quote submitted
 * values and a ceiling refusal that does too, and fails if any canary reaches the trusted part.
 */

const MARK = 'zqcanary';
const c = (field: string) => `${MARK}${field}`;

let m: TestMaster;
let submitter: Client;
let agent: Client;
let person: Client;

beforeAll(async () => {
  m = await startTestMaster();
  submitter = await m.mcpClient(m.createToken(c('owner'), ['submitter']));
  agent = await m.mcpClient(m.createToken('claude-rev', ['agent_reviewer']));
  person = await m.mcpClient(m.createToken(c('reviewer'), ['reviewer']));
});
afterAll(async () => {
  await m?.close();
});

/** The prompt's lines outside the fenced block, and the block's. */
function split(prompt: string, nonce: string): { trusted: string; block: string } {
  const f = fences(nonce);
  const lines = prompt.split('\n');
  const begin = lines.indexOf(f.begin);
  const end = lines.indexOf(f.end);
  expect(begin).toBeGreaterThan(0);
  expect(end).toBeGreaterThan(begin);
  return {
    trusted: [...lines.slice(0, begin), ...lines.slice(end + 1)].join('\n'),
    block: lines.slice(begin + 1, end).join('\n'),
  };
}

/** Every submitter-controlled string of a spec, each carrying its own canary. */
/** The submitter confirms revision `revisionId` of proposal `proposalId`. */
async function confirm(proposalId: string, revisionId: string): Promise<void> {
  expectOk(
    await m.callTool(submitter, 'confirm_revision', {
      proposal_id: proposalId,
      revision_id: revisionId,
      idempotency_key: m.key(),
    }),
  );
}

function canarySpec(version: string) {
  return validSpec({
    title: c(`title${version}`),
    objective: c('objective'),
    success_criteria: c('success'),
    notes: c('notes'),
    runtime: {
      kind: 'process',
      // argv[0] is the operator's (an allowed executable); the script is an input, and the warning
      // findings on it and on the mount quote submitted paths and argv.
      argv: ['/bin/sh', `${c('input')}/${c('input')}.sh`, `--${c('flag')}=${version}`],
      env: { [c('ENVNAME').toUpperCase()]: c(`envvalue${version}`) },
    },
    outputs: [{ path: `${c('out')}.json`, required: true }],
    mounts: [c('mount')],
  });
}

const FIELDS = [
  'owner',
  'title2',
  'objective',
  'success',
  'notes',
  'flag',
  'envname',
  'envvalue2',
  'out',
  'mount',
  'input',
  'comment',
  'reviewer',
];

describe('the trusted part of the review prompt', () => {
  it('holds no byte of any field a submitter controls', async () => {
    const up = expectOk(
      await m.callTool<{ inputs: Array<{ path: string; sha256: string; size: number }> }>(
        submitter,
        'upload_inputs',
        {
          files: [
            { path: `${c('input')}/${c('input')}.py`, content: `print("${c('body')}")\n`, encoding: 'utf8' },
          ],
          idempotency_key: m.key(),
        },
      ),
    ).inputs;
    const first = expectOk(
      await m.callTool<{ proposal_id: string; revision_id: string; digest: string }>(
        submitter,
        'create_proposal',
        {
          spec: { ...canarySpec('1'), inputs: up },
          idempotency_key: m.key(),
        },
      ),
    );
    await confirm(first.proposal_id, first.revision_id);
    expectOk(
      await m.callTool(person, 'submit_review', {
        proposal_id: first.proposal_id,
        revision_id: first.revision_id,
        revision_digest: first.digest,
        decision: 'REQUEST_CHANGES',
        comments: c('comment'),
        idempotency_key: m.key(),
      }),
    );
    const second = expectOk(
      await m.callTool<{ revision_id: string }>(submitter, 'revise_proposal', {
        proposal_id: first.proposal_id,
        spec: { ...canarySpec('2'), inputs: up },
        idempotency_key: m.key(),
      }),
    );
    await confirm(first.proposal_id, second.revision_id);
    const out = expectOk(
      await m.callTool<{ prompt: string; nonce: string; agent_ceiling: { within: boolean } }>(
        agent,
        'get_review_prompt',
        { proposal_id: first.proposal_id },
      ),
    );
    expect(out.agent_ceiling.within).toBe(false);
    const { trusted, block } = split(out.prompt, out.nonce);
    // The trusted part still says what the broker knows: counts, codes, the clause, the base.
    expect(trusted).toMatch(/^finding 1: [A-Z_]+$/m);
    expect(trusted).toMatch(/^agent_ceiling clause: [a-z_]+$/m);
    expect(trusted).toMatch(/^diff base: 1$/m);
    expect(trusted).toMatch(/^diff base decided by: person$/m);
    expect(trusted).toMatch(/^spec fields changed: [1-9]\d*$/m);
    expect(trusted).toMatch(/^mounts: 1$/m);
    // Not one canary there, whatever its case; each one is in the block instead.
    expect(trusted.toLowerCase()).not.toContain(MARK);
    for (const field of FIELDS) expect(block.toLowerCase(), field).toContain(`${MARK}${field}`);
    // Every trusted line is `name: value` with a one-token value.
    const facts = trusted.slice(trusted.indexOf('== TRUSTED FACTS'), trusted.indexOf('== VERDICT'));
    for (const line of facts.split('\n').slice(1))
      if (line !== '') expect(line, line).toMatch(/^[a-z0-9_ .]+: [A-Za-z0-9_.:-]+$/);
  });

  it('says which files are placed executable, inside the block with the file', async () => {
    const up = expectOk(
      await m.callTool<{ inputs: Array<{ path: string; sha256: string; size: number }> }>(
        submitter,
        'upload_inputs',
        {
          files: [
            { path: 'run.sh', content: 'echo run\n', encoding: 'utf8' },
            { path: 'data.txt', content: 'plain\n', encoding: 'utf8' },
          ],
          idempotency_key: m.key(),
        },
      ),
    ).inputs;
    const inputs = up.map((i) => (i.path === 'run.sh' ? { ...i, executable: true } : i));
    const created = expectOk(
      await m.callTool<{ proposal_id: string; revision_id: string }>(submitter, 'create_proposal', {
        spec: { ...canarySpec('3'), inputs },
        idempotency_key: m.key(),
      }),
    );
    await confirm(created.proposal_id, created.revision_id);
    const out = expectOk(
      await m.callTool<{ prompt: string; nonce: string }>(agent, 'get_review_prompt', {
        proposal_id: created.proposal_id,
      }),
    );
    const { block } = split(out.prompt, out.nonce);
    expect(block).toMatch(/file "run\.sh" \(9 bytes, executable\)/);
    expect(block).toMatch(/file "data\.txt" \(6 bytes\)/);
  });
});
