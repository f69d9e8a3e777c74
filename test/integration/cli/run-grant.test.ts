import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run as runCommand } from '../../../src/cli/agent/run.js';
import type { CliIo } from '../../../src/cli/common/io.js';
import { clusterConfig } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { expectOk } from '../../support/mcp.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * ADR 0026 with §1: once a reviewer approved a standing grant, `gpu-broker run` of changed code inside
 * its scope says "covered by grant <id> — starting" and runs with no review; outside the scope it says
 * which clause failed and waits for a person. Skips itself on a master without standing grants (the two
 * slices were built apart; this runs once both are merged).
 */

let m: TestMaster;
let w: TestWorker;
let agent: Client;
let reviewer: Client;
let env: Record<string, string>;
let hasGrants = false;

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({
      policy: { scripts: [{ interpreter: '/usr/bin/python3', script_from_inputs: true }] },
    }),
  });
  const token = m.createToken('agent', ['submitter']);
  env = { GPU_BROKER_URL: m.url, GPU_BROKER_TOKEN: token, GPU_BROKER_CA_FILE: m.caCertPath ?? '' };
  agent = await m.mcpClient(token);
  reviewer = await m.mcpClient(m.createToken('rev', ['reviewer']));
  hasGrants = (await agent.listTools()).tools.some((t) => t.name === 'request_grant');
  if (!hasGrants) return;
  w = await startWorkerOn(m, 'w-grant', { simCards: 2 });
  await waitFor(() => m.deps.cluster.fleet.get('w-grant').cards.length === 2, { timeoutMs: 20_000 });
}, 60_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
  removeTempDirs();
});

/** Runs `gpu-broker run` in-process with output readable while it runs. */
function startRun(args: string[], stop?: Promise<void>) {
  let stderr = '';
  let stdout = '';
  const io: CliIo = {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env,
    ...(stop ? { stopSignal: stop } : {}),
  };
  return { done: runCommand(args, io), err: () => stderr, out: () => stdout };
}

describe('gpu-broker run under a standing grant', () => {
  it('starts covered runs without a review and names the failing clause otherwise', async (ctx) => {
    if (!hasGrants) ctx.skip();
    const dir = join(makeTempDir('run-grant'), 'proj');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'train.py'), 'print("v1")\n');
    const args = ['--dir', dir, '--', 'python3', 'train.py'];
    // 1. A first run, approved by a person.
    const first = startRun(args);
    await waitFor(() => first.err().includes('waiting for review by'), { what: first.err() });
    const queue = expectOk(
      await m.callTool<{ items: Array<{ proposal_id: string; revision_id: string }> }>(
        reviewer,
        'list_review_queue',
        {},
      ),
    );
    const base = queue.items[0]!;
    expectOk(
      await m.callTool(reviewer, 'submit_review', {
        proposal_id: base.proposal_id,
        revision_id: base.revision_id,
        decision: 'APPROVE',
        comments: 'fine',
        idempotency_key: m.key(),
      }),
    );
    expect(await first.done, first.err()).toBe(0);
    // 2. The agent asks for a grant over train.py; a reviewer approves it.
    const requested = expectOk(
      await m.callTool<{ grant: { grant_id: string } }>(agent, 'request_grant', {
        base_revision_id: base.revision_id,
        scope: { mutable_inputs: ['train.py'] },
        max_runs: 5,
        max_card_hours: 1,
        ttl_seconds: 3600,
        reason: 'iterate on train.py',
        idempotency_key: m.key(),
      }),
    );
    const grantId = requested.grant.grant_id;
    expectOk(
      await m.callTool(reviewer, 'decide_grant', {
        grant_id: grantId,
        decision: 'APPROVE',
        idempotency_key: m.key(),
      }),
    );
    // 3. Changed code inside the scope: covered, no review, the task's output and exit code.
    writeFileSync(join(dir, 'train.py'), 'print("v2")\n');
    const covered = startRun(args);
    expect(await covered.done, covered.err()).toBe(0);
    expect(covered.err()).toContain(`covered by grant ${grantId} — starting`);
    expect(covered.out()).toBe('v2\n');
    // 4. Two cards: outside the scope, a person must decide, and the run says why.
    let interrupt = () => {};
    const stop = new Promise<void>((resolve) => {
      interrupt = resolve;
    });
    const outside = startRun(['--cards', '2', ...args], stop);
    await waitFor(() => outside.err().includes('waiting for review by'), { what: outside.err() });
    expect(outside.err()).toMatch(new RegExp(`grant ${grantId} does not cover it: .*cards`));
    interrupt();
    expect(await outside.done).toBe(130);
  }, 90_000);
});
