import { createHash } from 'node:crypto';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RevisionResult } from '../../../src/broker/tools/proposals.js';
import type { TaskSpecInput } from '../../../src/contracts/task-spec.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import {
  approveTask,
  clusterConfig,
  executionDetail,
  getTask,
  shellSpec,
  waitForAvailableCards,
  waitUntilSettled,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import type { UploadResult } from '../../support/proposals.js';
import { validSpec } from '../../support/spec.js';
import { makeTempDir } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * ADR 0012, "done when": an agent with only MCP uploads a two-file Python project, proposes it with
 * `inputs`, a reviewer reads the manifest, asks for a change, sees the text diff of the revision and
 * approves; the real sandboxed worker fetches, verifies and places the files read-only, and the task's
 * output shows it ran exactly the approved bytes. Then the attacks: a tampered blob in the worker's
 * cache and in the master's store, unknown digests, bad paths, caps, quotas, and the byte routes.
 */

const PYTHON = '/usr/bin/python3';
const QUOTA = 3 * 1024 * 1024;

type Upload = UploadResult;
type Revision = RevisionResult;

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let dataset: string;
let k = 0;
const key = () => `inputs-${process.pid}-${++k}`;
const sha = (text: string | Buffer) => createHash('sha256').update(text).digest('hex');

const MAIN = `import hashlib, json, os
import helper

def digest(name):
    with open(name, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()

attempts = {}
for what, act in [
    ('write', lambda: open('main.py', 'a').write('# changed by the task\\n')),
    ('rename', lambda: os.rename('helper.py', 'stolen.py')),
    ('remove', lambda: os.remove('main.py')),
    ('symlink', lambda: os.symlink('/etc/passwd', 'lib/evil')),
]:
    try:
        act()
        attempts[what] = 'allowed'
    except OSError as e:
        attempts[what] = type(e).__name__

result = {
    'main': digest('main.py'),
    'helper': digest('helper.py'),
    'version': helper.VERSION,
    'greeting': helper.greet(),
    'attempts': attempts,
    'cwd': os.getcwd(),
}
with open(os.path.join(os.environ['GPU_BROKER_OUTPUT_DIR'], 'result.json'), 'w') as f:
    json.dump(result, f)
`;
const HELPER_V1 = `VERSION = 1\n\ndef greet():\n    return 'hello from helper v1'\n`;
const HELPER_V2 = `VERSION = 2\n\ndef greet():\n    return 'hello from helper v2'\n`;
const LIB = '# a package dir so that lib/ exists\n';

function pythonSpec(inputs: Upload['inputs'], overrides: Partial<TaskSpecInput> = {}): TaskSpecInput {
  return validSpec({
    title: 'two-file python project',
    runtime: { kind: 'process', argv: [PYTHON, 'main.py'] },
    inputs,
    outputs: [{ path: 'result.json', required: true }],
    time_limit_seconds: 60,
    ...overrides,
  });
}

async function upload(client: Client, files: Array<{ path: string; content: string; encoding?: string }>) {
  return callTool<Upload>(client, 'upload_inputs', { files, idempotency_key: key() });
}

async function resultOf(taskId: string): Promise<Record<string, unknown>> {
  const out = expectOk(
    await callTool<{ file: { content: string } | null }>(alice, 'get_task_outputs', {
      task_id: taskId,
      path: 'result.json',
    }),
  );
  return JSON.parse(out.file!.content) as Record<string, unknown>;
}

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({
      policy: {
        scripts: [{ interpreter: PYTHON, script_from_inputs: true }],
        input_quota_bytes: QUOTA,
        max_input_files: 5,
        max_input_bytes: 64 * 1024,
      },
    }),
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  dataset = makeTempDir('dataset');
  chmodSync(dataset, 0o755);
  writeFileSync(join(dataset, 'labels.txt'), 'cat\ndog\n', { mode: 0o644 });
  const other = makeTempDir('other-data');
  chmodSync(other, 0o755);
  w = await startWorkerOn(m, 'gpu-inputs', {
    hiddenPaths: [m.dataDir],
    mounts: [
      { name: 'dataset', host_path: dataset, read_only: true },
      { name: 'other', host_path: other, read_only: true },
    ],
  });
  await waitForAvailableCards(m, 4, 'four available cards on gpu-inputs');
}, 60_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
});

