import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap, systemMounts } from '../../../../worker/sandbox/bwrap.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import { findHelper } from '../../../../worker/sandbox/helper-commands.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, text } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';

/**
 * docs/security.md "The task sandbox", attacked again: behind bwrap + setpriv the task's env travels in a file read by bash
 * after the uid drop (bwrap.ts TASK_ENV_FILE). Values that a shell, `read` or `env` could take apart
 * (newlines, `=`, a leading `-`, quotes, `$(…)`, backslashes, an empty value) reach the task byte for
 * byte, and nothing of them runs.
 */

const probe = await probeBwrap({ root: isRoot });
const shell = findHelper('bash');
const ready = requireOrSkip(
  'bubblewrap, setpriv and bash as root',
  isRoot &&
    probe.ok &&
    probe.bwrap !== null &&
    probe.env !== null &&
    probe.setpriv !== null &&
    shell !== null,
  probe.detail,
);

let dataDir: string;
let sandbox: Extract<SandboxSetup, { kind: 'bwrap' }>;

beforeAll(async () => {
  if (!ready || probe.bwrap === null || probe.env === null) return;
  dataDir = mkdtempSync(join('/var/tmp', 'gpu-broker-env-file-'));
  sandbox = {
    kind: 'bwrap',
    bwrap: probe.bwrap,
    setpriv: probe.setpriv,
    envHelper: probe.env,
    shell,
    native: null,
    uids: new TaskUidPool({ first: 2_000_540_000, last: 2_000_540_099 }),
    hiddenPaths: [dataDir],
    system: systemMounts(),
    simNodes: await makeSimDeviceNodes(join(dataDir, 'devices'), 1, true),
  };
});
afterAll(() => {
  if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
});

const VALUES: Record<string, string> = {
  LINES: 'one\ntwo\n\nthree\n',
  EQUALS: 'x=y=z',
  DASH: '-i',
  QUOTES: `'"\`id\`$(id)\${HOME}`,
  BACKSLASH: 'a\\0b\\\\c\\n',
  EMPTY: '',
  SPACES: '  lead and trail  ',
  UNICODE: 'naïve — ☃',
};

describe.runIf(ready)('the task env file behind setpriv', () => {
  it('attack: values a shell or read could take apart reach the task byte for byte; nothing of them runs', async () => {
    const chunks: Chunk[] = [];
    const plan = makePlan({
      argv: [
        '/usr/bin/python3',
        '-c',
        `import json, os; print(json.dumps({k: os.environ.get(k) for k in ${JSON.stringify(Object.keys(VALUES))}}))`,
      ],
      env: VALUES,
    });
    const handle = startExecution(plan, {
      rootDir: join(dataDir, 'executions'),
      workerId: 'worker-env-file',
      provider: 'sim',
      onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
      cleanupPollMs: 20,
      sandbox,
    });
    const result = await handle.done;
    expect(result.failure_reason, text(chunks, 'stderr')).toBeNull();
    expect(JSON.parse(text(chunks, 'stdout'))).toEqual(VALUES);
  });
});
