import { execFileSync } from 'node:child_process';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approveTask,
  clusterConfig,
  waitForAvailableCards,
  waitUntilSettled,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { validSpec } from '../../support/spec.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * docs/security.md "Code the reviewer did not read", end to end: an interpreter running a script from the inputs runs in its isolated
 * mode. The master computes the argv (`ExecutionPlan.argv`, src/domain/policy/run-argv.ts) and a real bwrap
 * worker executes it. Even under a policy that lets PYTHONPATH through and allows implicit code, Python
 * neither reads PYTHON* variables nor imports a usercustomize.py from the user site (HOME is the task
 * dir), while the reviewed script still imports its sibling module.
 */

const PY = '/usr/bin/python3';
const version = execFileSync(PY, ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])'], {
  encoding: 'utf8',
}).trim();

const MAIN = `import importlib.util, json, os, sys
import helper
out = {
    'flags': [sys.flags.ignore_environment, sys.flags.no_user_site],
    'helper': helper.X,
    'extra_importable': importlib.util.find_spec('extra') is not None,
    'usercustomize': 'usercustomize' in sys.modules,
    'pythonpath_env': os.environ.get('PYTHONPATH'),
}
with open(os.path.join(os.environ['GPU_BROKER_OUTPUT_DIR'], 'result.json'), 'w') as f:
    json.dump(out, f)
`;

let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let k = 0;
const key = () => `isolation-${process.pid}-${++k}`;

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({
      policy: {
        scripts: [{ interpreter: PY, script_from_inputs: true }],
        allowed_control_env: ['PYTHONPATH'],
        allow_implicit_code: true,
      },
    }),
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-isolated-python', { hiddenPaths: [m.dataDir] });
  await waitForAvailableCards(m, 4, 'four available cards');
}, 60_000);

afterAll(async () => {
  await w?.close();
  await m?.close();
});

describe('a script from the inputs runs in Python’s isolated mode', () => {
  it('ignores PYTHONPATH and the user site, and still imports its sibling module', async () => {
    const uploaded = expectOk(
      await callTool<{ inputs: Array<{ path: string; sha256: string; size: number }> }>(
        alice,
        'upload_inputs',
        {
          files: [
            { path: 'main.py', content: MAIN },
            { path: 'helper.py', content: 'X = 42\n' },
            { path: 'shadow/extra.py', content: 'Y = 1\n' },
            {
              path: `.local/lib/python${version}/site-packages/usercustomize.py`,
              content: 'open("/task/out/usercustomize-ran", "w").close()\n',
            },
          ],
          idempotency_key: key(),
        },
      ),
    ).inputs;
    const taskId = await approveTask(
      alice,
      rita,
      validSpec({
        runtime: { kind: 'process', argv: [PY, 'main.py'], env: { PYTHONPATH: '/task/shadow' } },
        inputs: uploaded,
        outputs: [{ path: 'result.json', required: true }],
      }),
    );
    const task = await waitUntilSettled(alice, taskId);
    expect(task).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const out = expectOk(
      await callTool<{ file: { content: string } | null }>(alice, 'get_task_outputs', {
        task_id: taskId,
        path: 'result.json',
      }),
    );
    expect(JSON.parse(out.file!.content)).toEqual({
      flags: [1, 1],
      helper: 42,
      extra_importable: false,
      usercustomize: false,
      pythonpath_env: '/task/shadow',
    });
  });
});