describe('an agent with only MCP gets its own two-file project reviewed and run', () => {
  let v1: Upload['inputs'];
  let v2: Upload['inputs'];
  let taskId: string;

  it('uploads, proposes, is asked for a change, revises; the reviewer sees the manifest and the diff', async () => {
    v1 = expectOk(
      await upload(alice, [
        { path: 'main.py', content: MAIN },
        { path: 'helper.py', content: HELPER_V1 },
        { path: 'lib/__init__.py', content: Buffer.from(LIB).toString('base64'), encoding: 'base64' },
      ]),
    ).inputs;
    expect(v1).toEqual([
      { path: 'main.py', sha256: sha(MAIN), size: Buffer.byteLength(MAIN) },
      { path: 'helper.py', sha256: sha(HELPER_V1), size: Buffer.byteLength(HELPER_V1) },
      { path: 'lib/__init__.py', sha256: sha(LIB), size: Buffer.byteLength(LIB) },
    ]);
    // Idempotent by content: the same bytes again store nothing new.
    const again = expectOk(await upload(alice, [{ path: 'other/name.py', content: MAIN }]));
    expect(again.stored_bytes).toBe(0);
    expect(again.inputs[0]!.sha256).toBe(sha(MAIN));

    const created = expectOk(
      await callTool<Revision>(alice, 'create_proposal', { spec: pythonSpec(v1), idempotency_key: key() }),
    );
    expect(created.confirmable).toBe(true);
    expect(created.findings.map((f) => f.code)).toContain('SCRIPT_FROM_INPUTS');
    expectOk(
      await callTool(alice, 'confirm_revision', {
        proposal_id: created.proposal_id,
        revision_id: created.revision_id,
        idempotency_key: key(),
      }),
    );
    const first = expectOk(
      await callTool<{ inputs: unknown[]; input_changes: Array<{ path: string; change: string }> }>(
        rita,
        'get_revision',
        {
          proposal_id: created.proposal_id,
          revision_id: created.revision_id,
        },
      ),
    );
    expect(first.inputs).toEqual(v1);
    // Revision 1 is diffed against nothing: every file shows as added, text files line by line.
    expect(first.input_changes.map((c) => [c.path, c.change])).toEqual([
      ['helper.py', 'added'],
      ['lib/__init__.py', 'added'],
      ['main.py', 'added'],
    ]);
    const helperText = expectOk(
      await callTool<{ content: string; encoding: string; complete: boolean }>(rita, 'get_input', {
        proposal_id: created.proposal_id,
        revision_id: created.revision_id,
        path: 'helper.py',
      }),
    );
    expect(helperText).toMatchObject({ content: HELPER_V1, encoding: 'utf8', complete: true });
    expectOk(
      await callTool(rita, 'submit_review', {
        proposal_id: created.proposal_id,
        revision_id: created.revision_id,
        revision_digest: created.digest,
        decision: 'REQUEST_CHANGES',
        comments: 'bump helper to v2',
        idempotency_key: key(),
      }),
    );

    const helper2 = expectOk(await upload(alice, [{ path: 'helper.py', content: HELPER_V2 }])).inputs[0]!;
    v2 = v1.map((i) => (i.path === 'helper.py' ? helper2 : i));
    const revised = expectOk(
      await callTool<Revision>(alice, 'revise_proposal', {
        proposal_id: created.proposal_id,
        spec: pythonSpec(v2),
        idempotency_key: key(),
      }),
    );
    expect(revised.digest).not.toBe(created.digest);
    expectOk(
      await callTool(alice, 'confirm_revision', {
        proposal_id: created.proposal_id,
        revision_id: revised.revision_id,
        idempotency_key: key(),
      }),
    );
    const second = expectOk(
      await callTool<{
        inputs: unknown[];
        input_changes: Array<{ path: string; change: string; text_diff?: { unified: string } }>;
      }>(rita, 'get_revision', { proposal_id: created.proposal_id, revision_id: revised.revision_id }),
    );
    expect(second.inputs).toEqual(v2);
    expect(second.input_changes).toHaveLength(1);
    expect(second.input_changes[0]).toMatchObject({ path: 'helper.py', change: 'modified' });
    expect(second.input_changes[0]!.text_diff!.unified).toBe(
      [
        '@@ -1,4 +1,4 @@',
        '-VERSION = 1',
        '+VERSION = 2',
        ' ',
        ' def greet():',
        "-    return 'hello from helper v1'",
        "+    return 'hello from helper v2'",
      ].join('\n'),
    );
    const approved = expectOk(
      await callTool<{ task_id: string }>(rita, 'submit_review', {
        proposal_id: created.proposal_id,
        revision_id: revised.revision_id,
        revision_digest: revised.digest,
        decision: 'APPROVE',
        comments: 'read main.py and helper.py v2',
        idempotency_key: key(),
      }),
    );
    taskId = approved.task_id;
  });

  it('runs exactly the approved bytes, read-only, in the sandbox', async () => {
    const task = await waitUntilSettled(alice, taskId);
    expect(task, executionDetail(m, taskId)).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const result = await resultOf(taskId);
    expect(result).toMatchObject({
      main: sha(MAIN),
      helper: sha(HELPER_V2),
      version: 2,
      greeting: 'hello from helper v2',
      cwd: '/task',
    });
    // Nothing the task could do changed, replaced or added to what was approved.
    expect(result['attempts']).toEqual({
      write: expect.stringMatching(/Error/),
      rename: expect.stringMatching(/Error/),
      remove: expect.stringMatching(/Error/),
      symlink: expect.stringMatching(/Error/),
    });
  });

  it('catches a blob tampered in the worker cache: SETUP_FAILED naming the file, never run', async () => {
    const cached = join(w.dataDir, 'input-cache', sha(HELPER_V2));
    expect(readFileSync(cached, 'utf8')).toBe(HELPER_V2);
    writeFileSync(cached, HELPER_V2.replace('v2', 'XX'));
    const id = await approveTask(alice, rita, pythonSpec(v2));
    const task = await waitUntilSettled(alice, id);
    expect(task).toMatchObject({ state: 'FAILED', failure_reason: 'SETUP_FAILED', exit_code: null });
    expect(executionDetail(m, id)).toMatch(
      /input helper\.py: the worker's cached copy of sha256 [0-9a-f]{64}/,
    );
    // The agent reads the same through MCP.
    expect(task.failure_detail).toMatch(/input helper\.py: the worker's cached copy/);
    // The damaged entry is gone: the next run fetches it again from the master and runs.
    const retry = await approveTask(alice, rita, pythonSpec(v2));
    expect(await waitUntilSettled(alice, retry)).toMatchObject({ state: 'COMPLETED' });
    expect(readFileSync(cached, 'utf8')).toBe(HELPER_V2);
  });

  it('catches a blob tampered in the master store: never served, the task fails setup', async () => {
    const data = 'numbers: 1 2 3\n';
    const uploaded = expectOk(await upload(alice, [{ path: 'data.txt', content: data }])).inputs[0]!;
    m.store.db
      .prepare('UPDATE blobs SET content = ? WHERE sha256 = ?')
      .run(Buffer.from('numbers: 6 6 6\n'), uploaded.sha256);
    const id = await approveTask(alice, rita, pythonSpec([...v2, uploaded]));
    const task = await waitUntilSettled(alice, id);
    expect(task).toMatchObject({ state: 'FAILED', failure_reason: 'SETUP_FAILED' });
    expect(executionDetail(m, id)).toMatch(
      /input data\.txt: cannot fetch sha256 [0-9a-f]{64} from the master: .*500/,
    );
  });
});

describe('what a proposal with inputs may not do', () => {
  it('an unknown digest or a wrong size is an error finding that blocks confirmation', async () => {
    const unknown = { path: 'ghost.py', sha256: sha('never uploaded'), size: 14 };
    const wrongSize = { path: 'main.py', sha256: sha(MAIN), size: 3 };
    const r = expectOk(
      await callTool<Revision>(alice, 'create_proposal', {
        spec: pythonSpec([unknown, wrongSize]),
        idempotency_key: key(),
      }),
    );
    expect(r.confirmable).toBe(false);
    expect(r.findings.filter((f) => f.severity === 'error').map((f) => [f.code, f.path])).toEqual([
      ['INPUT_UNKNOWN', 'inputs[0].sha256'],
      ['INPUT_SIZE_MISMATCH', 'inputs[1].size'],
    ]);
  });

  it('too many or too large inputs are findings', async () => {
    const many = Array.from({ length: 6 }, (_, i) => ({
      path: `f${i}.py`,
      sha256: sha(MAIN),
      size: Buffer.byteLength(MAIN),
    }));
    const r = expectOk(
      await callTool<Revision>(alice, 'create_proposal', { spec: pythonSpec(many), idempotency_key: key() }),
    );
    expect(r.findings.map((f) => f.code)).toContain('INPUTS_TOO_MANY');
    const big = Buffer.alloc(65 * 1024, 7).toString('base64');
    const blob = expectOk(await upload(alice, [{ path: 'big.bin', content: big, encoding: 'base64' }]))
      .inputs[0]!;
    const r2 = expectOk(
      await callTool<Revision>(alice, 'create_proposal', {
        spec: pythonSpec([blob]),
        idempotency_key: key(),
      }),
    );
    expect(r2.findings.map((f) => f.code)).toContain('INPUTS_TOO_LARGE');
  });

  it('refuses paths with .., absolute paths, backslashes, the output dir and duplicates', async () => {
    for (const path of [
      '../escape.py',
      '/etc/passwd',
      'a/../../b',
      'a\\b.py',
      'out/result.json',
      './x',
      'a//b',
    ]) {
      expectError(await upload(alice, [{ path, content: 'x' }]), 'INVALID_INPUT');
      const spec = pythonSpec([{ path, sha256: sha('x'), size: 1 }]);
      expectError(
        await callTool(alice, 'create_proposal', { spec, idempotency_key: key() }),
        'INVALID_INPUT',
      );
    }
    const dup = [
      { path: 'a.py', sha256: sha('x'), size: 1 },
      { path: 'a.py', sha256: sha('y'), size: 1 },
    ];
    expectError(
      await callTool(alice, 'create_proposal', { spec: pythonSpec(dup), idempotency_key: key() }),
      'INVALID_INPUT',
    );
    const nested = [
      { path: 'a', sha256: sha('x'), size: 1 },
      { path: 'a/b', sha256: sha('y'), size: 1 },
    ];
    expectError(
      await callTool(alice, 'create_proposal', { spec: pythonSpec(nested), idempotency_key: key() }),
      'INVALID_INPUT',
    );
    expectError(
      await upload(alice, [{ path: 'bad.bin', content: 'not base64!', encoding: 'base64' }]),
      'INVALID_INPUT',
    );
  });

  it('caps one upload call and each principal’s stored bytes with typed errors', async () => {
    const tooBig = Buffer.alloc(1024 * 1024 + 1, 1).toString('base64');
    expectError(
      await upload(alice, [{ path: 'x.bin', content: tooBig, encoding: 'base64' }]),
      'PAYLOAD_TOO_LARGE',
    );
    const bob = await m.mcpClient(m.createToken('bob', ['submitter']));
    const chunk = (n: number) => Buffer.alloc(1000 * 1024, n).toString('base64');
    for (const n of [1, 2, 3])
      expectOk(await upload(bob, [{ path: `c${n}.bin`, content: chunk(n), encoding: 'base64' }]));
    const over = expectError(
      await upload(bob, [{ path: 'c4.bin', content: chunk(4), encoding: 'base64' }]),
      'QUOTA_EXCEEDED',
    );
    expect(over.details).toMatchObject({ limit_bytes: QUOTA });
  });
});

describe('the SKILL.md worked example', () => {
  it('uploads the example files, matches the example spec’s digests, and runs on simulated cards', async () => {
    const base = join(packageRoot(), 'client-kit', 'examples');
    const spec = JSON.parse(readFileSync(join(base, 'python-inputs-1card.json'), 'utf8')) as TaskSpecInput;
    const files = ['train.py', 'mathlib.py'].map((path) => ({
      path,
      content: readFileSync(join(base, 'python-inputs', path), 'utf8'),
    }));
    expect(expectOk(await upload(alice, files)).inputs).toEqual(spec.inputs);
    const id = await approveTask(alice, rita, spec);
    expect(await waitUntilSettled(alice, id)).toMatchObject({ state: 'COMPLETED', simulated: true });
    expect(await resultOf(id)).toMatchObject({ dot: 32 });
  });
});

describe('named data mounts', () => {
  const SCRIPT = [
    'cat /mnt/dataset/labels.txt',
    'ls /mnt',
    'if echo x > /mnt/dataset/new 2>/dev/null; then echo WRITE_OK; else echo WRITE_REFUSED; fi',
  ].join('; ');

  it('binds exactly the asked-for mount, read-only, at /mnt/<name>', async () => {
    const id = await approveTask(alice, rita, shellSpec(SCRIPT, { mounts: ['dataset'] }));
    const task = await waitUntilSettled(alice, id);
    expect(task, task.failure_detail ?? '').toMatchObject({ state: 'COMPLETED' });
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: id })).data;
    expect(logs).toBe('cat\ndog\ndataset\nWRITE_REFUSED\n');
  });

  it('shows no mount to a task that asked for none', async () => {
    const id = await approveTask(alice, rita, shellSpec('ls /mnt 2>&1 || echo NO_MNT'));
    await waitUntilSettled(alice, id);
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: id })).data;
    expect(logs).toContain('NO_MNT');
  });

  it('a mount no worker offers is a finding, and the task waits with a reason', async () => {
    const created = expectOk(
      await callTool<Revision>(alice, 'create_proposal', {
        spec: shellSpec('true', { mounts: ['imagenet'] }),
        idempotency_key: key(),
      }),
    );
    expect(created.findings.map((f) => f.code)).toContain('MOUNT_NOT_OFFERED');
    const id = await approveTask(alice, rita, shellSpec('true', { mounts: ['imagenet'] }));
    await waitFor(async () => (await getTask(alice, id)).reason?.['code'] === 'mount_missing', {
      what: 'mount_missing reason',
    });
    expectOk(await callTool(alice, 'cancel_task', { task_id: id, idempotency_key: key() }));
  });
});

