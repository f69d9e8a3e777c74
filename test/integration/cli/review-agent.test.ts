import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../../src/cli/review/review.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { probeBwrap } from '../../../worker/sandbox/bwrap.js';
import { runCli } from '../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { proposeInReview } from '../../support/proposals.js';
import { isRoot, requireOrSkip } from '../../support/require-or-skip.js';
import { validSpec } from '../../support/spec.js';

/** `gpu-broker review prompt` and `gpu-broker review agent --once` against a real master over REST. */

const FIXTURES = join(packageRoot(), 'test/fixtures/review-corpus');
const MODEL = `${process.execPath} ${join(FIXTURES, 'obedient-model.mjs')}`;
/** The model runs sandboxed (ADR 0041): it sees its fixture, and node where it is not a system dir. */
const BINDS = [
  '--model-bind',
  FIXTURES,
  ...(process.execPath.startsWith('/usr/') ? [] : ['--model-bind', dirname(dirname(process.execPath))]),
];

const probe = await probeBwrap({ root: isRoot });
const sandboxed = requireOrSkip('bubblewrap', probe.ok, probe.detail);

let m: TestMaster;
let env: Record<string, string | undefined>;
let small: string;
let big: string;

beforeAll(async () => {
  m = await startTestMaster();
  const sam = await m.mcpClient(m.createToken('sam', ['submitter']));
  small = (await proposeInReview(sam, validSpec({ title: 'small one' }))).proposal_id;
  big = (await proposeInReview(sam, validSpec({ title: 'big one', cards: { count: 2 } }))).proposal_id;
  env = {
    GPU_BROKER_URL: m.url,
    GPU_BROKER_TOKEN: m.createToken('llm', ['agent_reviewer']),
    GPU_BROKER_CA_FILE: m.caCertPath ?? undefined,
    PATH: process.env['PATH'],
  };
});
afterAll(async () => {
  await m?.close();
});

describe('gpu-broker review prompt|agent', () => {
  it('prompt prints the facts, the fenced submitted text and the verdict format', async () => {
    const r = await runCli(run, ['prompt', big], env);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('== TRUSTED FACTS (written by gpu-broker) ==');
    expect(r.stdout).toContain('agent_ceiling: above\nagent_ceiling clause: cards');
    expect(r.stdout).toContain('| cards 2 > 1');
    expect(r.stdout).toMatch(/^<<<<<<<< UNTRUSTED SUBMITTED TEXT [0-9a-f]{32} BEGIN >>>>>>>>$/m);
    expect(r.stdout).toContain('| big one');
    expect(r.stdout).toContain('== VERDICT ==');
  });

  it.runIf(sandboxed)(
    'agent --once approves within the ceiling and leaves the rest to a person',
    async () => {
      const r = await runCli(run, ['agent', '--command', MODEL, ...BINDS, '--once', '--json'], env);
      expect(r.code).toBe(0);
      const { outcomes } = r.json<{
        outcomes: Array<{ proposal_id: string; outcome: string; reason: string }>;
      }>();
      expect(outcomes.find((o) => o.proposal_id === small)?.outcome).toBe('APPROVED');
      expect(outcomes.find((o) => o.proposal_id === big)).toMatchObject({ outcome: 'NEEDS_PERSON' });
      expect(outcomes.find((o) => o.proposal_id === big)?.reason).toContain('cards 2 > 1');
    },
  );

  it.runIf(sandboxed)('list shows who asked for a person, and why', async () => {
    const r = await runCli(run, ['list'], env);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('NEEDS_PERSON');
    expect(r.stdout).toMatch(/cards 2 > 1 \(llm\)/);
  });

  it('agent needs --command', async () => {
    const r = await runCli(run, ['agent', '--once'], env);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--command is required');
  });
});
