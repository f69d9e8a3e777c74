import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sandboxedModel } from '../../../src/cli/review/model-sandbox.js';
import { probeBwrap } from '../../../worker/sandbox/bwrap.js';
import { isRoot, requireOrSkip } from '../../support/require-or-skip.js';
import { makeGateDir, makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * ADR 0041, attacked again (fresh-eyes review): what a model command can still see of the
 * loop's secrets when the operator's setup is not the one the authors tested.
 */

const probe = await probeBwrap({ root: isRoot });
const sandboxed = requireOrSkip('bubblewrap', probe.ok, probe.detail);

afterAll(() => removeTempDirs());

const runIn = async (command: string, tokenFile: string, cwd: string, env: Record<string, string> = {}) => {
  const model = await sandboxedModel({
    command,
    timeoutMs: 20_000,
    network: 'none',
    binds: [],
    envNames: [],
    parentEnv: { HOME: makeTempDir('model-attack-home'), ...env },
    cwd,
    tokenFile,
    root: isRoot,
  });
  return model('prompt');
};

describe.runIf(sandboxed)('model sandbox, attacked again', () => {
  it('hides the token file’s siblings: the operator and agent tokens `start` writes beside it', async () => {
    // A data dir in a system dir (here /var/tmp), not named gpu-broker*, and no GPU_BROKER_HOME in the
    // loop's environment: the reviewer was only told the token file.
    const data = makeGateDir('model-siblings');
    const tokenFile = join(data, 'reviewer.token');
    writeFileSync(tokenFile, 'gpb_reviewerreviewerreviewerreviewerreviewer1');
    writeFileSync(join(data, 'operator.token'), 'gpb_operatoroperatoroperatoroperatoroperator1');
    chmodSync(join(data, 'operator.token'), 0o644);
    mkdirSync(join(data, 'db'));
    const answer = await runIn(
      `cat ${data}/reviewer.token; cat ${data}/operator.token; ls ${data}; true`,
      tokenFile,
      makeTempDir('model-attack-cwd'),
    );
    expect(answer.stdout).not.toBeNull();
    expect(answer.stdout).not.toContain('gpb_');
    expect(answer.stdout).not.toContain('operator.token');
  }, 60_000);
});
