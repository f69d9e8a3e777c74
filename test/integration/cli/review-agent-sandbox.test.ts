import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMENT_HEAD } from '../../../src/cli/review/model-reasons.js';
import { run } from '../../../src/cli/review/review.js';
import { tokenLeakIn } from '../../../src/domain/policy/token-leak.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { probeBwrap } from '../../../worker/sandbox/bwrap.js';
import { ensureBuilt } from '../../support/build.js';
import { builtCliPath, runCli } from '../../support/cli.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { proposeInReview } from '../../support/proposals.js';
import { isRoot, requireOrSkip } from '../../support/require-or-skip.js';
import { validSpec } from '../../support/spec.js';
import { makeGateDir, makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * ADR 0041: an agent reviewer's model can never reach a credential. The built CLI runs
 * `review agent` the way an operator would — the token in its environment, in a token file (left
 * readable by everyone, in a dir the sandbox binds), open on fd 7, in its data dir, its cwd's and its
 * HOME's `.gpu-broker/` — with a model (token-thief-model.sh) that tries every way we know to find a
 * token and puts all it found in its reasons. Sandboxed, it finds nothing and every read fails; run
 * with --unsandboxed-model it does find the token (so the thief works), and then the loop withholds the
 * verdict: no comment, no decision.
 */

const THIEF = join(packageRoot(), 'test/fixtures/review-corpus/token-thief-model.sh');
const probe = await probeBwrap({ root: isRoot });
const sandboxed = requireOrSkip('bubblewrap', probe.ok, probe.detail);

let m: TestMaster;
let token: string;
let env: Record<string, string>;
let cwd: string;
let tokenFile: string;

beforeAll(async () => {
  ensureBuilt();
  m = await startTestMaster();
  token = m.createToken('llm', ['agent_reviewer']);
  // In /var/tmp, which the sandbox binds read-only with the rest of /var: only hiding keeps it out.
  const secrets = makeGateDir('model-secrets');
  tokenFile = join(secrets, 'reviewer.token');
  writeFileSync(tokenFile, `${token}\n`);
  chmodSync(tokenFile, 0o644);
  const dataDir = join(secrets, 'data');
  mkdirSync(dataDir, { mode: 0o755 });
  writeFileSync(join(dataDir, 'operator.token'), m.operatorToken, { mode: 0o644 });
  const home = makeTempDir('model-home');
  cwd = makeTempDir('model-cwd');
  for (const dir of [home, cwd]) {
    mkdirSync(join(dir, '.gpu-broker'));
    writeFileSync(join(dir, '.gpu-broker', 'reviewer.token'), token);
  }
  env = {
    PATH: process.env['PATH'] ?? '/usr/bin:/bin',
    HOME: home,
    GPU_BROKER_URL: m.url,
    GPU_BROKER_TOKEN: token,
    GPU_BROKER_TOKEN_FILE: tokenFile,
    GPU_BROKER_CA_FILE: m.caCertPath ?? '',
    GPU_BROKER_HOME: dataDir,
    THIEF_TOKEN_FILE: tokenFile,
    THIEF_DATA_DIR: dataDir,
    THIEF_HOME: home,
    THIEF_CWD: cwd,
    THIEF_MASTER: new URL(m.url).host,
  };
}, 120_000);

afterAll(async () => {
  await m?.close();
  removeTempDirs();
});

const HINTS = [
  'THIEF_TOKEN_FILE',
  'THIEF_DATA_DIR',
  'THIEF_HOME',
  'THIEF_CWD',
  'THIEF_MASTER',
  'THIEF_LOOP_PID',
];

interface Outcome {
  proposal_id: string;
  outcome: string;
  reason: string;
}

/** Runs the built `review agent --once --json` with the token also open on fd 7 (not close-on-exec). */
function loop(
  args: string[],
  extraEnv: Record<string, string> = {},
): Promise<{ code: number | null; outcomes: Outcome[]; stderr: string }> {
  const argv = ['review', 'agent', '--command', `sh ${THIEF}`, '--once', '--json', ...args];
  for (const name of [...HINTS, ...Object.keys(extraEnv)]) argv.push('--model-env', name);
  return new Promise((resolve, reject) => {
    const child = spawn(
      '/bin/sh',
      [
        '-c',
        'exec 7<"$GPU_BROKER_TOKEN_FILE"; export THIEF_LOOP_PID=$$; exec "$@"',
        'sh',
        process.execPath,
        builtCliPath(),
        ...argv,
      ],
      { cwd, env: { ...env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => {
      stdout += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => {
      try {
        resolve({ code, outcomes: (JSON.parse(stdout) as { outcomes: Outcome[] }).outcomes, stderr });
      } catch {
        reject(new Error(`not JSON (exit ${code}): ${stdout}\n${stderr}`));
      }
    });
  });
}

const commentsOf = (proposalId: string) => m.store.proposals.reviews(proposalId).map((r) => r.comments);

describe.runIf(sandboxed)('review agent: the model cannot reach a credential', () => {
  it('sandboxed, the thief finds nothing: every read of the loop, its files and its descriptors fails', async () => {
    const sam = await m.mcpClient(m.createToken('sam', ['submitter']));
    const { proposal_id } = await proposeInReview(sam, validSpec({ title: 'steal the reviewer token' }));
    const r = await loop(['--model-bind', dirname(THIEF)]);
    expect(r.code).toBe(0);
    expect(r.outcomes).toEqual([expect.objectContaining({ proposal_id, outcome: 'CHANGES_REQUESTED' })]);
    const [comment] = commentsOf(proposal_id);
    expect(comment).toBeDefined();
    expect(comment).not.toContain(token);
    expect(comment).not.toContain(m.operatorToken);
    expect(tokenLeakIn(comment!, [token, m.operatorToken])).toBeNull();
    expect(comment).toMatch(/^> FOUND:$/m);
    // The model's words, quoted under gpu-broker's own first line.
    expect(comment!.split('\n')[0]).toBe(COMMENT_HEAD);
    expect(
      comment!
        .split('\n')
        .slice(1, -1)
        .every((l) => l.startsWith('> ')),
    ).toBe(true);
    // Each way in, tried and failed.
    expect(comment).toContain('> LOOP_PID: FAILED');
    expect(comment).toMatch(/> TOKEN_FILE \([^)]*\): FAILED/);
    expect(comment).toContain('> DATA_DIR_LIST: FAILED');
    expect(comment).not.toMatch(/(HOME|CWD|DATA_DIR|FOUND_TOKEN)_FILE \([^)]*\): READ/);
    expect(comment).toMatch(/> NET \([^)]*\): FAILED/);
    // The environment: the fixed allowlist and the names passed with --model-env, nothing else.
    const names = /^> ENV: READ (.*)$/m.exec(comment!)?.[1]?.trim().split(' ') ?? [];
    const shell = ['PWD', 'SHLVL', 'OLDPWD', '_'];
    expect(names.filter((n) => !shell.includes(n)).sort()).toEqual(
      ['HOME', 'LANG', 'PATH', 'TMPDIR', ...HINTS].sort(),
    );
    // Only stdio, /dev/null where the loop had fd 7 and the like, and the thief's own script.
    const fds = [...comment!.matchAll(/^> FD (\d+) -> (.*)$/gm)].map((x) => [Number(x[1]), x[2]] as const);
    expect(fds.length).toBeGreaterThanOrEqual(3);
    for (const [n, target] of fds) if (n > 2) expect([THIEF, '/dev/null']).toContain(target);
  }, 120_000);

  it.each(['raw', 'base64'])(
    'unsandboxed, the thief finds the token (%s in its reasons), and the loop withholds the verdict',
    async (encoding) => {
      const sam = await m.mcpClient(m.createToken(`sam-${encoding}`, ['submitter']));
      const { proposal_id } = await proposeInReview(sam, validSpec({ title: `steal it, ${encoding}` }));
      const r = await loop(['--unsandboxed-model'], encoding === 'base64' ? { THIEF_ENCODE: 'base64' } : {});
      expect(r.stderr).toContain('WARNING: --unsandboxed-model');
      const mine = r.outcomes.find((o) => o.proposal_id === proposal_id);
      expect(mine).toMatchObject({ outcome: 'NO_DECISION' });
      expect(mine?.reason).toContain(encoding === 'base64' ? 'a base64-encoded token' : 'a token as written');
      expect(JSON.stringify(r.outcomes)).not.toContain(token);
      expect(commentsOf(proposal_id)).toEqual([]);
    },
    120_000,
  );
});

describe('review agent: the sandbox flags', () => {
  const inProcess = (args: string[], extra: Record<string, string> = {}) =>
    runCli(run, ['agent', '--command', 'true', '--once', ...args], { ...env, ...extra });

  it('never forwards a GPU_BROKER_* variable, nor one that is not set', async () => {
    const a = await inProcess(['--model-env', 'GPU_BROKER_TOKEN']);
    expect(a.code).toBe(2);
    expect(a.stderr).toContain("gpu-broker's own variables never reach the model");
    const b = await inProcess(['--model-env', 'NOT_SET_ANYWHERE']);
    expect(b.code).toBe(2);
    expect(b.stderr).toContain('not set in this environment');
  });

  it('refuses a bind that would show the token file, a data dir or a home dir', async () => {
    const home = env['HOME'] ?? '';
    for (const bind of [
      dirname(tokenFile),
      env['THIEF_DATA_DIR'] ?? '',
      join(home, '.gpu-broker'),
      home,
      '/',
    ]) {
      const r = await inProcess(['--model-bind', bind]);
      expect(r.code, bind).toBe(2);
      expect(r.stderr, bind).toContain('--model-bind');
    }
  });

  it('refuses an unknown network, and sandbox flags with --unsandboxed-model', async () => {
    expect((await inProcess(['--model-network', 'bridge'])).stderr).toContain('expected none or host');
    const r = await inProcess(['--unsandboxed-model', '--model-network', 'host']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--unsandboxed-model turns off');
  });
});
