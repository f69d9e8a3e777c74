import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run as propose } from '../../../src/cli/agent/propose.js';
import { runCli } from '../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { makeTempDir } from '../../support/temp.js';

/**
 * ADR 0029: `propose --confirm` answered `state: IN_REVIEW` with the next_action of the DRAFT it
 * had created ("Call confirm_revision…"). What it prints now describes the proposal as it is after the
 * last call, and says the same as get_proposal over MCP.
 */

let m: TestMaster;
let remote: string[];
let aliceToken: string;
let dir: string;

beforeAll(async () => {
  m = await startTestMaster({
    config: { policy: { scripts: [{ interpreter: '/usr/bin/python3', script_from_inputs: true }] } },
  });
  aliceToken = m.createToken('alice', ['submitter']);
  remote = ['--url', m.url, '--token', aliceToken, '--ca-file', m.caCertPath!];
  dir = makeTempDir('confirm-project');
  writeFileSync(join(dir, 'train.py'), 'print(1)\n');
});

afterAll(async () => {
  await m?.close();
});

const args = () => ['--dir', dir, '--entry', 'python3 train.py', '--notes', 'prints 1', ...remote];

/** What get_proposal says over MCP to the proposal's owner. */
async function mcpNextAction(proposalId: string): Promise<{ state: string; next_action: string }> {
  const agent = await m.mcpClient(aliceToken);
  type View = { proposal: { state: string; next_action: string } };
  return expectOk(await m.callTool<View>(agent, 'get_proposal', { proposal_id: proposalId })).proposal;
}

describe('propose --confirm', () => {
  it('answers IN_REVIEW with the next action of IN_REVIEW, the same as get_proposal says', async () => {
    const r = await runCli(propose, [...args(), '--confirm', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const j = r.json<{ proposal_id: string; state: string; next_action: string }>();
    expect(j.state).toBe('IN_REVIEW');
    expect(j.next_action).toContain('wait_for_proposal');
    expect(j.next_action).not.toContain('confirm_revision');
    expect(await mcpNextAction(j.proposal_id)).toMatchObject({
      state: 'IN_REVIEW',
      next_action: j.next_action,
    });
  });

  it('without --confirm answers DRAFT with how to confirm; the text output says what next too', async () => {
    const r = await runCli(propose, args());
    expect(r.code, r.stderr).toBe(0);
    const id = /proposal (prop_\w+) revision 1 \((rev_\w+)\) DRAFT/.exec(r.stdout);
    expect(id, r.stdout).not.toBeNull();
    expect(r.stdout).toContain(
      `next: Call confirm_revision with proposal_id ${id![1]} and revision_id ${id![2]}`,
    );
    const confirmed = await runCli(propose, [...args(), '--proposal', id![1]!, '--confirm']);
    expect(confirmed.stdout).toMatch(/revision 2 \(rev_\w+\) IN_REVIEW\n/);
    expect(confirmed.stdout).toContain('next: An independent reviewer must decide; call wait_for_proposal');
    expect(confirmed.stdout).not.toContain('confirm_revision');
  });
});