describe('the byte routes', () => {
  it('PUT /api/v1/blobs/{sha256} recomputes the digest and refuses a mismatch', async () => {
    const token = m.createToken('carol', ['submitter']);
    const body = Buffer.from('raw bytes for the CLI\n');
    const put = (digest: string, bytes: Buffer, bearer = token) =>
      m.fetch(`${m.url}/api/v1/blobs/${digest}`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/octet-stream' },
        body: bytes,
      });
    const bad = await put(sha('something else'), body);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('DIGEST_MISMATCH');
    const ok = await put(sha(body), body);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ sha256: sha(body), size: body.length, stored: true });
    const replay = await put(sha(body), body);
    expect(await replay.json()).toEqual({ sha256: sha(body), size: body.length, stored: false });
    expect((await put(sha(body), body, m.createToken('vic', ['reviewer']))).status).toBe(403);
    // The JSON mirror of the tools: POST /api/v1/inputs and GET …/revisions/:id/input?path=….
    const api = m.rest(token);
    const up = await api.post<{ inputs: Array<{ path: string; sha256: string; size: number }> }>(
      '/api/v1/inputs',
      {
        files: [{ path: 'rest.py', content: 'print(42)\n' }],
      },
    );
    expect(up.status).toBe(200);
    const created = await api.post<{ proposal_id: string; revision_id: string }>('/api/v1/proposals', {
      spec: pythonSpec(up.body.inputs),
    });
    const got = await api.get<{ content: string }>(
      `/api/v1/proposals/${created.body.proposal_id}/revisions/${created.body.revision_id}/input?path=rest.py`,
    );
    expect(got.body.content).toBe('print(42)\n');
    expect((await put(sha(body), body, m.createToken('worker-x', ['worker'], 'wx'))).status).toBe(403);
  });

  it('the worker route serves only worker tokens, only for their own executions', async () => {
    const digest = sha(MAIN);
    const asAlice = await m.fetch(`${m.url}/api/v1/executions/exec_nope/inputs/${digest}`, {
      headers: { authorization: `Bearer ${m.createToken('dave', ['submitter'])}` },
    });
    expect(asAlice.status).toBe(403);
    const asWorker = await m.fetch(`${m.url}/api/v1/executions/exec_nope/inputs/${digest}`, {
      headers: { authorization: `Bearer ${m.createToken('worker-y', ['worker'], 'wy')}` },
    });
    expect(asWorker.status).toBe(404);
  });
});
